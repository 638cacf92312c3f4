"""Counting semaphores on Redis (sync): leased, fenced permits on server time, served in FIFO order.

Seed 000's identity semaphore runs unchanged::

    >>> from redis import Redis
    >>> from django_redis_coord import Semaphore
    >>> client = Redis(decode_responses=True)
    >>> semaphore = Semaphore(client, "test-semaphore")
    >>> semaphore.set_max_size(3)
    >>> semaphore.acquire("peter")
    True
    >>> semaphore.acquire("jack"), semaphore.acquire("tom"), semaphore.acquire("mary")
    (True, True, False)
    >>> semaphore.release("jack")
    True
    >>> semaphore.get_current_size(), semaphore.get_max_size()
    (2, 3)

and so does the form with the limit and the lease given up front, waiting in line::

    >>> with Semaphore(client, "thumbnails", limit=4, timeout=30) as permit:
    ...     render(fence=permit.fence)                                     # doctest: +SKIP

* The limit lives in Redis (every client agrees, it can change at runtime; shrinking it never
  evicts a holder).  A permit's lease ends on the server's clock: a client whose clock is off can
  neither over-issue permits nor evict live ones.  Expired permits are reclaimed inside acquire.
* Every operation is one Lua script (``lua/sem_*.lua``).  Every grant carries a fence token,
  strictly greater than every fence issued before for the semaphore.
* Waiting never polls: a blocking acquire joins a FIFO queue and sleeps until a release (or a
  reclaim, or a raised limit) grants the permit server-side to the head of the queue and announces
  it (see :mod:`django_redis_coord.waiting`).  A waiter also looks again when the earliest lease
  ends, so a crashed holder's permit is reused promptly.
* Optional watchdog renewal of each permit, with the same loss signal as :class:`Lock`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Optional, Union

from ._base import DEFAULT_WAITER_LEASE, META_RETENTION_MS, Grant, Number, QueuedBase, check_number, new_token, to_ms
from .exceptions import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    LockAcquireTimeout,
    LockError,
    LockLostError,
    LockNotOwnedError,
    SemaphoreLimitNotSet,
)
from .holders import HolderInfo, permits_from_inspect
from .locks import QueuedPrimitive

__all__ = ["Semaphore", "Permit", "SemaphoreBase"]

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
    ) -> None:
        self.limit = limit
        super().__init__(
            redis,
            name,
            timeout,
            blocking,
            blocking_timeout,
            label=label,
            auto_renew=auto_renew,
            on_lost=on_lost,
            raise_on_release_error=raise_on_release_error,
            waiter_lease=waiter_lease,
        )
        #: Permits held through this object, by token.
        self._permits: dict[bytes, Permit] = {}

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

    # -- local bookkeeping -----------------------------------------------------------------------
    def _stack(self) -> list[bytes]:
        """Tokens of the permits the current thread (or task) acquired without an identity."""
        raise NotImplementedError

    def _own(self, token: bytes, grant: Grant, sent_at: float, anonymous: bool) -> Permit:
        deadline = self.deadline_for(sent_at, grant.pttl)
        permit = self._permits.get(token)
        if permit is None:
            permit = self._permits[token] = Permit(self, token, grant.fence, deadline)
            if anonymous:
                self._stack().append(token)
        else:
            if permit.watched:
                self._watchdog().unregister(self, permit)
            permit.fence, permit.deadline, permit.lost = grant.fence, deadline, False
        self._watch(permit, token, grant.provisional)
        return permit

    def _token_to_release(self, identity: Optional[Identity]) -> bytes:
        if identity is not None:
            return encode_identity(identity, self.name)
        stack = self._stack()
        if not stack:
            raise LockError("Cannot release a semaphore this thread did not acquire", lock_name=self.name)
        return stack[-1]

    def _stop_watching(self, token: bytes) -> None:
        """Before a permit's release: no renewal (nor claim) of it may go out from now on, or its
        reply, coming after the release, would declare the permit lost."""
        permit = self._permits.get(token)
        if permit is not None and permit.watched:
            self._watchdog().unregister(self, permit)
            permit.watched = False

    def _forget(self, token: bytes, stack: Optional[list[bytes]] = None) -> Optional[Permit]:
        """Drop the permit of ``token``; ``stack``: the anonymous permits of the thread or task that
        took it (default: the current one's)."""
        permit = self._permits.pop(token, None)
        if permit is not None and permit.watched:
            self._watchdog().unregister(self, permit)
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
        """Raise :class:`LockLostError` unless the current permit is still valid."""
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


class _ThreadStacks(threading.local):
    def __init__(self) -> None:
        self.stack: list[bytes] = []


class Semaphore(QueuedPrimitive, SemaphoreBase):
    """A counting semaphore whose permits are leased on server time, fenced and served FIFO.

    ``Semaphore(redis, name, limit=None, timeout=None, blocking=False, blocking_timeout=None, *,
    label=None, auto_renew=False, on_lost=None, raise_on_release_error=True, waiter_lease=2.0)``

    * ``limit``: stored in Redis by the first acquire when no limit is stored yet; afterwards the
      stored limit applies (change it with :meth:`set_max_size`).
    * ``timeout``: lease of each permit in seconds (``None``: permits never expire, as in seed 000).
    * ``blocking``/``blocking_timeout``: defaults of :meth:`acquire` (non-blocking by default, as in
      the seed); the context manager always waits, up to ``blocking_timeout``.
    * ``auto_renew``: the watchdog renews each permit at ``timeout / 3``; ``on_lost(permit)`` is
      called when a permit could not be renewed in time.
    """

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local = _ThreadStacks()

    def _stack(self) -> list[bytes]:
        return self.local.stack

    # -- seed 000's API --------------------------------------------------------------------------
    def set_max_size(self, size: int) -> None:
        """Set the limit for every client.  Raising it serves waiting callers at once; lowering it
        stops new grants until enough holders have released (nobody is evicted)."""
        check_limit(size, self.name)
        self.do_set_limit(size)

    def get_max_size(self) -> int:
        """The limit stored in Redis; else the one this object would store; else 0."""
        stored = self.redis.hget(self.keys.meta, "limit")
        if stored is not None:
            return int(stored)
        return self.limit or 0

    def get_current_size(self) -> int:
        """How many permits are held right now (leases that ended are not counted)."""
        return int(self.do_inspect("count")[2])

    def acquire(
        self,
        identity: Optional[Identity] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
    ) -> bool:
        """Take a permit for ``identity`` (default: a fresh token kept for this thread).

        Returns True once held, False when none is free (non-blocking) or ``blocking_timeout``
        passed.  An identity that already holds a permit gets its lease renewed (True).  A
        blocking call waits in FIFO order and is woken by a release, when the earliest lease
        ends, or at ``blocking_timeout`` (kept on the client's monotonic clock).
        """
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        token = encode_identity(identity, self.name) if identity is not None else new_token()
        taken = self._take(token, blocking, stop_at, own=identity is None)
        if taken is None:
            return False
        self._own(token, *taken, anonymous=identity is None)
        return True

    def release(self, identity: Optional[Identity] = None) -> bool:
        """Return the permit of ``identity`` (default: this thread's latest permit).

        True when it was released; False when that identity holds no permit (never had one, or
        its lease ended).  Free permits go to the first waiters at once.
        """
        token = self._token_to_release(identity)
        self._stop_watching(token)
        # Keep local state until Redis answered: a connection error must leave a way to retry.
        released = self.do_release(token)
        self._forget(token)
        return released

    def extend(self, additional_time: Number, replace_ttl: bool = False, identity: Optional[Identity] = None) -> bool:
        """Add ``additional_time`` seconds to a permit's remaining lease (or set it, with ``replace_ttl``)."""
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        permit = self._held(identity)
        self.check_extendable("extend")
        return self._extend_hold(permit, to_ms(additional_time), "replace" if replace_ttl else "add")

    def reacquire(self, identity: Optional[Identity] = None) -> bool:
        """Reset a permit's lease to ``timeout``."""
        permit = self._held(identity)
        self.check_extendable("reacquire")
        return self._extend_hold(permit, self._ttl_ms, "replace")

    def holders(self) -> list[HolderInfo]:
        """Every live permit of this semaphore (from all clients) with its holder's metadata."""
        return permits_from_inspect(self.keys.name, self.do_inspect("full"))

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> Semaphore:
        if self.acquire(blocking=True):
            return self
        raise LockAcquireTimeout("Unable to acquire a permit within the time specified", lock_name=self.name)

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        permit = self.permit()
        released = self.release()
        error = self._exit_error(released, permit)
        if error is not None:
            raise error

    # -- the only methods talking to Redis -------------------------------------------------------
    def do_release(self, token: bytes) -> bool:
        script = self.scripts.get(self.redis, "sem_release")
        return int(script(self.release_keys(), self.release_args(token), client=self.redis)) == 1

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "sem_extend")
        return self.checked_pttl(token, int(script(self.extend_keys(), self.extend_args(token, ms, mode),
                                                   client=self.redis)))

    def do_set_limit(self, size: int) -> int:
        script = self.scripts.get(self.redis, "sem_set_limit")
        count = int(script(self.release_keys(), self.set_limit_args(size), client=self.redis))
        return self.checked_size(count)

    def do_inspect(self, mode: str) -> Any:
        script = self.scripts.get(self.redis, "sem_inspect")
        return script(self.inspect_keys(), (mode,), client=self.redis)
