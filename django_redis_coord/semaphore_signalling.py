"""The Django signals of a semaphore's permits (sync and asyncio): see
:mod:`django_redis_coord.signalling` for locks and Redlocks."""

from __future__ import annotations

import time
from typing import Any, Optional

from . import hold_times
from ._base import first_of
from ._tasks import in_background, run_to_completion
from .signalling import Name, Signals, retry_after_seconds
from .signals import asend, lock_acquired, lock_contended, lock_lost, lock_released, send

__all__ = ["SemaphoreSignals", "semaphore_class"]


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


