"""The asyncio side: what a task uses where a thread uses :mod:`django_redis_coord.core.side.sync`
(same names, same signatures; each name's line says what it is)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Optional

from ..concurrency import drop_closed_loops, in_background

#: An event a task waits for (set from the same event loop).
Event = asyncio.Event

#: Whether a worker waiting in line can be interrupted where it waits: a task can (it is cancelled).
INTERRUPTIBLE = True

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


def scope() -> Any:
    """What work is shared within: the running event loop."""
    return asyncio.get_running_loop()


async def sleep(seconds: float) -> None:
    """Sleep ``seconds`` (the task's; the event loop runs others meanwhile)."""
    await asyncio.sleep(seconds)


def start(function: Callable[[], Awaitable[Any]], name: str) -> asyncio.Future[Any]:
    """Run ``function()`` in the background, as a task kept referenced until it ends (its error logged)."""
    return in_background(function())


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


def worker_name() -> str:
    """The name of the task running this code (``asyncio`` outside a task)."""
    task = asyncio.current_task()
    return task.get_name() if task is not None else "asyncio"
