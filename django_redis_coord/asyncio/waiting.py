"""Waiting in line without a connection per waiter (asyncio): the twin of
:mod:`django_redis_coord.waiting`, with one hub per event loop and connection pool (or cluster
client), read by a task of that loop, and waiters that are tasks."""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections import deque
from typing import Any, Optional

from .._tasks import drop_closed_loops, in_background
from .._waiting_base import (
    IDLE_SECONDS,
    READ_SECONDS,
    RECHECK,
    check_pool,
    command_slots,
    hub_key,
    log_failure,
    new_channel,
    parse_message,
    retry_pause,
)

__all__ = ["AsyncWaitHub", "AsyncWaiter", "hub_for"]


class AsyncWaiter:
    """One waiting task: the messages its hub handed it, and an event to sleep on; ``reply_to``
    and ``gate`` as for :class:`django_redis_coord.waiting.Waiter`."""

    __slots__ = ("id", "event", "messages", "reply_to", "gate")

    def __init__(self, number: int, channel: bytes, gate: asyncio.Semaphore) -> None:
        self.id = number
        self.event = asyncio.Event()
        self.messages: deque = deque()
        self.reply_to = (channel, number)
        self.gate = gate

    def deliver(self, message: bytes) -> None:
        self.messages.append(message)
        self.event.set()

    async def wait(self, timeout: float) -> Optional[bytes]:
        """The next message (``RECHECK``: look again in Redis now), or ``None`` after ``timeout`` s."""
        if not self.messages and timeout > 0:
            try:
                await asyncio.wait_for(self.event.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        self.event.clear()
        try:
            return self.messages.popleft()
        except IndexError:
            return None


class AsyncWaitHub:
    """The waiting connection of one event loop for one connection pool (or cluster client)."""

    def __init__(self) -> None:
        self.channel = new_channel()
        self._waiters: dict[int, AsyncWaiter] = {}
        self._numbers = itertools.count(1)
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
        waiter = AsyncWaiter(next(self._numbers), self.channel, self._gate)
        self._waiters[waiter.id] = waiter
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

    def unregister(self, waiter: AsyncWaiter) -> None:
        self._waiters.pop(waiter.id, None)

    def _recheck_all(self) -> None:
        for waiter in list(self._waiters.values()):
            waiter.deliver(RECHECK)

    def _dispatch(self, data: Any) -> None:
        parsed = parse_message(data)
        if parsed is not None:
            waiter = self._waiters.get(parsed[0])
            if waiter is not None:
                waiter.deliver(parsed[1])

    async def _run(self, client: Any) -> None:
        pubsub = None
        failures = 0
        subscribed_before = False
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
                    failures += 1
                    log_failure(failures, exc)
                    self._recheck_all()  # a grant may have been announced while nobody listened
                    await asyncio.sleep(retry_pause(failures))
                    continue
                if message is None:
                    continue
                if message["type"] == "message":
                    self._dispatch(message["data"])
                elif message["type"] == "subscribe":
                    failures = 0
                    self._ready.set()
                    if subscribed_before:
                        self._recheck_all()
                    subscribed_before = True
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
