"""The asyncio side: what a task uses where a thread uses :mod:`django_redis_coord.core.side.sync`
(same names, same signatures; each name's line says what it is)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Generic, Optional, TypeVar

from .. import watchdog as _watchdog
from ..concurrency import drop_closed_loops, in_background
from ..holds import Hold

logger = logging.getLogger("django_redis_coord")

T = TypeVar("T")

#: An event a task waits for (set from the same event loop).
Event = asyncio.Event

#: Whether a worker waiting in line can be interrupted where it waits: a task can (it is cancelled).
INTERRUPTIBLE = True

#: A loss the watchdog finds is told in the background (a task), not in the caller.
LOSS_TOLD_IN_BACKGROUND = True

#: A counting semaphore of tasks.
Semaphore = asyncio.Semaphore


def alive(worker: asyncio.Future[Any]) -> bool:
    """Whether the task ``worker`` has not ended yet."""
    return not worker.done()


def at_exit(function: Callable[[], Awaitable[Any]]) -> None:
    """Nothing: an event loop cancels its tasks when it ends, and their own clean-up runs then."""


async def call(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``, its result awaited when it is awaitable (a coroutine function's)."""
    result = function(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def cancels_pending() -> int:
    """How many cancellations of the current task are pending (``Task.cancelling()``, Python 3.11+; 0 before)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def current_worker() -> Optional[asyncio.Future[Any]]:
    """The task running this code."""
    return asyncio.current_task()


def drop_ended_scopes(by_scope: MutableMapping[Any, Any]) -> None:
    """Remove what ``by_scope`` keeps for event loops that have been closed."""
    drop_closed_loops(by_scope)


def follow_up(result: Any) -> None:
    """What a callback returned: a coroutine (a coroutine function's) runs as a task of its own."""
    if asyncio.iscoroutine(result):
        in_background(result)


def interrupt(worker: asyncio.Future[Any]) -> None:
    """Stop ``worker`` where it waits: the task is cancelled."""
    worker.cancel()


async def join(worker: asyncio.Future[Any], timeout: Optional[float]) -> None:
    """Wait until the task ``worker`` ended, for at most ``timeout`` seconds."""
    await asyncio.wait({worker}, timeout=timeout)


def node_client(client: Any, key: bytes) -> Any:
    """The client of the one server that serves ``key``: ``client`` itself, or ``None`` for an
    asyncio cluster client (its pipelines cannot reach the server of one key)."""
    return client if getattr(client, "connection_pool", None) is not None else None


class PerWorker(Generic[T]):
    """A value of each asyncio task (one for the thread outside a running task), made by ``factory`` on first use."""

    __slots__ = ("_factory", "_by_task", "_outside")

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._by_task: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._outside: Optional[T] = None

    def get(self) -> T:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is None:
            if self._outside is None:
                self._outside = self._factory()
            return self._outside
        value = self._by_task.get(task)
        if value is None:
            value = self._by_task[task] = self._factory()
        return value


def raise_swallowed_cancel(before: int) -> None:
    """Raise the ``CancelledError`` of a cancellation requested since ``before`` (see
    :func:`cancels_pending`) that nothing raised: Python 3.11's ``asyncio.wait_for``, which redis-py
    sends and reads through, swallows one that comes as its call completes.  The task still counts it."""
    if cancels_pending() > before:
        raise asyncio.CancelledError


def scope() -> Any:
    """What work is shared within: the running event loop."""
    return asyncio.get_running_loop()


async def sleep(seconds: float) -> None:
    """Sleep ``seconds`` (the task's; the event loop runs others meanwhile)."""
    await asyncio.sleep(seconds)


def start(function: Callable[[], Awaitable[Any]], name: str) -> asyncio.Future[Any]:
    """Run ``function()`` in the background, as a task kept referenced until it ends (its error logged)."""
    return in_background(function())


def unwatch_worker_end(hold: Hold) -> None:
    """Undo :func:`watch_worker_end` for ``hold`` (at its release: a long-lived task acquires many times)."""
    task_end = hold.task_end
    if task_end is not None:
        hold.task_end = None
        task_end[0].remove_done_callback(task_end[1])


async def wait_event(event: asyncio.Event, timeout: Optional[float]) -> bool:
    """Wait until ``event`` is set (True) or ``timeout`` seconds passed (False; ``None``: no limit)."""
    if event.is_set():
        return True
    # asyncio.wait, not wait_for: wait_for can swallow a cancellation (Python 3.10/3.11).
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()


def watch_worker_end(primitive: Any, hold: Hold, token: bytes) -> None:
    """Watch the end of the task that took ``hold`` (a hold of that task only: nobody else can
    release it): when the task ends still holding it, say so and stop renewing it, so that its TTL ends it."""
    task = asyncio.current_task()
    if task is not None:
        callback = functools.partial(_ended_holding, weakref.ref(primitive), hold, token)
        task.add_done_callback(callback)
        hold.task_end = (task, callback)


def _ended_holding(primitive_ref: Any, hold: Hold, token: bytes, task: asyncio.Future) -> None:
    if hold.token != token:
        return
    primitive = primitive_ref()
    if primitive is None:
        return
    renewed = hold.watched
    if renewed:
        watchdog().unregister(primitive, hold)
    logger.warning(
        "The task that acquired lock %r ended without releasing it: no other task can release it, so it "
        "ends with its TTL%s.  Release it in the task that acquired it (asyncio.wait_for() runs the "
        "acquire in a task of its own before Python 3.12), or pass thread_local=False.",
        primitive.name,
        " (its renewal was stopped)" if renewed else " (it has none: it stays held)" if primitive.timeout is None
        else "",
    )


def watchdog() -> Any:
    """The renewal loop of this side: a task of the running event loop."""
    return _watchdog.async_watchdog()


def worker_name() -> str:
    """The name of the task running this code (``asyncio`` outside a task)."""
    task = asyncio.current_task()
    return task.get_name() if task is not None else "asyncio"


class WorkerHolds:
    """The holds of a primitive, one per asyncio task: ``hold`` is the current task's
    (:class:`~django_redis_coord.core.holds.Hold`), ``token`` its token (redis-py's ``lock.local.token``)."""

    __slots__ = ("_holds",)
    #: Each task's hold is its own: the end of the task that took it is watched (:func:`watch_worker_end`).
    per_worker = True

    def __init__(self) -> None:
        self._holds: PerWorker[Hold] = PerWorker(Hold)

    @property
    def hold(self) -> Hold:
        return self._holds.get()

    @property
    def token(self) -> Optional[bytes]:
        return self._holds.get().token

    @token.setter
    def token(self, value: Optional[bytes]) -> None:
        self._holds.get().token = value
