"""The asyncio twin of :class:`django_redis_coord.core.lock.sync.Lock`, over ``redis.asyncio``.

Same names, arguments and behaviour.  One difference from redis-py's asyncio lock: the hold is
kept per *task* (not per thread), so two tasks sharing one instance never release or extend each
other's hold.  Pass ``thread_local=False`` to share one hold between tasks deliberately.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any, Optional, Union

from ..arguments import Number, as_bytes, check_number, encode_token, new_token, to_ms
from ..concurrency import run_to_completion
from ..events import held_time
from ..exceptions import LockError, LockLostError, LockNotOwnedError
from ..grants import Grant
from ..queue.aio import QueuedPrimitive, TaskLocal
from .rules import AsyncWithBlock, LockBase

__all__ = ["Lock"]

#: A subclass's ``with`` block gives that subclass (a DurableLock's gives a DurableLock).

logger = logging.getLogger("django_redis_coord")


def ended_holding(lock_ref: Any, hold: Any, token: bytes, task: asyncio.Future) -> None:
    """A task that took a hold of its own ended without releasing it: nothing can release it any
    more.  Say so, and stop renewing it, so that its TTL ends it."""
    if getattr(hold, "token", None) != token:
        return
    lock = lock_ref()
    if lock is None:
        return
    renewed = getattr(hold, "watched", False)
    if renewed:
        lock._watchdog().unregister(lock, hold)
    logger.warning(
        "The task that acquired lock %r ended without releasing it: no other task can release it, so it "
        "ends with its TTL%s.  Release it in the task that acquired it (asyncio.wait_for() runs the "
        "acquire in a task of its own before Python 3.12), or pass thread_local=False.",
        lock.name,
        " (its renewal was stopped)" if renewed else " (it has none: it stays held)" if lock.timeout is None else "",
    )


class Lock(AsyncWithBlock, QueuedPrimitive, LockBase):
    """Asyncio distributed lock with fencing tokens, FIFO waiting and an explicit loss signal."""

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local: Any = self._new_local()

    def _new_local(self) -> Any:
        return TaskLocal() if self.thread_local else SimpleNamespace(token=None)

    def _state(self) -> Any:
        local = self.local
        return local.space() if isinstance(local, TaskLocal) else local

    def _own(self, token: bytes, grant: Grant, sent_at: float) -> Any:
        hold = super()._own(token, grant, sent_at)
        task = asyncio.current_task() if isinstance(self.local, TaskLocal) else None
        if task is not None:  # a hold of this task only: nobody else can release it
            callback = functools.partial(ended_holding, weakref.ref(self), hold, token)
            task.add_done_callback(callback)
            hold.task_end = (task, callback)  # removed on release (a long-lived task acquires many times)
        return hold

    async def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock; see :meth:`django_redis_coord.core.lock.sync.Lock.acquire`."""
        started = time.monotonic()
        blocking, stop_at = self.acquire_arguments(sleep, blocking, blocking_timeout)
        if self.reenter(token):
            return True
        own = token is None  # made here for this call: Redis can tell a resend of it (see _take)
        token = new_token() if token is None else encode_token(token, self.name)
        taken = await self._take(token, blocking, stop_at, own)
        if taken is None:
            await self._atell_contended(started)
            return False
        await self._atell_acquired(self._own(token, *taken), started, self._release_call)
        return True

    async def locked(self) -> bool:
        return await self.redis.get(self.name) is not None

    async def owned(self) -> bool:
        token = self._state().token
        if token is None:
            return False
        return as_bytes(await self.redis.get(self.name)) == token

    async def release(self) -> None:
        local = self._state()
        token = local.token
        if token is None:
            raise LockError(f"Cannot release an unlocked lock: {self.name!r}", lock_name=self.name)
        if self.reentrant and getattr(local, "count", 1) > 1:
            local.count -= 1
            return
        lost = getattr(local, "lost", False)
        fence, held = getattr(local, "fence", None), held_time(local)
        # Once asked, the release completes (and is told) even if this task is cancelled meanwhile
        # (a client going away under ASGI): otherwise the lock would stay held, renewed by nobody.
        await run_to_completion(self._release_told(self._release_call(), fence, held, when=lambda _: not lost))
        if lost:
            raise LockLostError("The lock was lost before it was released", lock_name=self.name)

    def _release_call(self) -> Awaitable[None]:
        """Stop renewing this task's hold and return the call that releases it; that call needs
        nothing from the task, so it can finish in another one (see :func:`run_to_completion`)."""
        local = self._state()
        self._detach(local)
        return self._release_hold(local, local.token, getattr(local, "fence", None))

    def _detach(self, local: Any) -> None:
        """Take the hold ``local`` out of the watchdog and off its task's end (before it is released)."""
        if getattr(local, "watched", False):
            self._watchdog().unregister(self, local)
        task_end = getattr(local, "task_end", None)
        if task_end is not None:
            local.task_end = None
            task_end[0].remove_done_callback(task_end[1])

    async def _release_hold(self, local: Any, token: bytes, fence: Optional[int] = None) -> None:
        try:
            await self.do_release(token)
        except LockNotOwnedError:
            if self._still_holding(local, token, fence):
                self._forget_hold(local)
                await self._atell_lost_now(local)
                self._mark_lost(local)  # found here before the watchdog did: on_lost still fires once
            raise
        if self._still_holding(local, token, fence):
            self._forget_hold(local)

    async def do_release(self, token: bytes) -> None:
        script = self.scripts.get(self.redis, "lock_release")
        reply = await script(self.release_keys(), self.release_args(token), client=self.redis)
        if int(reply) != 1:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        local = self._state()
        if local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        self.check_extendable("extend")
        return await self._extend_hold(local, to_ms(additional_time), "replace" if replace_ttl else "add")

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "lock_extend")
        pttl = int(await script(self.extend_keys(), self.extend_args(token, ms, mode), client=self.redis))
        if pttl == -2:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        return pttl

    async def reacquire(self) -> bool:
        local = self._state()
        if local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        self.check_extendable("reacquire")
        return await self._extend_hold(local, self._ttl_ms, "replace")

    async def do_reacquire(self) -> bool:
        return await self.reacquire()
