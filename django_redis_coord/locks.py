"""The fenced Redis lock (sync), a drop-in superset of :class:`redis.lock.Lock`.

* Acquire, release, extend and reacquire are one Lua script each (one round trip).
* Every grant carries a fence token (``lock.fence``) that is strictly greater than any fence
  issued before for the same name, even after the server restarted without persistence.
* A blocking ``acquire`` never polls: it joins a FIFO queue and sleeps until the releasing
  script, which grants the lock to the queue head server-side, announces the grant to it (all the
  waiters of a process share one connection: see :mod:`django_redis_coord.waiting`).  A waiter
  also looks again when the holder's TTL runs out, so a crashed holder is replaced promptly.
* Optional watchdog renewal, an explicit loss signal and reentrancy.
"""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from types import TracebackType
from typing import Any, Optional, Union

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import waiting
from . import watchdog as _watchdog
from ._base import (
    NO_REPLY,
    OUTAGE_ERRORS,
    Grant,
    LockBase,
    Number,
    Outage,
    QueuedBase,
    SharedHold,
    ThreadHold,
    as_bytes,
    check_number,
    encode_token,
    new_token,
    to_ms,
)
from .exceptions import (
    InvalidLockArgument,
    LockError,
    LockLostError,
    LockNotOwnedError,
)
from .scripts import sync_scripts

__all__ = ["Lock", "QueuedPrimitive"]

class QueuedPrimitive(QueuedBase):
    """The sync side of a queued primitive: one acquire attempt, and the wait in line after it.

    Subclasses name their scripts (see :class:`~django_redis_coord._base.QueuedBase`); the asyncio
    twin in :mod:`django_redis_coord.asyncio.lock` has the same names and shape.
    """

    scripts = sync_scripts

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
        A blocking call registers with the process's waiting hub first (see
        :mod:`~django_redis_coord.waiting`), so that its first attempt can join the queue.
        """
        worker = self._worker()
        if not blocking:
            sent_at = time.monotonic()
            grant = self._attempt(token, self.acquire_mode(0, own), worker, None)
            return (grant, sent_at) if grant.acquired else None
        hub = waiting.hub_for(self.redis)
        waiter = hub.register(self.redis, self.refresh_interval)
        try:
            sent_at = time.monotonic()
            grant = self._attempt(token, self.acquire_mode(1, own), worker, waiter)
            if not grant.acquired:
                try:
                    grant, sent_at = self._wait(token, worker, grant, stop_at, sent_at, own, waiter)
                except BaseException:
                    self._abandon(token, worker, waiter)
                    raise
        finally:
            hub.unregister(waiter)
        return (grant, sent_at) if grant.acquired else None

    def _attempt(self, token: bytes, enqueue: int, worker: str, waiter: Optional[waiting.Waiter]) -> Grant:
        """One acquire call.  Interrupted, or no reply read (a timeout, a connection lost), it may
        have reached Redis and granted (or queued) this token: that is undone, best effort when
        Redis cannot be reached (the TTL and the waiter lease bound it)."""
        try:
            if waiter is None:
                return self.do_acquire(token, enqueue, worker)
            with waiter.gate:
                return self.do_acquire(token, enqueue, worker, waiter.reply_to)
        except BaseException as exc:
            if not isinstance(exc, Exception) or isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
                self._abandon(token, worker, waiter)
            raise

    def _wait(
        self, token: bytes, worker: str, grant: Grant, stop_at: Optional[float], sent_at: float,
        own: bool, waiter: waiting.Waiter,
    ) -> tuple[Grant, float]:
        """Wait in the queue until handed the hold, the holder expires or ``stop_at`` passes.

        A hand-off can happen any time after the last queueing call reached Redis (even before
        this thread sleeps), so a handed-over hold is measured from that call's send instant.
        Every call goes through the hub's gate (see :attr:`~django_redis_coord.waiting.Waiter.gate`).
        A refresh that cannot reach Redis (a failover, a restart) is tried again at the next one,
        for up to :data:`~django_redis_coord._base.OUTAGE_GRACE` seconds in a row.
        """
        queued_at = sent_at
        outage = Outage()
        while True:
            if stop_at is not None and time.monotonic() >= stop_at:
                with waiter.gate:
                    return self.do_cancel(token, worker), queued_at
            budget = self.wait_budget(grant, stop_at)
            message = waiter.wait(self.refresh_interval if budget is None else min(budget, self.refresh_interval))
            if message:
                grant = self.woken_grant(message)
                if grant.acquired:
                    return grant, queued_at
                continue  # told of a new holder's expiry: wait until then
            with waiter.gate:
                if stop_at is not None and time.monotonic() >= stop_at:
                    return self.do_cancel(token, worker), queued_at  # no refresh on the way out
                called_at = time.monotonic()
                try:
                    grant = self.do_acquire(token, self.acquire_mode(2, own), worker, waiter.reply_to)
                except OUTAGE_ERRORS:
                    grant = outage.began(called_at)  # raises once the outage lasted too long
                    continue
            outage.ended()
            if grant.acquired:  # possibly handed over before this call: measure from the one before
                return grant, queued_at
            queued_at = called_at

    def _abandon(self, token: bytes, worker: str, waiter: Optional[waiting.Waiter] = None) -> None:
        """Best effort after an interrupted wait: leave the queue, give back a hold just handed over."""
        try:
            with waiter.gate if waiter is not None else nullcontext():
                granted = self.do_cancel(token, worker).acquired
            if granted:
                self.do_release(token)
        except Exception:  # the original error matters more; the waiter lease bounds the rest
            pass

    def _extend_hold(self, hold: Any, ms: int, mode: str) -> bool:
        """Change the expiry of ``hold`` (its ``token`` and local ``deadline``) in Redis."""
        sent_at = time.monotonic()
        hold.deadline = self.deadline_for(sent_at, self.do_extend(hold.token, ms, mode))
        if getattr(hold, "watched", False):  # a shorter deadline must not wait for the loop's next look
            self._watchdog().look_again()
        return True

    def do_acquire(self, token: bytes, enqueue: int, worker: str, reply_to: tuple[bytes, int] = NO_REPLY) -> Grant:
        script = self.scripts.get(self.redis, self.acquire_script)
        reply = script(self.acquire_keys(), self.acquire_args(token, enqueue, worker, reply_to), client=self.redis)
        return self.grant_from_reply(reply)

    def do_cancel(self, token: bytes, worker: str) -> Grant:
        script = self.scripts.get(self.redis, self.cancel_script)
        reply = script(self.acquire_keys(), self.acquire_args(token, 2, worker), client=self.redis)
        return Grant.from_reply(reply)

    def do_release(self, token: bytes) -> Any:
        raise NotImplementedError

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        raise NotImplementedError


class Lock(QueuedPrimitive, LockBase):
    """A distributed lock with fencing tokens, FIFO waiting and an explicit loss signal.

    Takes redis-py's arguments (``timeout=None`` means no expiry, ``sleep`` is accepted for
    compatibility: waiting does not poll) plus, keyword-only: ``label`` (shown to operators),
    ``auto_renew`` (watchdog renewal at ``timeout / 3``), ``on_lost`` (called with the lock when
    a hold is found lost), ``reentrant`` and ``waiter_lease``.
    """

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local = self._new_local()

    def _new_local(self) -> Any:
        return ThreadHold() if self.thread_local else SharedHold()

    # -- local state (per thread unless thread_local=False) --------------------------------
    def _state(self) -> Any:
        """This thread's hold: token, fence, deadline, count, lost (the watchdog updates it)."""
        return self.local.hold

    # -- context manager ---------------------------------------------------------------------
    def __enter__(self) -> Lock:
        if self.acquire():
            return self
        raise self.timed_out()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except LockError:
            self.release_failed()

    # -- public API ----------------------------------------------------------------------------
    def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock; returns True once held, False when ``blocking`` is off or time ran out.

        A blocking call queues in FIFO order and is woken by the releasing holder, or when the
        holder's TTL ends, or at ``blocking_timeout`` (honoured on the client's monotonic clock).
        """
        if sleep is not None:
            check_number("sleep", sleep, allow_none=False, positive=False, lock_name=self.name)
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        local = self._state()
        if self.reentrant and local.token is not None and getattr(local, "count", 0) > 0:
            if token is not None and encode_token(token, self.name) != local.token:
                raise InvalidLockArgument("a reentrant hold keeps its first token", lock_name=self.name)
            if not self.valid:  # its TTL ran out, or the watchdog found it gone: nothing to join
                raise LockLostError("The hold this re-entry would join was lost", lock_name=self.name)
            local.count += 1
            return True
        own = token is None  # made here for this call: Redis can tell a resend of it (see _take)
        token = new_token() if token is None else encode_token(token, self.name)
        taken = self._take(token, blocking, stop_at, own)
        if taken is None:
            return False
        self._own(token, *taken)
        return True

    def locked(self) -> bool:
        """True when anyone holds the lock."""
        return self.redis.get(self.name) is not None

    def owned(self) -> bool:
        """True when the lock is held with this thread's token (checked in Redis)."""
        token = self._state().token
        if token is None:
            return False
        return as_bytes(self.redis.get(self.name)) == token

    def release(self) -> None:
        """Release the lock (the outermost hold, for a reentrant lock); raises if not held."""
        local = self._state()
        token = local.token
        if token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        if self.reentrant and getattr(local, "count", 1) > 1:
            local.count -= 1
            return
        lost = getattr(local, "lost", False)
        fence = getattr(local, "fence", None)
        if getattr(local, "watched", False):
            self._watchdog().unregister(self, local)
        # Keep the token until Redis answered: a connection error must leave a way to retry.
        try:
            self.do_release(token)
        except LockNotOwnedError:
            if self._still_holding(local, token, fence):
                self._forget_hold(local)
                self._mark_lost(local)  # found here before the watchdog did: on_lost still fires once
            raise
        if self._still_holding(local, token, fence):
            self._forget_hold(local)
        if lost:
            raise LockLostError("The lock was lost before it was released", lock_name=self.name)

    def do_release(self, token: bytes) -> None:
        script = self.scripts.get(self.redis, "lock_release")
        reply = script(self.release_keys(), self.release_args(token), client=self.redis)
        if int(reply) != 1:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the remaining TTL (or set it, with ``replace_ttl``)."""
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        local = self._state()
        if local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        self.check_extendable("extend")
        return self._extend_hold(local, to_ms(additional_time), "replace" if replace_ttl else "add")

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "lock_extend")
        pttl = int(script(self.extend_keys(), self.extend_args(token, ms, mode), client=self.redis))
        if pttl == -2:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        return pttl

    def reacquire(self) -> bool:
        """Reset the TTL to ``timeout``."""
        local = self._state()
        if local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        self.check_extendable("reacquire")
        return self._extend_hold(local, self._ttl_ms, "replace")

    def do_reacquire(self) -> bool:
        return self.reacquire()
