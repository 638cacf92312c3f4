"""Locks and semaphores configured from ``DJANGO_REDIS_COORD``, sending Django signals.

:func:`lock` and :func:`semaphore` (also importable from ``django_redis_coord``) build the core
primitives on the client of :func:`django_redis_coord.connection.get_client`, with the
configured ``KEY_PREFIX``, ``DEFAULT_TIMEOUT`` and ``AUTO_RENEW``; :func:`alock` and
:func:`asemaphore` are the asyncio forms (call them inside a coroutine).  The objects they return
are the core classes plus the signals of :mod:`django_redis_coord.signals`.  :func:`redlock` and
:func:`aredlock` build a :class:`~django_redis_coord.Redlock` over the masters of
``REDLOCK["MASTERS"]``, with the same signals.

>>> from django_redis_coord import lock                   # doctest: +SKIP
>>> with lock("invoice:42") as held:                      # doctest: +SKIP
...     Invoice.objects.filter(pk=42).update(fence=held.fence, status="sent")

>>> from django_redis_coord.shortcuts import alock        # doctest: +SKIP
>>> async with alock("invoice:42", timeout=10):           # doctest: +SKIP
...     ...
"""

from __future__ import annotations

import math
import time
from typing import Any, Optional, Union

from . import hold_times
from ._base import first_of, first_time, to_ms
from ._tasks import in_background, run_to_completion
from .asyncio.lock import Lock as AsyncCoreLock
from .asyncio.redlock import Redlock as AsyncCoreRedlock
from .conf import coord_settings
from .connection import get_async_client, get_async_redlock_masters, get_client, get_redlock_masters
from .exceptions import InvalidLockArgument, LockNotOwnedError
from .locks import Lock as CoreLock
from .redlock import Redlock as CoreRedlock
from .signals import asend, lock_acquired, lock_contended, lock_lost, lock_released, send

__all__ = [
    "lock",
    "semaphore",
    "alock",
    "asemaphore",
    "redlock",
    "aredlock",
    "SignallingLock",
    "AsyncSignallingLock",
    "SignallingRedlock",
    "AsyncSignallingRedlock",
    "retry_after_seconds",
]

#: Marks an argument the caller did not give (``None`` is a meaningful timeout).
DEFAULT: Any = object()

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


def _options(timeout: Any, auto_renew: Optional[bool]) -> tuple[Any, bool]:
    settings = coord_settings()
    if timeout is DEFAULT:
        timeout = settings.default_timeout
    if auto_renew is None:
        auto_renew = settings.auto_renew and timeout is not None
    return timeout, bool(auto_renew)


def lock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    client: Any = None,
    **kwargs: Any,
) -> SignallingLock:
    """A :class:`~django_redis_coord.locks.Lock` named ``KEY_PREFIX:name`` on the configured Redis.

    ``timeout`` defaults to ``DEFAULT_TIMEOUT`` and ``auto_renew`` to ``AUTO_RENEW``; every
    other keyword goes to the Lock (``blocking_timeout``, ``label``, ``on_lost``, ...).
    """
    timeout, auto_renew = _options(timeout, auto_renew)
    settings = coord_settings()
    return SignallingLock(
        client if client is not None else get_client(),
        settings.prefixed(name),
        timeout=timeout,
        auto_renew=auto_renew,
        app_name=name,
        **kwargs,
    )


def alock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    client: Any = None,
    **kwargs: Any,
) -> AsyncSignallingLock:
    """The asyncio form of :func:`lock` (call it inside a coroutine: the client is per event loop)."""
    timeout, auto_renew = _options(timeout, auto_renew)
    settings = coord_settings()
    return AsyncSignallingLock(
        client if client is not None else get_async_client(),
        settings.prefixed(name),
        timeout=timeout,
        auto_renew=auto_renew,
        app_name=name,
        **kwargs,
    )


def _redlock_options(name: Name, timeout: Any, auto_renew: Optional[bool]) -> tuple[Any, bool]:
    timeout, auto_renew = _options(timeout, auto_renew)
    if timeout is None:
        raise InvalidLockArgument(
            "A Redlock always expires: give it a timeout (DEFAULT_TIMEOUT is None in DJANGO_REDIS_COORD)",
            lock_name=name,
        )
    return timeout, auto_renew


def redlock_node_timeout(timeout: Any) -> dict[str, Any]:
    """``{"node_timeout": ...}`` from ``REDLOCK["NODE_TIMEOUT"]`` (capped at a quarter of
    ``timeout``), or nothing when it is not set (the Redlock's own default applies)."""
    configured = (coord_settings().redlock or {}).get("NODE_TIMEOUT")
    if configured is None or not isinstance(timeout, (int, float)):
        return {}
    return {"node_timeout": min(float(configured), timeout / 4.0)}


def redlock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    masters: Any = None,
    **kwargs: Any,
) -> SignallingRedlock:
    """A :class:`~django_redis_coord.Redlock` named ``KEY_PREFIX:name`` over ``REDLOCK["MASTERS"]``.

    ``timeout`` defaults to ``DEFAULT_TIMEOUT`` (which must not be None: a Redlock always expires)
    and ``auto_renew`` to ``AUTO_RENEW``; other keywords go to the Redlock (``blocking_timeout``,
    ``node_timeout``, ``label``, ``on_lost``, ...).  Raises ``ImproperlyConfigured`` when no masters
    are configured (unless ``masters`` is given).

    >>> from django_redis_coord import redlock                        # doctest: +SKIP
    >>> with redlock("ledger:close-month", timeout=30) as held:        # doctest: +SKIP
    ...     close_month(fence=held.fence)
    """
    timeout, auto_renew = _redlock_options(name, timeout, auto_renew)
    return SignallingRedlock(
        masters if masters is not None else get_redlock_masters(),
        coord_settings().prefixed(name),
        timeout=timeout,
        auto_renew=auto_renew,
        app_name=name,
        **{**redlock_node_timeout(timeout), **kwargs},
    )


def aredlock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    masters: Any = None,
    **kwargs: Any,
) -> AsyncSignallingRedlock:
    """The asyncio form of :func:`redlock` (call it inside a coroutine: the clients are per event loop)."""
    timeout, auto_renew = _redlock_options(name, timeout, auto_renew)
    return AsyncSignallingRedlock(
        masters if masters is not None else get_async_redlock_masters(),
        coord_settings().prefixed(name),
        timeout=timeout,
        auto_renew=auto_renew,
        app_name=name,
        **{**redlock_node_timeout(timeout), **kwargs},
    )


class SemaphoreSignals(Signals):
    """Sends the hold signals around a semaphore's acquire and release (sync and asyncio share it).

    Permits are tracked by token, so a permit taken with an ``identity`` can be released, with
    its signal, from any thread or task.
    """

    permit: Any

    def __init__(self, redis: Any, name: Name, *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self._acquired_at: dict[bytes, float] = {}
        self._lost_signalled: set[bytes] = set()
        #: Milliseconds until the earliest permit ends, from the latest refused acquire.
        self.refused_pttl: Optional[int] = None
        #: The limit stored in Redis (the one in force), from the latest refused acquire.
        self.refused_limit: Optional[int] = None

    def _note_refusal(self, grant: Any) -> Any:
        if not grant.acquired:
            self.refused_pttl = grant.pttl
            self.refused_limit = grant.limit
        return grant

    @property
    def retry_after(self) -> Optional[int]:
        """After a refused acquire: the typical recent hold of a permit, at most the seconds until
        the earliest permit ends (rounded up), else None."""
        return hold_times.retry_after(self.name, retry_after_seconds(self.refused_pttl))

    def _acquired(self, identity: Any, started: float) -> Optional[dict[str, Any]]:
        """Records the start of the permit just taken; the lock_acquired arguments, or ``None``
        when that signal has no receivers."""
        permit = self.permit(identity)
        now = time.monotonic()
        self._acquired_at[permit.token] = now
        self._lost_signalled.discard(permit.token)
        if not lock_acquired.receivers:
            return None
        return {"fence": permit.fence, "wait_time": now - started, **self._signal_args()}

    def _before_release(self, identity: Any) -> tuple[Any, Optional[dict[str, Any]]]:
        """The permit about to be released and the arguments of its closing signal (``None`` when
        neither lock_released nor lock_lost has a receiver)."""
        permit = self.permit(identity)
        if permit is None:
            return None, {}
        since = self._acquired_at.pop(permit.token, None)
        if since is not None and not permit.lost:
            hold_times.record(self.name, time.monotonic() - since)
        if not (lock_released.receivers or lock_lost.receivers):
            return permit, None
        held = None if since is None else time.monotonic() - since
        return permit, {"fence": permit.fence, "held_time": held, **self._signal_args()}

    def _first_loss(self, permit: Any) -> bool:
        return permit is not None and first_of(self._lost_signalled, permit.token)

    def _watchdog_loss(self, permit: Any) -> Optional[dict[str, Any]]:
        """The lock_lost arguments when the watchdog gives up ``permit`` (once per permit)."""
        if permit.lost or not self._first_loss(permit):
            return None
        since = self._acquired_at.get(permit.token)
        held = None if since is None else time.monotonic() - since
        return {"fence": permit.fence, "held_time": held, **self._signal_args()}


def _semaphore_class() -> type:
    from .semaphores import Semaphore

    class SignallingSemaphore(SemaphoreSignals, Semaphore):  # type: ignore[misc, valid-type]
        """:class:`django_redis_coord.semaphores.Semaphore` sending the hold signals."""

        def _mark_lost(self, permit: Any) -> None:
            args = self._watchdog_loss(permit)
            if args is not None:
                send(lock_lost, self.signal_sender, **args)
            super()._mark_lost(permit)

        def do_acquire(self, *args: Any, **kwargs: Any) -> Any:
            return self._note_refusal(super().do_acquire(*args, **kwargs))

        def do_cancel(self, *args: Any, **kwargs: Any) -> Any:
            return self._note_refusal(super().do_cancel(*args, **kwargs))

        def acquire(self, identity: Any = None, blocking: Any = None, blocking_timeout: Any = None) -> bool:
            started = time.monotonic()
            acquired = super().acquire(identity, blocking, blocking_timeout)
            if acquired:
                args = self._acquired(identity, started)
                if args is not None:
                    send(lock_acquired, self.signal_sender, **args)
            elif lock_contended.receivers:
                send(lock_contended, self.signal_sender, wait_time=time.monotonic() - started,
                     retry_after=self.retry_after, **self._signal_args())
            return acquired

        def release(self, identity: Any = None) -> bool:
            permit, args = self._before_release(identity)
            released = super().release(identity)
            if released and permit is not None and not permit.lost:
                if args is not None:
                    send(lock_released, self.signal_sender, **args)
            elif self._first_loss(permit) and args is not None:
                send(lock_lost, self.signal_sender, **args)
            return released

    return SignallingSemaphore


def _async_semaphore_class() -> type:
    from .asyncio.semaphore import Semaphore  # type: ignore[import-not-found]

    class AsyncSignallingSemaphore(SemaphoreSignals, Semaphore):  # type: ignore[misc, valid-type]
        """The asyncio :class:`~django_redis_coord.asyncio.semaphore.Semaphore` sending the hold signals."""

        async def do_acquire(self, *args: Any, **kwargs: Any) -> Any:
            return self._note_refusal(await super().do_acquire(*args, **kwargs))

        async def do_cancel(self, *args: Any, **kwargs: Any) -> Any:
            return self._note_refusal(await super().do_cancel(*args, **kwargs))

        async def acquire(self, identity: Any = None, blocking: Any = None, blocking_timeout: Any = None) -> bool:
            started = time.monotonic()
            acquired = await super().acquire(identity, blocking, blocking_timeout)
            if acquired:
                args = self._acquired(identity, started)
                if args is not None:
                    try:
                        await asend(lock_acquired, self.signal_sender, **args)
                    except BaseException:  # cancelled while telling the receivers: nobody would release it
                        await run_to_completion(self._release_call(identity))
                        raise
            elif lock_contended.receivers:
                await asend(lock_contended, self.signal_sender, wait_time=time.monotonic() - started,
                            retry_after=self.retry_after, **self._signal_args())
            return acquired

        async def release(self, identity: Any = None) -> bool:
            permit, args = self._before_release(identity)
            released = await super().release(identity)
            if released and permit is not None and not permit.lost:
                if args is not None:
                    await asend(lock_released, self.signal_sender, **args)
            elif self._first_loss(permit) and args is not None:
                await asend(lock_lost, self.signal_sender, **args)
            return released

        def _mark_lost(self, permit: Any) -> None:
            args = self._watchdog_loss(permit)
            if args is not None:
                in_background(asend(lock_lost, self.signal_sender, **args))
            super()._mark_lost(permit)

    return AsyncSignallingSemaphore


_classes: dict[str, type] = {}


def semaphore_class(*, asyncio: bool = False) -> type:
    """The signalling semaphore class (sync or asyncio), built on first use."""
    key = "async" if asyncio else "sync"
    cls = _classes.get(key)
    if cls is None:
        cls = _classes[key] = _async_semaphore_class() if asyncio else _semaphore_class()
    return cls


def make_semaphore(name: Name, limit: int, timeout: Any = DEFAULT, *, asyncio: bool = False,
                   auto_renew: Optional[bool] = None, client: Any = None, **kwargs: Any) -> Any:
    """A signalling semaphore named ``KEY_PREFIX:name`` with ``limit`` permits (see :func:`semaphore`)."""
    timeout, auto_renew = _options(timeout, auto_renew)
    settings = coord_settings()
    if client is None:
        client = get_async_client() if asyncio else get_client()
    return semaphore_class(asyncio=asyncio)(
        client, settings.prefixed(name), limit, timeout, app_name=name, auto_renew=auto_renew, **kwargs
    )


def semaphore(name: Name, limit: int, timeout: Any = DEFAULT, **kwargs: Any) -> Any:
    """A :class:`~django_redis_coord.semaphores.Semaphore` of ``limit`` permits named ``KEY_PREFIX:name``.

    ``timeout`` (each permit's lease) defaults to ``DEFAULT_TIMEOUT`` and ``auto_renew`` to
    ``AUTO_RENEW``; other keywords go to the Semaphore (``blocking``, ``blocking_timeout``, ``label``,
    ``on_lost``, ...).  The limit is stored in Redis by the first acquire of the name; see
    :meth:`~django_redis_coord.semaphores.Semaphore.set_max_size` to change it.
    """
    return make_semaphore(name, limit, timeout, asyncio=False, **kwargs)


def asemaphore(name: Name, limit: int, timeout: Any = DEFAULT, **kwargs: Any) -> Any:
    """The asyncio form of :func:`semaphore` (call it inside a coroutine)."""
    return make_semaphore(name, limit, timeout, asyncio=True, **kwargs)
