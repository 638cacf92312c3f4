"""The asyncio twin of :class:`django_redis_coord.core.semaphore.sync.Semaphore`, over ``redis.asyncio``.

Same names, arguments and behaviour, with ``await``.  Permits taken without an identity belong
to the asyncio *task* that acquired them, so two tasks sharing one instance never release each
other's permit::

    >>> async with Semaphore(client, "crawler", limit=8, timeout=30) as sem:   # doctest: +SKIP
    ...     await fetch(url, fence=sem.fence)
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from types import TracebackType
from typing import Any, Optional, TypeVar, Union

from ..arguments import Number, check_number, new_token, to_ms
from ..concurrency import run_to_completion
from ..exceptions import LockAcquireTimeout
from ..holders import HolderInfo, permits_from_inspect
from ..queue.aio import QueuedPrimitive, TaskLocal
from .rules import Identity, SemaphoreBase, check_limit, encode_identity

__all__ = ["Semaphore"]

#: A subclass's ``with`` block gives that subclass (a DurableLock's gives a DurableLock).
_SemaphoreT = TypeVar("_SemaphoreT", bound="Semaphore")


class Semaphore(QueuedPrimitive, SemaphoreBase):
    """Asyncio counting semaphore with leased, fenced permits on server time, served FIFO."""

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local: Any = TaskLocal()

    def _stack(self) -> list[bytes]:
        space = self.local.space()
        stack = getattr(space, "stack", None)
        if stack is None:
            stack = space.stack = []
        return stack

    # -- the identity semaphore's API --------------------------------------------------------------
    async def set_max_size(self, size: int) -> None:
        """See :meth:`django_redis_coord.core.semaphore.sync.Semaphore.set_max_size`."""
        check_limit(size, self.name)
        await self.do_set_limit(size)

    async def get_max_size(self) -> int:
        stored = await self.redis.hget(self.keys.meta, "limit")
        if stored is not None:
            return int(stored)
        return self.limit or 0

    async def get_current_size(self) -> int:
        return int((await self.do_inspect("count"))[2])

    async def acquire(
        self,
        identity: Optional[Identity] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
    ) -> bool:
        """Take a permit; see :meth:`django_redis_coord.core.semaphore.sync.Semaphore.acquire`."""
        started = time.monotonic()
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        token = encode_identity(identity, self.name) if identity is not None else new_token()
        taken = await self._take(token, blocking, stop_at, own=identity is None)
        if taken is None:
            await self._atell_contended(started)
            return False
        permit, new = self._own(token, *taken, anonymous=identity is None)
        if new:  # an identity renewing its live permit is no new hold
            await self._atell_acquired(permit, started, lambda: self._release_call(identity))
        return True

    async def release(self, identity: Optional[Identity] = None) -> bool:
        """Return a permit; see :meth:`django_redis_coord.core.semaphore.sync.Semaphore.release`."""
        _, permit, held = self._to_release(identity)
        fence = permit.fence if permit is not None else None
        # Completes (and is told) even if this task is cancelled meanwhile (see Lock.release).
        call = self._release_call(identity)
        return await run_to_completion(self._release_told(
            call, fence, held, when=lambda released: released and permit is not None and not permit.lost))

    def _release_call(self, identity: Optional[Identity] = None) -> Awaitable[bool]:
        """The call that returns this task's permit (or ``identity``'s), needing nothing from the
        task (see :meth:`django_redis_coord.asyncio.Lock._release_call`)."""
        token = self._token_to_release(identity)
        self._stop_watching(token)
        return self._release_permit(token, self._stack())

    async def _release_permit(self, token: bytes, stack: list[bytes]) -> bool:
        permit = self._permits.get(token)
        released = await self.do_release(token)
        self._forget(token, stack)
        if permit is not None and (permit.lost or not released):
            await self._atell_lost_now(permit)
        return released

    async def extend(
        self, additional_time: Number, replace_ttl: bool = False, identity: Optional[Identity] = None
    ) -> bool:
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        permit = self._held(identity)
        self.check_extendable("extend")
        return await self._extend_hold(permit, to_ms(additional_time), "replace" if replace_ttl else "add")

    async def reacquire(self, identity: Optional[Identity] = None) -> bool:
        permit = self._held(identity)
        self.check_extendable("reacquire")
        return await self._extend_hold(permit, self._ttl_ms, "replace")

    async def holders(self) -> list[HolderInfo]:
        return permits_from_inspect(self.keys.name, await self.do_inspect("full"))

    # -- context manager -------------------------------------------------------------------------
    async def __aenter__(self: _SemaphoreT) -> _SemaphoreT:
        if await self.acquire(blocking=True):
            return self
        raise LockAcquireTimeout("Unable to acquire a permit within the time specified", lock_name=self.name)

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        permit = self.permit()
        released = await self.release()
        error = self._exit_error(released, permit)
        if error is not None:
            raise error

    # -- the only methods talking to Redis -------------------------------------------------------
    async def do_release(self, token: bytes) -> bool:
        script = self.scripts.get(self.redis, "sem_release")
        return int(await script(self.release_keys(), self.release_args(token), client=self.redis)) == 1

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "sem_extend")
        return self.checked_pttl(token, int(await script(self.extend_keys(), self.extend_args(token, ms, mode),
                                                          client=self.redis)))

    async def do_set_limit(self, size: int) -> int:
        script = self.scripts.get(self.redis, "sem_set_limit")
        count = int(await script(self.release_keys(), self.set_limit_args(size), client=self.redis))
        return self.checked_size(count)

    async def do_inspect(self, mode: str) -> Any:
        script = self.scripts.get(self.redis, "sem_inspect")
        return await script(self.inspect_keys(), (mode,), client=self.redis)
