"""The wait in line of a queued primitive (a lock, a semaphore, a read-write lock), over
``redis.asyncio``: :class:`Line`, which each family's primitive holds as its ``line``.  The sync
module is generated from this one (docs/twins.md); what differs between a thread and a task is in
:mod:`django_redis_coord.core.side`.

A line knows no family: it takes from its primitive the script of each call (``acquire_script``,
``cancel_script``), the calls' keys and arguments (``acquire_keys``, ``acquire_args``), the rules of
waiting (:class:`~django_redis_coord.core.queue.rules.QueuedBase`) and its ``report`` (the waiting
path's note); a ``hand_over`` hook, when the primitive has one, makes the acquire call.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, Optional

from redis.exceptions import RedisError

from ..concurrency import run_to_completion
from ..grants import OUTAGE_ERRORS, Grant, Outage
from ..side.aio import cancels_pending, raise_swallowed_cancel, worker_name
from ..waiting.aio import AsyncWaiter, hub_for
from .rules import GIVE_BACK_TRIES, NO_REPLY, InFlight

__all__ = ["Line"]

#: The blocking acquires of this side's workers queued or about to queue, per name (see :class:`InFlight`).
_in_flight = InFlight()


class Line:
    """The wait in line of one primitive (``primitive``): one acquire attempt, and the wait after it."""

    __slots__ = ("primitive", "contended")

    def __init__(self, primitive: Any) -> None:
        self.primitive = primitive
        #: A hint: whether the primitive's last blocking acquire found it taken.  While it is, a
        #: blocking acquire registers and queues in one call (a try first would cost a contended
        #: acquire one more script call); else it tries first and sets up no waiting when granted
        #: (unless another blocking acquire of the process is queued on the name: :class:`InFlight`).
        self.contended = False

    async def take(self, token: bytes, blocking: bool, stop_at: Optional[float],
                   own: bool = False) -> Optional[tuple[Grant, float]]:
        """Try once and, when ``blocking``, wait in line until ``stop_at``.

        Returns the grant and the instant its hold is measured from, or ``None`` when not granted.
        The first attempt only tries (it writes nothing when refused), so an uncontended acquire
        sets up no waiting.  A refused blocking call then registers with the process's waiting hub
        (see :mod:`~django_redis_coord.core.waiting.aio`) before the attempt that joins the queue, so that no
        announcement of its grant can be missed.  While the primitive's last blocking acquire found
        it taken (:attr:`contended`), or while another blocking acquire of this process is queued on
        the name or about to queue (:class:`~django_redis_coord.core.queue.rules.InFlight`), the try
        is skipped: it registers and queues in one call, so that arrival order is queue order.

        Whatever is raised on the way (a cancellation; an exception a signal handler raises: a
        task's soft time limit, an alarm, KeyboardInterrupt; a timeout, a lost connection), a call
        may have reached Redis and granted or queued this token: :meth:`abandon` undoes it before
        the exception goes on.  The ``try`` costs nothing until something is raised.
        """
        primitive = self.primitive
        worker = worker_name()
        cancels = cancels_pending()
        hub: Any = None
        ticket: Optional[object] = None
        waiter: Optional[AsyncWaiter] = None
        try:
            try:
                if not blocking:
                    sent_at = time.monotonic()
                    grant = await self.acquire(token, primitive.acquire_mode(0, own), worker)
                    raise_swallowed_cancel(cancels)
                    return primitive.taken(grant, sent_at)
                hub = hub_for(primitive.redis)
                if not (self.contended or _in_flight.busy(primitive.keys.name)):
                    async with hub.gate_for(primitive.redis):  # bounds the calls of the waiters (see waiting)
                        sent_at = time.monotonic()
                        grant = await self.acquire(token, primitive.acquire_mode(0, own), worker)
                    raise_swallowed_cancel(cancels)
                    if grant.acquired:
                        return grant, sent_at
                ticket = object()  # queued or about to queue: this process's later acquires queue after it
                _in_flight.enter(primitive.keys.name, ticket)
                waiter = await hub.register(primitive.redis, primitive.refresh_interval)
                sent_at = time.monotonic()
                async with waiter.gate:
                    grant = await self.acquire(token, primitive.acquire_mode(1, own), worker, waiter.reply_to())
                raise_swallowed_cancel(cancels)
                self.contended = not grant.acquired
                if not grant.acquired:
                    primitive.report.note_wait(grant)  # the waiting path (see core.reporting): tracing hears of it
                    grant, sent_at = await self.wait(token, worker, grant, stop_at, sent_at, own, waiter, cancels)
                return primitive.taken(grant, sent_at)
            finally:  # inside the undo's try: an exception raised here may follow a grant
                if ticket is not None:
                    _in_flight.leave(primitive.keys.name, ticket)
                if waiter is not None:
                    hub.unregister(waiter)
        except BaseException:
            # Cancelled, or anything raised, wherever: leave the queue and give back a grant, even
            # though this task is being cancelled.
            await run_to_completion(self.abandon(token, worker, waiter))
            raise

    async def wait(
        self, token: bytes, worker: str, grant: Grant, stop_at: Optional[float], sent_at: float,
        own: bool, waiter: AsyncWaiter, cancels: int,
    ) -> tuple[Grant, float]:
        """Wait in the queue until handed the hold, the holder expires or ``stop_at`` passes.

        A hand-off can happen any time after the last queueing call reached Redis (even before
        this worker sleeps), so a hold announced by a message is measured from that call's send
        instant; a hold a call's reply reports (a refresh, a give-up) from that call's, since the
        reply gives the time that was left when it ran.
        Every call goes through the hub's gate (the waiter's ``gate``: see :mod:`~django_redis_coord.core.waiting`).
        A refresh that cannot reach Redis (a failover, a restart) is tried again at the next one,
        for up to :data:`~django_redis_coord.core.grants.OUTAGE_GRACE` seconds in a row.
        """
        primitive = self.primitive
        queued_at = sent_at
        outage = Outage()
        while True:
            if stop_at is not None and time.monotonic() >= stop_at:
                async with waiter.gate:
                    called_at = time.monotonic()
                    return await self.cancel(token, worker), called_at
            budget = primitive.wait_budget(grant, stop_at)
            message = await waiter.wait(primitive.refresh_interval if budget is None
                                        else min(budget, primitive.refresh_interval))
            raise_swallowed_cancel(cancels)
            if message:
                grant = primitive.woken_grant(message)
                if grant.acquired:
                    return grant, queued_at
                continue  # told of a new holder's expiry: wait until then
            async with waiter.gate:
                called_at = time.monotonic()
                if stop_at is not None and called_at >= stop_at:
                    return await self.cancel(token, worker), called_at  # no refresh on the way out
                try:
                    grant = await self.acquire(token, primitive.acquire_mode(2, own), worker, waiter.reply_to())
                except OUTAGE_ERRORS:
                    grant = outage.began(called_at)  # raises once the outage lasted too long
                    continue
            outage.ended()
            raise_swallowed_cancel(cancels)  # a cancelled waiter must not take a grant (the caller gives it back)
            if grant.acquired:  # the reply's TTL is what was left when this call ran
                return grant, called_at
            queued_at = called_at  # a hand-off announced from now on came after this call ran

    async def abandon(self, token: bytes, worker: str, waiter: Optional[AsyncWaiter] = None) -> None:
        """Undo an acquire stopped by an exception while a call of it may have reached Redis: leave
        the queue and give back a hold this token was granted (whose reply was never read, or just
        handed over), in one script that is right whether or not that happened (see
        :meth:`cancel`).  In asyncio it runs to its end when the task is cancelled again
        (:func:`~django_redis_coord.core.concurrency.run_to_completion`).  Interrupted in turn (a
        second signal), it is tried again, up to
        :data:`~django_redis_coord.core.queue.rules.GIVE_BACK_TRIES` times in all; a
        ``KeyboardInterrupt`` or ``SystemExit`` that interrupted it is raised once it is over.
        Best effort when Redis cannot be reached: the TTL and the waiter lease bound what is left."""
        stop: Optional[BaseException] = None
        for _ in range(GIVE_BACK_TRIES):
            try:
                async with waiter.gate if waiter is not None else nullcontext():
                    await self.cancel(token, worker, give_back=True)
                break
            except RedisError:  # the original error matters more; the TTL and the lease bound the rest
                break
            except BaseException as exc:  # interrupted: once more (the original exception is raised after)
                if stop is None and not isinstance(exc, Exception):
                    stop = exc
        if stop is not None:  # a request to stop (KeyboardInterrupt, SystemExit) still stops, after the undo
            raise stop

    async def extend(self, hold: Any, ms: int, mode: str) -> bool:
        """Change the expiry of ``hold`` (its ``token`` and local ``deadline``) in Redis."""
        primitive = self.primitive
        sent_at = time.monotonic()
        hold.deadline = primitive.deadline_for(sent_at, await primitive.do_extend(hold.token, ms, mode))
        if hold.watched:  # a shorter deadline must not wait for the loop's next look
            primitive.side.watchdog().look_again()
        return True

    async def acquire(self, token: bytes, enqueue: int, worker: str, reply_to: tuple[bytes, Any] = NO_REPLY) -> Grant:
        """One call of the acquire script (made by the primitive's ``hand_over`` hook when it has
        something to hand over: see :mod:`django_redis_coord.core.lock.handover`)."""
        primitive = self.primitive
        if primitive.hand_over is not None:  # the hook makes the call when it has something to hand over
            grant: Optional[Grant] = await primitive.hand_over.acquire(primitive, token, enqueue, worker, reply_to)
            if grant is not None:
                return grant
        script = primitive.scripts.get(primitive.redis, primitive.acquire_script)
        reply = await script(primitive.acquire_keys(), primitive.acquire_args(token, enqueue, worker, reply_to),
                             client=primitive.redis)
        return primitive.grant_from_reply(reply)  # type: ignore[no-any-return]

    async def cancel(self, token: bytes, worker: str, give_back: bool = False) -> Grant:
        """Leave the queue; a hold this token has is kept, or with ``give_back`` released (mode 3
        of the cancel scripts: one script, safe to run again)."""
        primitive = self.primitive
        script = primitive.scripts.get(primitive.redis, primitive.cancel_script)
        reply = await script(primitive.acquire_keys(), primitive.acquire_args(token, 3 if give_back else 2, worker),
                             client=primitive.redis)
        return Grant.from_reply(reply)
