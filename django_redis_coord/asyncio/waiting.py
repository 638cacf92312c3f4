"""Waiting in line without a connection per waiter (asyncio): the twin of
:mod:`django_redis_coord.waiting`, with one hub per event loop and connection pool (or cluster
client), read by a task of that loop, and waiters that are tasks."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Optional

from .._tasks import drop_closed_loops, in_background
from .._waiting_base import (
    IDLE_SECONDS,
    READ_SECONDS,
    HubBase,
    WaiterBase,
    check_pool,
    command_slots,
    hub_key,
    log_failure,
    retry_pause,
)

__all__ = ["AsyncWaitHub", "AsyncWaiter", "hub_for"]


class AsyncWaiter(WaiterBase):
    """One waiting task (see :class:`~django_redis_coord._waiting_base.WaiterBase`)."""

    __slots__ = ()

    async def wait(self, timeout: float) -> Optional[bytes]:
        """The next message (``RECHECK``: look again in Redis now), or ``None`` after ``timeout`` s."""
        if not self.messages and timeout > 0:
            try:
                await asyncio.wait_for(self.event.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        self.event.clear()
        return self.next_message()


class AsyncWaitHub(HubBase):
    """The waiting connection of one event loop for one connection pool (or cluster client)."""

    def __init__(self) -> None:
        super().__init__()
        self._gate: Optional[asyncio.Semaphore] = None
        self._task: Optional[asyncio.Future] = None
        #: Set while the channel is subscribed.
        self._ready = asyncio.Event()

    async def register(self, client: Any, ready_within: float) -> AsyncWaiter:
        """A new waiter; starts the hub's task (on ``client``'s pool) if it is not running, and
        waits up to ``ready_within`` seconds for the subscription (see the sync twin)."""
        check_pool(client)
        if self._gate is None:
            self._gate = asyncio.Semaphore(command_slots(client))
        waiter = AsyncWaiter(self._next_number(), self.channel, self._gate, asyncio.Event())
        self._add(waiter)
        if self._task is None:
            self._ready.clear()
            self._task = in_background(self._run(client))
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), ready_within)
            except asyncio.TimeoutError:
                pass
            except BaseException:
                self.unregister(waiter)
                raise
        return waiter

    async def _run(self, client: Any) -> None:
        pubsub = None
        failures = 0
        self._subscribed = False
        idle_since: Optional[float] = None
        loop = asyncio.get_running_loop()
        try:
            while True:
                if self._waiters:
                    idle_since = None
                elif idle_since is None:
                    idle_since = loop.time()
                elif loop.time() - idle_since >= IDLE_SECONDS:
                    self._task = None
                    self._ready.clear()
                    return
                try:
                    if pubsub is None:
                        pubsub = client.pubsub()
                        await pubsub.subscribe(self.channel)
                    message = await pubsub.get_message(timeout=READ_SECONDS)
                except Exception as exc:  # the connection dropped, a failover, the pool ran dry
                    self._ready.clear()
                    await _close(pubsub)
                    pubsub = None
                    if not self._waiters:
                        self._task = None
                        return  # nobody waits: nothing to reconnect for
                    failures += 1
                    log_failure(failures, exc)
                    self._recheck_all()  # a grant may have been announced while nobody listened
                    await asyncio.sleep(retry_pause(failures))
                    continue
                if self._handle(message):
                    failures = 0
                    self._ready.set()
        finally:
            if self._task is not None and self._task is asyncio.current_task():
                self._task = None
            await _close(pubsub)


async def _close(pubsub: Any) -> None:
    if pubsub is not None:
        try:
            await pubsub.aclose()
        except Exception:  # a connection already gone
            pass


#: The hubs of each event loop, by pool (or cluster client).
_hubs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def hub_for(client: Any) -> AsyncWaitHub:
    """The hub of the running event loop for ``client`` (shared by every client on the same pool)."""
    loop = asyncio.get_running_loop()
    by_key = _hubs.get(loop)
    if by_key is None:
        drop_closed_loops(_hubs)
        by_key = _hubs[loop] = weakref.WeakKeyDictionary()
    key = hub_key(client)
    hub = by_key.get(key)
    if hub is None:
        hub = by_key[key] = AsyncWaitHub()
    return hub
