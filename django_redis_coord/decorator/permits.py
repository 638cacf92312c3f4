"""One permit of a semaphore held by ``@locked(limit=N)``, with a lock's shape (``fence``,
``valid``, ``release()``) so that the decorator treats locks and permits alike."""

from __future__ import annotations

import secrets
from typing import Any, Optional

from ..config.connection import get_client
from ..config.signalling import speak_for
from ..core.exceptions import LockLostError
from ..core.semaphore.sync import Semaphore

__all__ = ["PermitHold", "AsyncPermitHold"]


class PermitHold:
    """One permit of a semaphore taken by ``@locked``, with a lock's shape (``fence``, ``valid``,
    ``release()``) and usable from any thread: it acquires under its own identity."""

    kind = "semaphore"

    def __init__(self, semaphore: Any, identity: Optional[str] = None, fence: Optional[int] = None) -> None:
        self.semaphore = semaphore
        self.identity = identity if identity is not None else secrets.token_hex(16)
        self._fence: Optional[int] = fence

    @property
    def name(self) -> Any:
        return self.semaphore.name

    @property
    def limit(self) -> Optional[int]:
        """The limit in force: the one stored in Redis when a refusal reported it, else this
        semaphore's (the first acquire of a name stores it)."""
        return getattr(self.semaphore, "refused_limit", None) or self.semaphore.limit

    @property
    def refused_pttl(self) -> Optional[int]:
        """After a refused acquire: ms until the earliest permit ends, as the refusal said."""
        return self.semaphore.refused_pttl

    @property
    def fence(self) -> Optional[int]:
        permit = self.semaphore.permit(self.identity)
        return permit.fence if permit is not None else self._fence

    @property
    def valid(self) -> bool:
        permit = self.semaphore.permit(self.identity)
        return permit is not None and permit.valid

    def _after_acquire(self, acquired: bool) -> bool:
        if acquired:
            self._fence = self.semaphore.permit(self.identity).fence
        return acquired

    def acquire(self, blocking: bool = False, blocking_timeout: Optional[float] = None) -> bool:
        return self._after_acquire(self.semaphore.acquire(self.identity, blocking, blocking_timeout))

    def release(self) -> None:
        if not self.semaphore.release(self.identity):
            raise LockLostError("The permit was lost before it was released", lock_name=self.name)

    def __repr__(self) -> str:
        return f"<permit of {self.semaphore!r} fence={self.fence}>"


class AsyncPermitHold(PermitHold):
    """The asyncio form of :class:`PermitHold`."""

    def sync_twin(self) -> PermitHold:
        """The same permit seen through a sync semaphore (for a release after the loop ended)."""
        semaphore = self.semaphore
        twin = Semaphore(get_client(), semaphore.name, semaphore.limit, semaphore.timeout)
        semaphore.share_permits_with(twin)
        speak_for(twin, semaphore)
        hold = PermitHold(twin, self.identity, self._fence)
        return hold

    async def acquire(self, blocking: bool = False, blocking_timeout: Optional[float] = None) -> bool:  # type: ignore[override]
        return self._after_acquire(await self.semaphore.acquire(self.identity, blocking, blocking_timeout))

    async def release(self) -> None:  # type: ignore[override]
        if not await self.semaphore.release(self.identity):
            raise LockLostError("The permit was lost before it was released", lock_name=self.name)
