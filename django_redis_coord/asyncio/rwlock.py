"""The asyncio twin of :class:`django_redis_coord.rwlock.ReadWriteLock`, over ``redis.asyncio``.

Same names, arguments and behaviour, with ``await``.  A hold belongs to the asyncio *task* that
acquired it (re-entry is per task, and two tasks sharing one instance never release each other's
hold), unless ``thread_local=False`` shares the object's one hold between tasks and threads::

    >>> rw = ReadWriteLock(client, "catalog", timeout=30)                 # doctest: +SKIP
    >>> async with rw.read:                                               # doctest: +SKIP
    ...     await show(catalog, fence=rw.read.fence)

A release, once called, completes even if its task is cancelled meanwhile; a task that ends still
holding is reported with a warning and its renewal stops, as for the asyncio ``Lock``.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any, Optional, Union

from .._arguments import Number, check_number, to_ms
from .._grants import Grant
from .._lock_base import AsyncWithBlock
from .._rwlock_base import READ, WRITE, RWHoldBase, RWLockBase
from .._tasks import run_to_completion
from ..events import held_time
from ..holders import HolderInfo
from .queued import QueuedPrimitive, TaskLocal, _ended_holding

__all__ = ["ReadWriteLock", "RWHold"]


class RWHold(AsyncWithBlock, RWHoldBase):
    """The read or write side of an asyncio :class:`ReadWriteLock`; see
    :class:`django_redis_coord.rwlock.RWHold`."""

    lock: ReadWriteLock

    async def acquire(self, blocking: Optional[bool] = None, blocking_timeout: Optional[Number] = None) -> bool:
        return await self.lock._acquire_mode(self.mode, blocking, blocking_timeout)

    async def release(self) -> None:
        await self.lock._release_mode(self.mode)

    async def locked(self) -> bool:
        return self.lock.holders_of(self.mode, self.lock.live_holders(await self.lock.do_inspect("full")))

    async def owned(self) -> bool:
        local = self.lock.holding(self.mode)
        return local is not None and local.token in self.lock.live_holders(await self.lock.do_inspect("full"))

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        local = self.lock._held(self.mode, "extend")
        return await self.lock._extend_hold(local, to_ms(additional_time), "replace" if replace_ttl else "add")

    async def reacquire(self) -> bool:
        local = self.lock._held(self.mode, "reacquire")
        return await self.lock._extend_hold(local, self.lock.renew_ttl_ms, "replace")


class ReadWriteLock(QueuedPrimitive, RWLockBase):
    """Asyncio fenced, FIFO read-write lock; see :class:`django_redis_coord.rwlock.ReadWriteLock`."""

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local: Any = self._new_local()
        self.read = RWHold(self, READ)
        self.write = RWHold(self, WRITE)

    def _new_local(self) -> Any:
        return TaskLocal() if self.thread_local else SimpleNamespace(token=None)

    def _state(self) -> Any:
        local = self.local
        return local.space() if isinstance(local, TaskLocal) else local

    def hold(self, mode: str) -> RWHold:
        return self.read if self.check_mode(mode) == READ else self.write

    async def locked(self) -> bool:
        return int((await self.do_inspect("count"))[2]) > 0

    async def holders(self) -> list[HolderInfo]:
        return self.info_list(self.keys.name, await self.do_inspect("full"))

    # -- what the holds call -----------------------------------------------------------------------
    def _own(self, mode: str, token: bytes, grant: Grant, sent_at: float) -> Any:
        local = super()._own(mode, token, grant, sent_at)
        task = asyncio.current_task() if isinstance(self.local, TaskLocal) else None
        if task is not None:  # a hold of this task only: nobody else can release it
            callback = functools.partial(_ended_holding, weakref.ref(self), local, token)
            task.add_done_callback(callback)
            local.task_end = (task, callback)  # removed on release (a long-lived task acquires many times)
        return local

    async def _acquire_mode(self, mode: str, blocking: Optional[bool] = None,
                            blocking_timeout: Optional[Number] = None) -> bool:
        started = time.monotonic()
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        if self.reenter(mode):
            return True
        token = self.new_hold_token(mode)
        taken = None
        try:
            taken = await self._take(token, blocking, stop_at, own=True)
        finally:
            if taken is None:
                self._unclaim()
        if taken is None:
            await self._atell_contended(started, self.hold(mode))
            return False
        hold = self._own(mode, token, *taken)
        await self._atell_acquired(hold, started, lambda: self._release_call(hold))
        return True

    async def _release_mode(self, mode: str) -> None:
        local = self._release_start(mode)
        if local is None:
            return
        fence, held = local.fence, held_time(local)
        # Once asked, the release completes (and is told) even if this task is cancelled meanwhile.
        await run_to_completion(self._release_told(self._release_call(local), fence, held, self.hold(mode)))

    def _release_call(self, local: Any) -> Awaitable[None]:
        """Stop renewing the hold ``local`` and return the call that releases it; that call needs
        nothing from the task, so it can finish in another one (see :func:`run_to_completion`)."""
        self._stop_watching(local)
        task_end = getattr(local, "task_end", None)
        if task_end is not None:
            local.task_end = None
            task_end[0].remove_done_callback(task_end[1])
        return self._release_hold(local, local.token, getattr(local, "lost", False))

    async def _release_hold(self, local: Any, token: bytes, lost: bool) -> None:
        released = await self.do_release(token)
        if not released:
            await self._atell_lost_now(local)  # before _mark_lost (in _release_done): awaited here
        self._release_done(local, token, released, lost)

    # -- the only methods talking to Redis -----------------------------------------------------
    async def do_release(self, token: bytes) -> bool:
        script = self.scripts.get(self.redis, "rw_release")
        return int(await script(self.release_keys(), self.release_args(token), client=self.redis)) == 1

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, self.extend_script)
        return self.checked_pttl(int(await script(self.extend_keys(), self.extend_args(token, ms, mode),
                                                  client=self.redis)))

    async def do_inspect(self, mode: str) -> Any:
        script = self.scripts.get(self.redis, "sem_inspect")
        return await script(self.inspect_keys(), (mode,), client=self.redis)
