"""The sync side of a queued primitive (a lock, a semaphore): one acquire attempt, and the wait
in line after it.  :mod:`django_redis_coord.core.queue.aio` is its asyncio twin (same names and
shape); what they share is in :mod:`django_redis_coord.core.queue.rules`.
"""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from typing import Any, Optional

from redis.exceptions import RedisError

from .. import watchdog as _watchdog
from ..grants import OUTAGE_ERRORS, Grant, Outage
from ..holds import SharedHold, ThreadHold
from ..lock.rules import LockBase
from ..rwlock.rules import RWLockBase
from ..scripts import sync_scripts
from ..semaphore.rules import SemaphoreBase
from ..waiting import sync as waiting
from .rules import GIVE_BACK_TRIES, NO_REPLY, InFlight, QueuedBase

__all__ = ["LockHeldPerThread", "QueuedPrimitive", "RWLockHeldPerThread", "SemaphoreHeldPerThread"]

#: The blocking acquires of this process's threads queued or about to queue, per name (see :class:`InFlight`).
_in_flight = InFlight()


class QueuedPrimitive(QueuedBase):
    """The sync side of a queued primitive: one acquire attempt, and the wait in line after it.

    Subclasses name their scripts (see :class:`~django_redis_coord.core.queue.rules.QueuedBase`); the asyncio
    twin in :mod:`django_redis_coord.core.lock.aio` has the same names and shape.
    """

    scripts = sync_scripts
    _report_loss = QueuedBase._tell_lost

    def _watchdog(self) -> Any:
        return _watchdog.sync_watchdog()

    @staticmethod
    def _worker() -> str:
        """Who is acquiring, for the holder metadata: the current thread's name."""
        return threading.current_thread().name

    def _take(self, token: bytes, blocking: bool, stop_at: Optional[float],
              own: bool = False) -> Optional[tuple[Grant, float]]:
        """Try once and, when ``blocking``, wait in line until ``stop_at``.

        Returns the grant and the instant its hold is measured from, or ``None`` when not granted.
        The first attempt only tries (it writes nothing when refused), so an uncontended acquire
        sets up no waiting.  A refused blocking call then registers with the process's waiting hub
        (see :mod:`~django_redis_coord.core.waiting.sync`) before the attempt that joins the queue, so that no
        announcement of its grant can be missed.  While the primitive's last blocking acquire found
        it taken (:attr:`~django_redis_coord.core.queue.rules.QueuedBase._contended`), or while
        another blocking acquire of this process is queued on the name or about to queue
        (:class:`~django_redis_coord.core.queue.rules.InFlight`), the try is skipped: it registers
        and queues in one call, so that arrival order is queue order.

        Whatever is raised on the way (an exception a signal handler raises: a task's soft time
        limit, an alarm, KeyboardInterrupt; a timeout, a lost connection), a call may have reached
        Redis and granted or queued this token: :meth:`_abandon` undoes it before the exception
        goes on.  The ``try`` costs nothing until something is raised.
        """
        worker = self._worker()
        hub: Any = None
        ticket: Optional[object] = None
        waiter: Optional[waiting.Waiter] = None
        try:
            try:
                if not blocking:
                    sent_at = time.monotonic()
                    return self.taken(self.do_acquire(token, self.acquire_mode(0, own), worker), sent_at)
                hub = waiting.hub_for(self.redis)
                if not (self._contended or _in_flight.busy(self.keys.name)):
                    with hub.gate_for(self.redis):  # bounds the calls of the process's waiters (see waiting)
                        sent_at = time.monotonic()
                        grant = self.do_acquire(token, self.acquire_mode(0, own), worker)
                    if grant.acquired:
                        return grant, sent_at
                ticket = object()  # queued or about to queue: this process's later acquires queue after it
                _in_flight.enter(self.keys.name, ticket)
                waiter = hub.register(self.redis, self.refresh_interval)
                sent_at = time.monotonic()
                with waiter.gate:
                    grant = self.do_acquire(token, self.acquire_mode(1, own), worker, waiter.reply_to())
                self._contended = not grant.acquired
                if not grant.acquired:
                    self._note_wait(grant)  # the waiting path (see core.reporting): tracing hears of it
                    grant, sent_at = self._wait(token, worker, grant, stop_at, sent_at, own, waiter)
                return self.taken(grant, sent_at)
            finally:  # inside the undo's try: an exception raised here may follow a grant
                if ticket is not None:
                    _in_flight.leave(self.keys.name, ticket)
                if waiter is not None:
                    hub.unregister(waiter)
        except BaseException:
            self._abandon(token, worker, waiter)
            raise

    def _wait(
        self, token: bytes, worker: str, grant: Grant, stop_at: Optional[float], sent_at: float,
        own: bool, waiter: waiting.Waiter,
    ) -> tuple[Grant, float]:
        """Wait in the queue until handed the hold, the holder expires or ``stop_at`` passes.

        A hand-off can happen any time after the last queueing call reached Redis (even before
        this thread sleeps), so a hold announced by a message is measured from that call's send
        instant; a hold a call's reply reports (a refresh, a give-up) from that call's, since the
        reply gives the time that was left when it ran.
        Every call goes through the hub's gate (see :attr:`~django_redis_coord.core.waiting.sync.Waiter.gate`).
        A refresh that cannot reach Redis (a failover, a restart) is tried again at the next one,
        for up to :data:`~django_redis_coord.core.grants.OUTAGE_GRACE` seconds in a row.
        """
        queued_at = sent_at
        outage = Outage()
        while True:
            if stop_at is not None and time.monotonic() >= stop_at:
                with waiter.gate:
                    called_at = time.monotonic()
                    return self.do_cancel(token, worker), called_at
            budget = self.wait_budget(grant, stop_at)
            message = waiter.wait(self.refresh_interval if budget is None else min(budget, self.refresh_interval))
            if message:
                grant = self.woken_grant(message)
                if grant.acquired:
                    return grant, queued_at
                continue  # told of a new holder's expiry: wait until then
            with waiter.gate:
                called_at = time.monotonic()
                if stop_at is not None and called_at >= stop_at:
                    return self.do_cancel(token, worker), called_at  # no refresh on the way out
                try:
                    grant = self.do_acquire(token, self.acquire_mode(2, own), worker, waiter.reply_to())
                except OUTAGE_ERRORS:
                    grant = outage.began(called_at)  # raises once the outage lasted too long
                    continue
            outage.ended()
            if grant.acquired:  # the reply's TTL is what was left when this call ran
                return grant, called_at
            queued_at = called_at  # a hand-off announced from now on came after this call ran

    def _abandon(self, token: bytes, worker: str, waiter: Optional[waiting.Waiter] = None) -> None:
        """Undo an acquire stopped by an exception while a call of it may have reached Redis: leave
        the queue and give back a hold this token was granted (whose reply was never read, or just
        handed over), in one script that is right whether or not that happened (see
        :meth:`do_cancel`).  Interrupted in turn (a second signal), it is tried again, up to
        :data:`~django_redis_coord.core.queue.rules.GIVE_BACK_TRIES` times in all; a
        ``KeyboardInterrupt`` or ``SystemExit`` that interrupted it is raised once it is over.
        Best effort when Redis cannot be reached: the TTL and the waiter lease bound what is left."""
        stop: Optional[BaseException] = None
        for _ in range(GIVE_BACK_TRIES):
            try:
                with waiter.gate if waiter is not None else nullcontext():
                    self.do_cancel(token, worker, give_back=True)
                break
            except RedisError:  # the original error matters more; the TTL and the lease bound the rest
                break
            except BaseException as exc:  # interrupted: once more (the original exception is raised after)
                if stop is None and not isinstance(exc, Exception):
                    stop = exc
        if stop is not None:  # a request to stop (KeyboardInterrupt, SystemExit) still stops, after the undo
            raise stop

    def _extend_hold(self, hold: Any, ms: int, mode: str) -> bool:
        """Change the expiry of ``hold`` (its ``token`` and local ``deadline``) in Redis."""
        sent_at = time.monotonic()
        hold.deadline = self.deadline_for(sent_at, self.do_extend(hold.token, ms, mode))
        if getattr(hold, "watched", False):  # a shorter deadline must not wait for the loop's next look
            self._watchdog().look_again()
        return True

    def do_acquire(self, token: bytes, enqueue: int, worker: str, reply_to: tuple[bytes, Any] = NO_REPLY) -> Grant:
        script = self.scripts.get(self.redis, self.acquire_script)
        reply = script(self.acquire_keys(), self.acquire_args(token, enqueue, worker, reply_to), client=self.redis)
        return self.grant_from_reply(reply)

    def do_cancel(self, token: bytes, worker: str, give_back: bool = False) -> Grant:
        """Leave the queue; a hold this token has is kept, or with ``give_back`` released (mode 3
        of the cancel scripts: one script, safe to run again)."""
        script = self.scripts.get(self.redis, self.cancel_script)
        reply = script(self.acquire_keys(), self.acquire_args(token, 3 if give_back else 2, worker),
                       client=self.redis)
        return Grant.from_reply(reply)

    def do_release(self, token: bytes) -> Any:
        raise NotImplementedError

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        raise NotImplementedError


class LockHeldPerThread(QueuedPrimitive, LockBase):
    """Where a sync lock keeps its hold: per thread (``thread_local``, the default), or one hold for
    every thread.  The asyncio twin is :class:`django_redis_coord.core.queue.aio.LockHeldPerTask`;
    the lock's body, the same on both sides, is generated (docs/twins.md)."""

    def _new_local(self) -> Any:
        return ThreadHold() if self.thread_local else SharedHold()

    def _state(self) -> Any:
        """This thread's hold: token, fence, deadline, count, lost (the watchdog updates it)."""
        return self.local.hold

    def _detach(self, local: Any) -> None:
        """Take the hold ``local`` out of the watchdog (before it is released)."""
        if getattr(local, "watched", False):
            self._watchdog().unregister(self, local)


class _SharedRWHolds(SharedHold):
    initial = {"mode": None, "reads": 0, "writes": 0}


class _ThreadRWHolds(ThreadHold):
    initial = _SharedRWHolds.initial


class RWLockHeldPerThread(QueuedPrimitive, RWLockBase):
    """Where a sync read-write lock keeps its hold: per thread (``thread_local``), or one hold for
    every thread.  The asyncio twin is :class:`django_redis_coord.core.queue.aio.RWLockHeldPerTask`."""

    def _new_local(self) -> Any:
        return _ThreadRWHolds() if self.thread_local else _SharedRWHolds()

    def _state(self) -> Any:
        return self.local.hold

    #: Before a release: stop renewing the hold (nothing else ties it to its thread).
    _detach = RWLockBase._stop_watching


class _ThreadStacks(threading.local):
    def __init__(self) -> None:
        self.stack: list[bytes] = []


class SemaphoreHeldPerThread(QueuedPrimitive, SemaphoreBase):
    """Where a sync semaphore keeps the permits taken without an identity: per thread.  The
    asyncio twin is :class:`django_redis_coord.core.queue.aio.SemaphoreHeldPerTask`; the
    semaphore's body, the same on both sides, is generated (docs/twins.md)."""

    def _new_local(self) -> Any:
        return _ThreadStacks()

    def _stack(self) -> list[bytes]:
        return self.local.stack
