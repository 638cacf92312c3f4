"""The Django signals of a lock or a Redlock (sync and asyncio), sent around the core primitive's
acquire and release: :mod:`django_redis_coord.signals`.

The core primitives call only ``on_lost`` (a user callback); the signals of a hold's start and
end are sent by these subclasses.  Semaphores: :mod:`django_redis_coord.semaphore_signalling`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Optional, Union

from . import hold_times
from ._base import first_time, to_ms
from ._tasks import in_background, run_to_completion
from .asyncio.lock import Lock as AsyncCoreLock
from .asyncio.redlock import Redlock as AsyncCoreRedlock
from .exceptions import LockNotOwnedError
from .locks import Lock as CoreLock
from .redlock import Redlock as CoreRedlock
from .signals import asend, lock_acquired, lock_contended, lock_lost, lock_released, send

__all__ = [
    "Signals",
    "SignallingLock",
    "AsyncSignallingLock",
    "SignallingRedlock",
    "AsyncSignallingRedlock",
    "retry_after_seconds",
]

Name = Union[str, bytes]


def retry_after_seconds(pttl_ms: Optional[int]) -> Optional[int]:
    """Seconds until a holder's TTL runs out, rounded up (at least 1); ``None`` without expiry."""
    if pttl_ms is None or pttl_ms == -1:
        return None
    if pttl_ms < 0:
        return 1
    return max(1, math.ceil(pttl_ms / 1000.0))


class Signals:
    """What every signalling primitive shares: the application's name and the signal arguments."""

    # Provided by the primitive the mixin is combined with.
    kind: str
    name: Any
    _voice: Any = None

    def __init__(self, redis: Any, name: Name, *args: Any, app_name: Optional[Name] = None, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)  # type: ignore[call-arg]
        #: The name as the application wrote it (without ``KEY_PREFIX``).
        self.app_name = app_name if app_name is not None else self.name
        self._voice: Any = None

    def name_view(self, view: Optional[str]) -> None:
        """Name ``view`` (a dotted path) in the holder info of this object's holds: what the admin
        page, ``manage.py locks`` and the listing show as the holder's view."""
        node: Any = getattr(self, "_node", self)  # a Redlock's holder info is its per-master lock's
        node.view = view

    def speak_for(self, primitive: Any) -> None:
        """Send this object's signals as ``primitive``'s: its class as the sender and it as
        ``instance`` (a sync twin finishing an asyncio hold from another thread)."""
        self._voice = primitive

    @property
    def signal_sender(self) -> type:
        """The ``sender`` of this object's signals: its class, or that of the one it speaks for."""
        return type(self if self._voice is None else self._voice)

    def _signal_args(self) -> dict[str, Any]:
        instance = self if self._voice is None else self._voice
        return {"name": self.app_name, "key": self.name, "kind": self.kind, "instance": instance}


class SignallingMixin(Signals):
    """Sends the hold signals around a lock's acquire and release (the hold's state is per thread/task).

    An acquire ends with lock_acquired (a new hold, not an inner one of a re-entrant lock) or
    lock_contended, a release with lock_released or lock_lost.  Their arguments are built only when
    the signal has receivers, looked at on every call: a receiver connected later gets the next
    signal.  The start of every new hold is kept, for the held_time of its closing signal whoever
    listens by then.  (Each flavour's acquire and release write this out: a ``@locked`` view runs
    them on every request.)
    """

    on_lost: Any
    fence: Any
    _state: Any

    def _fresh(self, redis: Any = None) -> Any:
        """As the lock's ``_fresh``; the copy speaks for itself (see :meth:`Signals.speak_for`)."""
        twin = super()._fresh(redis)  # type: ignore[misc]
        twin._voice = None
        return twin

    def _loss_args(self, local: Any) -> Optional[dict[str, Any]]:
        """The lock_lost arguments for the hold kept in ``local``, once per hold (else None)."""
        if getattr(local, "lost", False) or not first_time(local, "lost_signalled"):
            return None
        since = getattr(local, "acquired_at", None)
        held = None if since is None else time.monotonic() - since
        return {"fence": getattr(local, "fence", None), "held_time": held, **self._signal_args()}

    # The last reply that did not grant: how long the current holder still has.
    def _note_refusal(self, grant: Any) -> Any:
        if not grant.acquired:
            self._state().holder_pttl = grant.pttl
        return grant

    @property
    def retry_after(self) -> Optional[int]:
        """After a refused acquire: the typical recent hold of this name, at most the seconds until
        the holder's TTL ends (rounded up; see :mod:`django_redis_coord.hold_times`), else None."""
        return hold_times.retry_after(self.name, retry_after_seconds(getattr(self._state(), "holder_pttl", None)))

    def _held_time(self) -> Optional[float]:
        since = getattr(self._state(), "acquired_at", None)
        return None if since is None else time.monotonic() - since

    def _contended_args(self, started: float) -> dict[str, Any]:
        """The arguments of lock_contended for an acquire started at ``started``."""
        return {"wait_time": time.monotonic() - started, "retry_after": self.retry_after, **self._signal_args()}

    def _closing_args(self) -> dict[str, Any]:
        """Taken before a release when lock_released or lock_lost has receivers: the arguments of
        the hold's closing signal."""
        return {"fence": self.fence, "held_time": self._held_time(), **self._signal_args()}

    def _hold_started(self) -> Optional[float]:
        """After a successful acquire: when the new hold started (recorded for held_time), or
        ``None`` for an inner hold of a re-entrant lock (no signal for it)."""
        state = self._state()
        if int(getattr(state, "count", 1) or 1) > 1:
            return None
        now = state.acquired_at = time.monotonic()
        state.lost_signalled = False
        return now

    def _first_loss(self, state: Any) -> bool:
        return first_time(state, "lost_signalled")

    def _hold_ended(self, state: Any) -> bool:
        """After a successful release: did the hold end (not just an inner re-entrant one)?"""
        return state.token is None


class SyncSignalling(SignallingMixin):
    """Sends the signals from a sync primitive (watchdog thread or caller's thread)."""

    def _mark_lost(self, local: Any) -> None:
        args = self._loss_args(local)
        if args is not None:
            send(lock_lost, self.signal_sender, **args)
        super()._mark_lost(local)  # type: ignore[misc]

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        started = time.monotonic()
        acquired = super().acquire(*args, **kwargs)  # type: ignore[misc]
        if acquired:
            now = self._hold_started()
            if now is not None and lock_acquired.receivers:
                send(lock_acquired, self.signal_sender, fence=self.fence, wait_time=now - started,
                     **self._signal_args())
        elif lock_contended.receivers:
            send(lock_contended, self.signal_sender, **self._contended_args(started))
        return acquired

    def release(self) -> None:
        state = self._state()
        held = self._held_time()
        args = self._closing_args() if lock_released.receivers or lock_lost.receivers else None
        try:
            super().release()  # type: ignore[misc]
        except LockNotOwnedError:  # lost (or found lost before)
            if self._first_loss(state) and args is not None:
                send(lock_lost, self.signal_sender, **args)
            raise
        if self._hold_ended(state):
            hold_times.record(self.name, held)
            if args is not None:
                send(lock_released, self.signal_sender, **args)


class AsyncSignalling(SignallingMixin):
    """Sends the signals from an asyncio primitive (the loss from the loop's watchdog task)."""

    def _mark_lost(self, local: Any) -> None:
        args = self._loss_args(local)
        if args is not None:
            in_background(asend(lock_lost, self.signal_sender, **args))
        super()._mark_lost(local)  # type: ignore[misc]

    async def acquire(self, *args: Any, **kwargs: Any) -> bool:
        started = time.monotonic()
        acquired = await super().acquire(*args, **kwargs)  # type: ignore[misc]
        if acquired:
            now = self._hold_started()
            if now is not None and lock_acquired.receivers:
                try:
                    await asend(lock_acquired, self.signal_sender, fence=self.fence, wait_time=now - started,
                                **self._signal_args())
                except BaseException:  # cancelled while telling the receivers: nobody would release it
                    await run_to_completion(self._release_call())  # type: ignore[attr-defined]
                    raise
        elif lock_contended.receivers:
            await asend(lock_contended, self.signal_sender, **self._contended_args(started))
        return acquired

    async def release(self) -> None:
        state = self._state()
        held = self._held_time()
        args = self._closing_args() if lock_released.receivers or lock_lost.receivers else None
        try:
            await super().release()  # type: ignore[misc]
        except LockNotOwnedError:
            if self._first_loss(state) and args is not None:
                await asend(lock_lost, self.signal_sender, **args)
            raise
        if self._hold_ended(state):
            hold_times.record(self.name, held)
            if args is not None:
                await asend(lock_released, self.signal_sender, **args)


class SignallingLock(SyncSignalling, CoreLock):
    """:class:`django_redis_coord.locks.Lock` sending the signals of :mod:`django_redis_coord.signals`."""

    def do_acquire(self, *args: Any, **kwargs: Any) -> Any:
        return self._note_refusal(super().do_acquire(*args, **kwargs))

    def do_cancel(self, *args: Any, **kwargs: Any) -> Any:
        return self._note_refusal(super().do_cancel(*args, **kwargs))


class AsyncSignallingLock(AsyncSignalling, AsyncCoreLock):  # type: ignore[misc]
    """The asyncio :class:`~django_redis_coord.asyncio.lock.Lock` sending the same signals."""

    async def do_acquire(self, *args: Any, **kwargs: Any) -> Any:
        return self._note_refusal(await super().do_acquire(*args, **kwargs))

    async def do_cancel(self, *args: Any, **kwargs: Any) -> Any:
        return self._note_refusal(await super().do_cancel(*args, **kwargs))


class RedlockSignals(SignallingMixin):
    """What the sync and asyncio signalling Redlocks add.

    A refused attempt records how long the other holder keeps a quorum: the time until enough
    of the refusing masters' holds end (what they reported), or the Redlock's own ``timeout``
    as an upper bound when they cannot tell (a hold without expiry, masters that did not answer).
    A Redlock is not re-entrant: every successful release ends the hold.
    """

    timeout: Any

    def failed_attempt(self, grants: Any) -> Any:
        busy = self.busy_for_ms(grants)  # type: ignore[attr-defined]
        self._state().holder_pttl = busy if busy is not None else to_ms(self.timeout)
        return super().failed_attempt(grants)  # type: ignore[misc]

    def _hold_ended(self, state: Any) -> bool:
        return True


class SignallingRedlock(SyncSignalling, RedlockSignals, CoreRedlock):
    """:class:`django_redis_coord.Redlock` sending the signals of :mod:`django_redis_coord.signals`."""


class AsyncSignallingRedlock(AsyncSignalling, RedlockSignals, AsyncCoreRedlock):  # type: ignore[misc]
    """The asyncio :class:`~django_redis_coord.asyncio.Redlock` sending the same signals."""


