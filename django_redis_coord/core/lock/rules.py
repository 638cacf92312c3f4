"""What the sync and asyncio locks share: their arguments and the caller's hold
(:class:`LockBase`), and the rules of a ``with`` block (:func:`timed_out`, :func:`release_failed`;
:class:`WithBlock` and :class:`AsyncWithBlock` for the primitives that take them as a base class).
Nothing in here talks to Redis."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Optional, TypeVar, Union

from ..arguments import Number, check_number, encode_token
from ..events import Events
from ..exceptions import InvalidLockArgument, InvalidLockArgumentType, LockAcquireTimeout, LockError, LockLostError
from ..grants import Grant
from ..holds import Hold, taken_elsewhere
from ..queue.rules import DEFAULT_WAITER_LEASE, META_RETENTION_MS, QueuedBase

__all__ = ["AsyncWithBlock", "LockBase", "ReleaseOnExit", "WithBlock", "release_failed", "timed_out"]

_WithT = TypeVar("_WithT", bound="WithBlock")
_AsyncWithT = TypeVar("_AsyncWithT", bound="AsyncWithBlock")


def timed_out(primitive: Any) -> LockAcquireTimeout:
    """The error of a ``with`` block that could not acquire in time (as redis-py's Lock behaves)."""
    return LockAcquireTimeout("Unable to acquire lock within the time specified", lock_name=primitive.name)


def release_failed(primitive: Any) -> None:
    """A release at the end of a ``with`` block failed: re-raise, or log it when the primitive's
    ``raise_on_release_error`` is off.  Call it from the ``except`` clause."""
    if primitive.raise_on_release_error:
        raise  # noqa: PLE0704 -- the exception being handled by the caller's except clause
    logging.getLogger("django_redis_coord").warning(
        "%s %r was no longer owned when exiting the context manager.", primitive.kind.capitalize(), primitive.name
    )


class ReleaseOnExit:
    """What the ``with`` blocks of the lock-like primitives share (as redis-py's Lock behaves)."""

    name: Any
    kind: str
    raise_on_release_error: bool

    def timed_out(self) -> LockAcquireTimeout:
        """The error of a ``with`` block that could not acquire in time."""
        return timed_out(self)

    def release_failed(self) -> None:
        """A release at the end of a ``with`` block failed: re-raise, or log it when
        ``raise_on_release_error`` is off.  Call it from the ``except`` clause."""
        release_failed(self)


class WithBlock(ReleaseOnExit):
    """``with primitive:`` acquires (or raises :class:`LockAcquireTimeout`) and releases at the end."""

    acquire: Callable[..., bool]
    release: Callable[[], Any]

    def __enter__(self: _WithT) -> _WithT:
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


class AsyncWithBlock(ReleaseOnExit):
    """The asyncio twin of :class:`WithBlock`: ``async with primitive:``."""

    acquire: Callable[..., Awaitable[bool]]
    release: Callable[[], Awaitable[Any]]

    async def __aenter__(self: _AsyncWithT) -> _AsyncWithT:
        if await self.acquire():
            return self
        raise self.timed_out()

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError:
            self.release_failed()


class LockBase(QueuedBase):
    """Arguments, keys and the caller's hold common to :class:`Lock` and its asyncio twin."""

    kind = "lock"
    key_kind = b"lock"
    acquire_setting = META_RETENTION_MS

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes],
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        label: Optional[str] = None,
        auto_renew: bool = False,
        on_lost: Optional[Callable[[Any], None]] = None,
        reentrant: bool = False,
        waiter_lease: Number = DEFAULT_WAITER_LEASE,
        events: Optional[Events] = None,
        max_hold: Optional[Number] = None,
    ) -> None:
        self.sleep = sleep
        super().__init__(redis, name, timeout, blocking, blocking_timeout, label=label, auto_renew=auto_renew,
                         on_lost=on_lost, raise_on_release_error=raise_on_release_error, waiter_lease=waiter_lease,
                         events=events, max_hold=max_hold)
        if not isinstance(reentrant, bool):
            raise InvalidLockArgumentType(f"reentrant must be True or False, not {reentrant!r}", lock_name=name)
        if reentrant and not thread_local:
            # A hold shared by every thread (task) has no owner to re-enter it: another thread
            # would join the hold instead of waiting its turn.
            raise InvalidLockArgument("reentrant=True needs thread_local=True: re-entry is per thread (task)",
                                      lock_name=name)
        self.thread_local = bool(thread_local)
        self.reentrant = reentrant

    def check_settings(self, name: object, timeout: Optional[Number]) -> None:
        check_number("sleep", self.sleep, allow_none=False, positive=False, lock_name=name)
        if timeout is not None and self.sleep > timeout:
            raise InvalidLockArgument("'sleep' must be less than 'timeout'", lock_name=name)

    def _lost_subject(self, local: Any) -> Any:
        return self

    # -- the caller's hold (per thread or task, or shared: see ``local``) --------------------
    @property
    def hold_record(self) -> Hold:
        """The current thread's (or task's) hold, as this object keeps it (``token`` ``None``: none);
        :func:`~django_redis_coord.core.holds.copy_hold` makes a twin of this lock hold the same."""
        return self._state()  # type: ignore[no-any-return]

    @property
    def fence(self) -> Optional[int]:
        """Fence token of the current hold (``None`` when not held by this thread or task, nor in a
        forked child: the parent's hold is not the child's)."""
        local = self._state()
        return local.fence if local.token is not None and not taken_elsewhere(local) else None

    @property
    def deadline(self) -> Optional[float]:
        """``time.monotonic()`` instant after which the hold may have ended (``None``: no expiry)."""
        return self._state().deadline  # type: ignore[no-any-return]

    @property
    def valid(self) -> bool:
        """True while this thread (or task) holds the lock and its local deadline has not passed
        (False in a forked child for the parent's hold)."""
        local = self._state()
        if local.token is None or local.lost or taken_elsewhere(local):
            return False
        deadline = local.deadline
        return deadline is None or time.monotonic() < deadline

    def ensure_valid(self) -> None:
        """Raise :class:`~django_redis_coord.exceptions.LockLostError` unless the hold is still valid."""
        if not self.valid:
            raise LockLostError("The lock is no longer held", lock_name=self.name)

    @staticmethod
    def _still_holding(local: Any, token: bytes, fence: Optional[int]) -> bool:
        """Whether the hold state ``local`` still describes the hold taken with ``token`` and
        ``fence``.  With ``thread_local=False`` one state serves every thread (or task): once a
        release reached Redis, another thread may already have been handed the next hold and
        written it there (a new fence), and what the release does next must leave that alone."""
        return local.token == token and local.fence == fence

    @staticmethod
    def _forget_hold(local: Any) -> None:
        """The hold ``local`` ended: nothing is held through it any more."""
        local.token = None
        local.count = 0

    def acquire_arguments(
        self, sleep: Optional[Number], blocking: Optional[bool], blocking_timeout: Optional[Number]
    ) -> tuple[bool, Optional[float]]:
        """Checked ``(blocking, stop_at)`` of an acquire (``sleep`` is checked, then unused: the
        queue wakes a waiter)."""
        if sleep is not None:
            check_number("sleep", sleep, allow_none=False, positive=False, lock_name=self.name)
        return self.wait_args(blocking, blocking_timeout)

    def reenter(self, token: Optional[Union[str, bytes]]) -> bool:
        """An acquire by this thread's (task's) holder of a re-entrant lock joins its hold: True
        when it did.  A token given must be the hold's; a hold already lost cannot be joined.  A
        forked child never joins the hold its parent took (the state it inherited): it takes a hold
        of its own, in line like any other process."""
        local = self._state()
        if not (self.reentrant and local.token is not None and local.count > 0):
            return False
        if taken_elsewhere(local):
            return False
        if token is not None and encode_token(token, self.name) != local.token:
            raise InvalidLockArgument("a reentrant hold keeps its first token", lock_name=self.name)
        if not self.valid:  # its TTL ran out, or the watchdog found it gone: nothing to join
            raise LockLostError("The hold this re-entry would join was lost", lock_name=self.name)
        local.count += 1
        return True

    def _own(self, token: bytes, grant: Grant, sent_at: float) -> Any:
        """Record a granted hold and, when needed, hand it to the watchdog; returns the hold."""
        local = self._state()
        self.report.began(local)
        local.token = token
        local.pid = os.getpid()  # only this process may release or renew it (refuse_forked)
        local.fence = grant.fence
        local.deadline = self.deadline_for(sent_at, grant.pttl)
        local.count = 1
        local.lost = False
        self._watch(local, token, grant.provisional)
        if self.local.per_worker:  # a hold of this thread or task only: nobody else can release it
            self.side.watch_worker_end(self, local, token)
        return local

    def _detach(self, local: Any) -> None:
        """Before the hold ``local`` is released: out of the watchdog, its worker's end no longer watched."""
        self._unwatch(local)
        self.side.unwatch_worker_end(local)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} name={self.name!r} timeout={self.timeout!r}>"
