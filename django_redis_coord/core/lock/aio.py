"""The fenced Redis lock, a drop-in superset of redis-py's ``Lock`` (``redis.lock.Lock`` and
``redis.asyncio.lock.Lock``): :class:`django_redis_coord.core.lock.sync.Lock` over a sync client,
:class:`django_redis_coord.core.lock.aio.Lock` over a ``redis.asyncio`` one, with the same names,
arguments and behaviour.  The sync module is generated from the asyncio one (docs/twins.md).

* Acquire, release, extend and reacquire are one Lua script each (one round trip).
* Every grant carries a fence token (``lock.fence``) that is strictly greater than any fence
  issued before for the same name, even after the server restarted without persistence.
* A blocking ``acquire`` never polls: it joins a FIFO queue and sleeps until the releasing
  script, which grants the lock to the queue head server-side, announces the grant to it (all the
  waiters of a process share one connection: see :mod:`django_redis_coord.core.waiting.sync`).  A waiter
  also looks again when the holder's TTL runs out, so a crashed holder is replaced promptly.
* Optional watchdog renewal, an explicit loss signal and reentrancy.

A hold belongs to the thread (sync) or the asyncio task that took it, so two threads or tasks
sharing one instance never release or extend each other's hold (redis-py's asyncio lock keeps it
per thread); ``thread_local=False`` shares one hold deliberately.  In asyncio, a release once
asked completes even if its task is cancelled meanwhile, and a task that ends still holding is
reported (see :func:`django_redis_coord.core.side.aio.watch_worker_end`).

The lock is composed, top to bottom: its rules (:class:`~django_redis_coord.core.lock.rules.LockBase`:
arguments, keys, the caller's hold), its holds (``local``: one per thread or task, or one shared),
its wait in line (``line``: :class:`~django_redis_coord.core.queue.aio.Line`) and its reporter
(``report``: :class:`~django_redis_coord.core.reporting.Reporter`).  See docs/architecture.md for the
walk of an acquire that waits.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from types import TracebackType
from typing import Any, Optional, TypeVar, Union

from ..arguments import Number, as_bytes, check_number, encode_token, new_token, to_ms
from ..concurrency import run_to_completion
from ..events import held_time
from ..exceptions import (
    LockError,
    LockLostError,
    LockNotOwnedError,
)
from ..holds import SharedHold, refuse_forked, taken_elsewhere
from ..queue.aio import Line
from ..reporting import Reporter
from ..scripts import async_scripts
from ..side import aio as side
from ..side.aio import WorkerHolds
from .rules import LockBase, release_failed, timed_out

__all__ = ["Lock"]

#: A subclass's ``with`` block gives that subclass.
_LockT = TypeVar("_LockT", bound="Lock")


class Lock(LockBase):
    """A distributed lock with fencing tokens, FIFO waiting and an explicit loss signal.

    Takes redis-py's arguments (``timeout=None`` means no expiry, ``sleep`` is accepted for
    compatibility: waiting does not poll) plus, keyword-only: ``label`` (shown to operators),
    ``auto_renew`` (watchdog renewal at ``timeout / 3``), ``on_lost`` (called with the lock when
    a hold is found lost), ``reentrant`` and ``waiter_lease``.
    """

    scripts = async_scripts
    side = side

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self._compose()

    def _compose(self) -> None:
        """Its holds (per task, or one shared with ``thread_local=False``), its line, its reporter."""
        self.local = WorkerHolds() if self.thread_local else SharedHold()
        self.line = Line(self)
        self.report = Reporter(self, refusal=self._refusal, in_background=side.LOSS_TOLD_IN_BACKGROUND)

    # -- public API ----------------------------------------------------------------------------
    async def acquire(
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
        started = time.monotonic()
        blocking, stop_at = self.acquire_arguments(sleep, blocking, blocking_timeout)
        if self.reenter(token):
            return True
        own = token is None  # made here for this call: Redis can tell a resend of it (see Line.take)
        token = new_token() if token is None else encode_token(token, self.name)
        taken = await self.line.take(token, blocking, stop_at, own)
        if taken is None:
            await self.report.atell_contended(started)
            return False
        await self.report.atell_acquired(self._own(token, *taken), started, self._release_call)
        return True

    async def locked(self) -> bool:
        """True when anyone holds the lock."""
        return await self.redis.get(self.name) is not None

    async def owned(self) -> bool:
        """True when the lock is held with this thread's (task's) token (checked in Redis); False in
        a forked child for the parent's hold."""
        local = self._state()
        token = local.token
        if token is None or taken_elsewhere(local):
            return False
        return as_bytes(await self.redis.get(self.name)) == token

    async def release(self) -> None:
        """Release the lock (the outermost hold, for a reentrant lock); raises if not held."""
        local = self._state()
        token = local.token
        if token is None:
            raise LockError(f"Cannot release an unlocked lock: {self.name!r}", lock_name=self.name)
        refuse_forked(local, self.name)
        if self.reentrant and local.count > 1:
            local.count -= 1
            return
        lost = local.lost
        fence, held = local.fence, held_time(local)
        self._detach(local)
        # In asyncio, once asked, the release completes (and is told) even if its task is cancelled
        # meanwhile (a client going away under ASGI): otherwise the lock would stay held, renewed by nobody.
        await run_to_completion(self._release_hold(local, token, fence, held, tell=not lost))
        if lost:
            raise LockLostError("The lock was lost before it was released", lock_name=self.name)

    def _release_call(self) -> Awaitable[None]:
        """Stop renewing this hold and return the call that releases it, untold: the give-back of a
        grant whose ``acquired`` receiver raised.  In asyncio that call needs nothing from the task,
        so it can finish in another one (see :func:`~django_redis_coord.core.concurrency.run_to_completion`)."""
        local = self._state()
        self._detach(local)
        return self._release_hold(local, local.token, local.fence)

    async def _release_hold(
        self, local: Any, token: bytes, fence: Optional[int], held: Optional[float] = None, tell: bool = False
    ) -> None:
        """Release the hold ``local`` and, with ``tell``, tell ``released``: one call, so that (in
        asyncio) a release finished after its task was cancelled is told too.  The token is kept until Redis
        answered: a connection error must leave a way to retry."""
        try:
            await self.do_release(token)
        except LockNotOwnedError:
            if self._still_holding(local, token, fence):
                self._forget_hold(local)
                await self.report.atell_lost_now(local)
                self._mark_lost(local)  # found here before the watchdog did: on_lost still fires once
            raise
        if self._still_holding(local, token, fence):
            self._forget_hold(local)
        if tell:
            await self.report.atell_released(fence, held)

    async def do_release(self, token: bytes) -> None:
        if self.hand_over is not None and await self.hand_over.release(self, token):
            return  # released by the hand-over hook (see core.lock.handover)
        script = self.scripts.get(self.redis, "lock_release")
        reply = await script(self.release_keys(), self.release_args(token), client=self.redis)
        if int(reply) != 1:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the remaining TTL (or set it, with ``replace_ttl``)."""
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        local = self._state()
        if local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        refuse_forked(local, self.name)
        self.check_extendable("extend")
        return await self.line.extend(local, to_ms(additional_time), "replace" if replace_ttl else "add")

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "lock_extend")
        pttl = int(await script(self.extend_keys(), self.extend_args(token, ms, mode), client=self.redis))
        if pttl == -2:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        return pttl

    async def reacquire(self) -> bool:
        """Reset the TTL to ``timeout``."""
        local = self._state()
        if local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        refuse_forked(local, self.name)
        self.check_extendable("reacquire")
        return await self.line.extend(local, self._ttl_ms, "replace")

    async def do_reacquire(self) -> bool:
        return await self.reacquire()

    # -- context manager -------------------------------------------------------------------------
    async def __aenter__(self: _LockT) -> _LockT:
        if await self.acquire():
            return self
        raise timed_out(self)

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError:
            release_failed(self)
