"""Waiting in line without a connection per waiter (asyncio): the twin of
:mod:`django_redis_coord.core.waiting.sync`, with one hub per event loop and connection pool (or cluster
client), whose connection is read by one of its waiting tasks at a time, and waiters that are
tasks."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from typing import Any, Optional

from ..concurrency import drop_closed_loops, in_background
from .rules import IDLE_SECONDS, READ_FAILURES, READ_SECONDS, HubBase, WaiterBase, check_pool, command_slots, hub_key

__all__ = ["AsyncWaitHub", "AsyncWaiter", "hub_for"]


class AsyncWaiter(WaiterBase):
    """One waiting task (see :class:`~django_redis_coord.core.waiting.rules.WaiterBase`)."""

    __slots__ = ("hub",)

    def __init__(self, number: int, hub: AsyncWaitHub, gate: Any) -> None:
        super().__init__(number, hub.channel, gate, asyncio.Event())
        self.hub = hub

    async def wait(self, timeout: float) -> Optional[bytes]:
        """The next message (``RECHECK``: look again in Redis now), or ``None`` after ``timeout`` s;
        reads the hub's connection itself while nobody else does (see the sync twin)."""
        await self.hub.take_turn(self, self.messages.__len__, time.monotonic() + timeout)
        return self.next_message()


class AsyncWaitHub(HubBase):
    """The waiting connection of one event loop for one connection pool (or cluster client)."""

    def __init__(self) -> None:
        super().__init__()
        self._gate: Optional[asyncio.Semaphore] = None
        self._reading = asyncio.Lock()
        self._pubsub: Any = None
        self._ready = asyncio.Event()
        #: The task that gives the connection back once nobody waited for :data:`IDLE_SECONDS`.
        self._closer: Optional[asyncio.Future] = None

    async def register(self, client: Any, ready_within: float) -> AsyncWaiter:
        """A new waiter; subscribes the hub's connection (on ``client``'s pool) if it is not, and
        waits up to ``ready_within`` seconds for the subscription (see the sync twin)."""
        check_pool(client)
        waiter = AsyncWaiter(self._next_number(), self, self.gate_for(client))
        self._add(waiter)
        self._client = client
        if not self._ready.is_set():
            try:
                await self.take_turn(waiter, self._ready.is_set, time.monotonic() + ready_within)
            except BaseException:
                self.unregister(waiter)
                raise
        return waiter

    def gate_for(self, client: Any) -> asyncio.Semaphore:
        """The gate of this hub's calls, made on first use (see the sync twin)."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(command_slots(client))
        return self._gate

    async def take_turn(self, waiter: AsyncWaiter, done: Callable[[], Any], deadline: float) -> None:
        """Until ``done()`` or ``deadline``: read the channel while nobody else does, else sleep
        until woken (see the sync twin)."""
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if not self._reading.locked():
                await self._reading.acquire()  # free: taken at once
                try:
                    while not done() and (left := deadline - time.monotonic()) > 0:
                        await self.read(left)
                finally:
                    self._reading.release()
                    self.pass_reading(waiter)
                return
            try:
                await asyncio.wait_for(waiter.event.wait(), left)
            except asyncio.TimeoutError:
                return
            waiter.event.clear()  # a message, or the reading handed over: look again

    async def read(self, timeout: float) -> None:
        """One read of the channel (by the task holding ``_reading``); see the sync twin."""
        try:
            if self._pubsub is None:
                pause = self._retry_at - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(min(pause, timeout))
                    return
                await self._open()
            message = await self._pubsub.get_message(timeout=min(timeout, READ_SECONDS))
        except READ_FAILURES as exc:  # the connection dropped, a failover, the pool ran dry
            pubsub, self._pubsub = self._pubsub, None
            await _close(pubsub)
            self._failed(exc)
            return
        self._took(message)

    async def _open(self) -> None:
        # An asyncio cluster client learns its slots on its first command, but its pub/sub routes
        # SUBSCRIBE through the slot table without asking (redis-py 8.1 raises KeyError on a
        # client that ran nothing yet).  initialize() does nothing once done, nor for a plain client.
        await self._client.initialize()
        pubsub = self._client.pubsub()
        try:
            await pubsub.subscribe(self.channel)
        except BaseException:  # cancelled too: a half-made subscription is not kept
            in_background(_close(pubsub))
            raise
        self._pubsub = pubsub
        if self._closer is None:
            self._closer = in_background(self._close_when_idle())

    async def _close_when_idle(self) -> None:
        """Give the connection back once nobody waited for :data:`IDLE_SECONDS` (see the sync twin),
        or when the loop shuts down (this task is cancelled)."""
        try:
            while True:
                idle_for = time.monotonic() - self._idle_since if self._idle_since is not None else 0.0
                if idle_for < IDLE_SECONDS:
                    await asyncio.sleep(IDLE_SECONDS - idle_for)
                elif self._reading.locked():
                    await asyncio.sleep(READ_SECONDS)
                elif not self._waiters and self._idle_since is not None:
                    return
        finally:
            self._ready.clear()
            self._subscribed = False
            self._closer = None
            pubsub, self._pubsub = self._pubsub, None
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
