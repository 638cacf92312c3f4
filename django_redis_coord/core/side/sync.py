"""The thread side: what a thread uses where an asyncio task uses :mod:`django_redis_coord.core.side.aio`
(same names, same signatures; each name's line says what it is)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, Optional, TypeVar

from .. import watchdog as _watchdog
from ..holds import Hold

T = TypeVar("T")


def after_loss(result: Any) -> None:
    """What becomes of the value ``on_lost`` returned: nothing (a thread's callback has run)."""


def cancels_pending() -> int:
    """How many cancellations of the current worker are pending: a thread is never cancelled."""
    return 0


#: A loss the watchdog finds is told in the thread that finds it.
LOSS_TOLD_IN_BACKGROUND = False


class PerWorker(threading.local, Generic[T]):
    """A value of each thread, made by ``factory`` on first use."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self.value = factory()

    def get(self) -> T:
        return self.value


def raise_swallowed_cancel(before: int) -> None:
    """Nothing: a thread has no cancellation to lose."""


def unwatch_worker_end(hold: Hold) -> None:
    """Nothing: the end of a thread is not watched."""


def watch_worker_end(primitive: Any, hold: Hold, token: bytes) -> None:
    """Nothing: a thread that ends holding leaves its hold to its TTL (a thread pool's threads live on)."""


def watchdog() -> Any:
    """The renewal loop of this side: the process's watchdog thread."""
    return _watchdog.sync_watchdog()


def worker_name() -> str:
    """Who is acquiring, for the holder metadata: the current thread's name."""
    return threading.current_thread().name


class WorkerHolds(threading.local):
    """The holds of a primitive, one per thread: ``hold`` is the current thread's
    (:class:`~django_redis_coord.core.holds.Hold`), ``token`` its token (redis-py's ``lock.local.token``)."""

    #: Each thread's hold is its own.
    per_worker = True

    def __init__(self) -> None:
        self.hold = Hold()

    @property
    def token(self) -> Optional[bytes]:
        return self.hold.token

    @token.setter
    def token(self, value: Optional[bytes]) -> None:
        self.hold.token = value
