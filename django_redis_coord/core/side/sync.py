"""The thread side: what a thread uses where an asyncio task uses :mod:`django_redis_coord.core.side.aio`
(same names, same signatures; each name's line says what it is)."""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Generic, Optional, TypeVar

from .. import watchdog as _watchdog
from ..holds import Hold

T = TypeVar("T")

#: An event a thread waits for (set from any thread).
Event = threading.Event

#: Whether a worker waiting in line can be interrupted where it waits: a thread cannot (it waits
#: in rounds and looks at its stop flag between them).
INTERRUPTIBLE = False

#: A loss the watchdog finds is told in the thread that finds it.
LOSS_TOLD_IN_BACKGROUND = False

#: A counting semaphore of threads (bounded: a release without an acquire raises).
Semaphore = threading.BoundedSemaphore


def alive(worker: threading.Thread) -> bool:
    """Whether the thread ``worker`` has not ended yet."""
    return worker.is_alive()


def at_exit(function: Callable[[], Any]) -> None:
    """Run ``function()`` at interpreter exit."""
    atexit.register(function)


def call(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``."""
    return function(*args)


def cancels_pending() -> int:
    """How many cancellations of the current worker are pending: a thread is never cancelled."""
    return 0


def current_worker() -> threading.Thread:
    """The thread running this code."""
    return threading.current_thread()


def drop_ended_scopes(by_scope: MutableMapping[Any, Any]) -> None:
    """Nothing to remove: a process's scope ends with it (a forked child's is a new one)."""


def follow_up(result: Any) -> None:
    """Nothing: what a callback returned is its result (the call already ran)."""


def interrupt(worker: threading.Thread) -> None:
    """Nothing: a thread cannot be stopped where it waits (it looks at its stop flag between rounds)."""


def join(worker: threading.Thread, timeout: Optional[float]) -> None:
    """Wait until the thread ``worker`` ended, for at most ``timeout`` seconds."""
    worker.join(timeout)


def node_client(client: Any, key: bytes) -> Any:
    """The client of the one server that serves ``key``: ``client`` itself, or a cluster client's node."""
    if getattr(client, "connection_pool", None) is not None:
        return client
    return client.get_redis_connection(client.get_node_from_key(key))  # redis.cluster.RedisCluster


class PerWorker(threading.local, Generic[T]):
    """A value of each thread, made by ``factory`` on first use."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self.value = factory()

    def get(self) -> T:
        return self.value


def raise_swallowed_cancel(before: int) -> None:
    """Nothing: a thread has no cancellation to lose."""


class _Process:
    """This process's scope (a forked child, which has none of its parent's threads, gets a new one)."""


_process = _Process()


def _forked() -> None:
    global _process
    _process = _Process()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def scope() -> Any:
    """What work is shared within: this process."""
    return _process


def sleep(seconds: float) -> None:
    """Sleep ``seconds`` (the thread's)."""
    time.sleep(seconds)


def start(function: Callable[[], Any], name: str) -> threading.Thread:
    """Run ``function()`` in the background, on a daemon thread called ``name``."""
    thread = threading.Thread(target=function, name=name, daemon=True)
    thread.start()
    return thread


def unwatch_worker_end(hold: Hold) -> None:
    """Nothing: the end of a thread is not watched."""


def wait_event(event: threading.Event, timeout: Optional[float]) -> bool:
    """Wait until ``event`` is set (True) or ``timeout`` seconds passed (False; ``None``: no limit)."""
    return event.wait(timeout)


def watch_worker_end(primitive: Any, hold: Hold, token: bytes) -> None:
    """Nothing: a thread that ends holding leaves its hold to its TTL (a thread pool's threads live on)."""


def watchdog() -> Any:
    """The renewal loop of this side: the process's watchdog thread."""
    return _watchdog.sync_watchdog()


def worker_name() -> str:
    """The name of the thread running this code."""
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
