"""Background work of the asyncio primitives: kept referenced until it ends, errors logged.

A task that nothing references may be garbage-collected before it finishes, so every task the
primitives start on their own goes through :func:`in_background`.  :func:`run_to_completion`
protects calls that must not stop half-way (a release that may already be on its way to Redis):
cancelling the caller cancels the wait, not the call.  :func:`drop_closed_loops` lets go of what
was kept per event loop once that loop has been closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, MutableMapping
from typing import Any, TypeVar

logger = logging.getLogger("django_redis_coord")

T = TypeVar("T")

#: Tasks started by the primitives that have not ended yet.
_running: set[asyncio.Future] = set()


def _ended(task: asyncio.Future) -> None:
    _running.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("A background call of django_redis_coord failed", exc_info=task.exception())


def _keep(task: asyncio.Future) -> asyncio.Future:
    """Keep ``task`` referenced until it ends, and log its error, if any."""
    _running.add(task)
    task.add_done_callback(_ended)
    return task


def in_background(awaitable: Awaitable[Any]) -> asyncio.Future:
    """Run ``awaitable`` as a task kept referenced until it ends; its error, if any, is logged."""
    return _keep(asyncio.ensure_future(awaitable))


async def run_to_completion(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even when the caller is cancelled meanwhile.

    The caller still gets its ``CancelledError`` at once; the call goes on in the background (its
    error, if any, is logged).  For calls that must not stop half-way: a release whose script may
    already have reached Redis, or the give-back of a grant that may have been made.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            _keep(task)
        raise


def drop_closed_loops(by_loop: MutableMapping[Any, Any]) -> None:
    """Remove the entries of event loops that have been closed from ``by_loop`` (a weak mapping
    keyed by loop).  What is kept for a loop (clients, connections) refers back to the loop, so its
    weak key alone would never let either go; once dropped, both are garbage."""
    for loop in [loop for loop in list(by_loop.keys()) if loop.is_closed()]:
        del by_loop[loop]
