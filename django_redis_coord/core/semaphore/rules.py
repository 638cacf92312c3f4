"""What the sync and asyncio semaphores share: the limit and identity checks, a held
:class:`Permit`, and :class:`SemaphoreBase` (arguments, script replies, the permits held through
one object).  Nothing in here talks to Redis; :mod:`django_redis_coord.core.semaphore.sync` and
:mod:`django_redis_coord.core.semaphore.aio` do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..arguments import Number
from ..events import Events, held_time
from ..exceptions import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    LockError,
    LockLostError,
    LockNotOwnedError,
    SemaphoreLimitNotSet,
)
from ..grants import Grant
from ..queue.rules import DEFAULT_WAITER_LEASE, META_RETENTION_MS, QueuedBase

__all__ = ["Identity", "Permit", "SemaphoreBase", "check_limit", "encode_identity"]

logger = logging.getLogger("django_redis_coord")

Identity = Union[str, bytes]


def check_limit(value: object, semaphore_name: object) -> int:
    """Refuse a limit that is not an int of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidLockArgumentType(
            f"limit must be an int, not {type(value).__name__}", lock_name=semaphore_name
        )
    if value < 1:
        raise InvalidLockArgument(f"limit must be at least 1, got {value!r}", lock_name=semaphore_name)
    return value


def encode_identity(identity: object, semaphore_name: object) -> bytes:
    """The token of a permit: the caller's identity as bytes (non-empty str or bytes)."""
    if isinstance(identity, str):
        identity = identity.encode("utf-8", "surrogatepass")
    if not isinstance(identity, (bytes, bytearray)):
        raise InvalidLockArgumentType(
            f"identity must be str or bytes, not {type(identity).__name__}", lock_name=semaphore_name
        )
    if not identity:
        raise InvalidLockArgument("identity must not be empty", lock_name=semaphore_name)
    return bytes(identity)


@dataclass(eq=False)
class Permit:
    """One permit held through a semaphore object: its token (the identity), fence and deadline.

    ``deadline`` is the ``time.monotonic()`` instant after which the permit may have ended
    (``None``: no expiry); the watchdog moves it on each renewal and sets ``lost`` when a renewal
    fails to arrive in time.
    """

    semaphore: Any
    token: bytes
    fence: int
    deadline: Optional[float]
    lost: bool = False
    #: Registered with the watchdog (auto-renewal, or the claim of a provisional hand-off).
    watched: bool = False
    #: ``time.monotonic()`` instant of its grant (``held_time``, ``max_hold``).
    started: Optional[float] = None
    #: Its loss was told to the events object (once per permit).
    loss_reported: bool = False
    #: Queued for the watchdog's next look (see ``Watchdog.register`` in ``core/watchdog.py``).
    arriving: Optional[tuple[Any, ...]] = None

    @property
    def valid(self) -> bool:
        """True while the permit is held and its local deadline has not passed."""
        if self.lost:
            return False
        return self.deadline is None or time.monotonic() < self.deadline


class SemaphoreBase(QueuedBase):
    """Arguments, keys and local bookkeeping common to :class:`Semaphore` and its asyncio twin."""

    kind = "semaphore"
    noun = "permit"
    key_kind = b"sem"
    acquire_script = "sem_acquire"
    cancel_script = "sem_cancel"
    extend_script = "sem_extend"
    acquire_tail = (META_RETENTION_MS,)

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes],
        limit: Optional[int] = None,
        timeout: Optional[Number] = None,
        blocking: bool = False,
        blocking_timeout: Optional[Number] = None,
        *,
        label: Optional[str] = None,
        auto_renew: bool = False,
        on_lost: Optional[Callable[[Permit], Any]] = None,
        raise_on_release_error: bool = True,
        waiter_lease: Number = DEFAULT_WAITER_LEASE,
        events: Optional[Events] = None,
        max_hold: Optional[Number] = None,
    ) -> None:
        self.limit = limit
        super().__init__(redis, name, timeout, blocking, blocking_timeout, label=label, auto_renew=auto_renew,
                         on_lost=on_lost, raise_on_release_error=raise_on_release_error, waiter_lease=waiter_lease,
                         events=events, max_hold=max_hold)
        #: Permits held through this object, by token.
        self._permits: dict[bytes, Permit] = {}
        self._refused: tuple[Optional[int], Optional[int]] = (None, None)

    def check_settings(self, name: object, timeout: Optional[Number]) -> None:
        if self.limit is not None:
            check_limit(self.limit, name)

    @property
    def limit(self) -> Optional[int]:
        """The limit the first acquire stores in Redis when none is stored yet (``None``: none)."""
        return self._limit

    @limit.setter
    def limit(self, value: Optional[int]) -> None:
        self._limit = value
        self.acquire_setting = value if value is not None else ""

    # -- arguments and replies of the scripts ------------------------------------------------
    def set_limit_args(self, size: int) -> tuple:
        return (size, self.member, *self.retention_args)

    def checked_pttl(self, token: bytes, pttl: int) -> int:
        """The reply of ``sem_extend.lua``: the new lease, or an error (the permit marked lost)."""
        if pttl == -2:
            permit = self._permits.get(token)
            if permit is not None:
                permit.lost = True
            raise LockNotOwnedError("Cannot extend a permit that's no longer held", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a permit with no timeout", lock_name=self.name)
        return pttl

    def checked_size(self, count: int) -> int:
        """The reply of ``sem_set_limit.lua``: the number of live permits, or an error."""
        if count == -2:
            raise self.refusal(count)
        return count

    def refusal(self, status: int) -> Exception:
        if status == -1:
            return SemaphoreLimitNotSet(
                "The semaphore has no limit: call set_max_size() or pass limit=", lock_name=self.name
            )
        return super().refusal(status)

    def _lost_subject(self, local: Any) -> Any:
        return local

    def _note_refusal(self, pttl: Optional[int], limit: Optional[int] = None) -> None:
        self._refused = (pttl, limit)

    def _refusal(self) -> tuple[Optional[int], Optional[int]]:
        return self._refused

    @property
    def refused_limit(self) -> Optional[int]:
        """The limit stored in Redis (the one in force), from the latest refused acquire."""
        return self._refused[1]

    # -- local bookkeeping -----------------------------------------------------------------------
    def _stack(self) -> list[bytes]:
        """Tokens of the permits the current thread (or task) acquired without an identity."""
        raise NotImplementedError

    def _own(self, token: bytes, grant: Grant, sent_at: float, anonymous: bool) -> tuple[Permit, bool]:
        """Record a granted permit; returns it and whether it is a new hold (not the renewal of a
        live permit of the same identity, which keeps its fence and its start)."""
        deadline = self.deadline_for(sent_at, grant.pttl)
        permit = self._permits.get(token)
        new = True
        if permit is None:
            permit = self._permits[token] = Permit(self, token, grant.fence, deadline)
            if anonymous:
                self._stack().append(token)
        else:
            new = permit.lost or permit.fence != grant.fence
            self._unwatch(permit)
            permit.fence, permit.deadline, permit.lost = grant.fence, deadline, False
        if new:
            self.report.began(permit)
        self._watch(permit, token, grant.provisional)
        return permit, new

    def _token_to_release(self, identity: Optional[Identity]) -> bytes:
        if identity is not None:
            return encode_identity(identity, self.name)
        stack = self._stack()
        if not stack:
            raise LockError("Cannot release a semaphore this thread did not acquire", lock_name=self.name)
        return stack[-1]

    def _to_release(self, identity: Optional[Identity]) -> tuple[bytes, Optional[Permit], Optional[float]]:
        """The token a release of ``identity`` gives back, its permit here and how long it was held."""
        token = self._token_to_release(identity)
        permit = self._permits.get(token)
        return token, permit, held_time(permit)

    def _stop_watching(self, token: bytes) -> None:
        """Before a permit's release: no renewal (nor claim) of it may go out from now on, or its
        reply, coming after the release, would declare the permit lost."""
        permit = self._permits.get(token)
        if permit is not None:
            self._unwatch(permit)

    def _forget(self, token: bytes, stack: Optional[list[bytes]] = None) -> Optional[Permit]:
        """Drop the permit of ``token``; ``stack``: the anonymous permits of the thread or task that
        took it (default: the current one's)."""
        permit = self._permits.pop(token, None)
        if permit is not None and permit.watched:
            self.side.watchdog().unregister(self, permit)
        if stack is None:
            stack = self._stack()
        if token in stack:
            stack.remove(token)
        return permit

    def _held(self, identity: Optional[Identity]) -> Permit:
        permit = self.permit(identity)
        if permit is None:
            raise LockError("This semaphore object holds no such permit", lock_name=self.name)
        return permit

    # -- local state -------------------------------------------------------------------------------
    def share_permits_with(self, target: SemaphoreBase) -> None:
        """Make ``target`` (a semaphore on the same name: this one's twin of the other side) see
        the permits this one holds, each with its fence and start, from now on (one record of them)."""
        target._permits = self._permits

    def permit(self, identity: Optional[Identity] = None) -> Optional[Permit]:
        """The permit held through this object for ``identity`` (default: the current thread's
        latest permit acquired without an identity), or ``None``."""
        if identity is not None:
            return self._permits.get(encode_identity(identity, self.name))
        stack = self._stack()
        return self._permits.get(stack[-1]) if stack else None

    @property
    def fence(self) -> Optional[int]:
        """Fence token of the current permit (``None`` when this thread holds none)."""
        permit = self.permit()
        return permit.fence if permit is not None else None

    @property
    def deadline(self) -> Optional[float]:
        """``time.monotonic()`` instant after which the current permit may have ended."""
        permit = self.permit()
        return permit.deadline if permit is not None else None

    @property
    def valid(self) -> bool:
        """True while the current permit is held and its local deadline has not passed."""
        permit = self.permit()
        return permit is not None and permit.valid

    def ensure_valid(self) -> None:
        """Raise :class:`~django_redis_coord.exceptions.LockLostError` unless the current permit is still valid."""
        if not self.valid:
            raise LockLostError("The permit is no longer held", lock_name=self.name)

    def _exit_error(self, released: bool, permit: Optional[Permit]) -> Optional[LockLostError]:
        if released and (permit is None or not permit.lost):
            return None
        if self.raise_on_release_error:
            return LockLostError("The permit was lost before it was released", lock_name=self.name)
        logger.warning("Semaphore %r: the permit was lost before the context manager exited.", self.name)
        return None

    def __repr__(self) -> str:
        return (
            f"<{type(self).__module__}.{type(self).__qualname__} name={self.name!r} "
            f"limit={self.limit!r} timeout={self.timeout!r}>"
        )
