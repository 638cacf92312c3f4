# Generated from django_redis_coord/core/waiting/aio.py by `python3 dev.py twins`: edit that file, not this one.
"""Waiting in line without a connection per waiter.

Every blocking acquire that has to wait registers with the :class:`WaitHub` of its client's
connection pool (one per pool, or per cluster client; in asyncio, one per event loop too): the hub
holds one subscribed connection, on a channel of its own.  The scripts that grant a lock or a
permit to a queued waiter publish the grant to that waiter's channel (the queue entry records
channel and waiter number), so a process with any number of waiting threads or tasks uses one
waiting connection per Redis server, and each waiter is woken alone, in FIFO order.  The
connection is read by one of the waiters at a time, the reader: it takes its own grant from its
own read, with no switch, and hands every other message to the waiter it names; when it leaves,
it wakes another waiter to read on.  A waiter uses the pool only for its own commands (the
queueing call, its refresh every ``refresh_interval``, the cancel), never while it waits.

A message is only a wake-up.  The grant is written before it is announced, so a lost message (the
connection dropped, a failover) costs at most one refresh period: the waiter's refresh finds that
it holds the lock.  When the reader notices that the connection came back, it makes every waiter
look again at once.  The sync module (threads) is generated from the asyncio one (tasks): what
differs between a thread and a task is in :mod:`django_redis_coord.core.side`.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Optional

from ..side.sync import Event, Semaphore, drop_ended_scopes, scope, sleep, start, wait_event
from .rules import IDLE_SECONDS, READ_FAILURES, READ_SECONDS, HubBase, WaiterBase, check_pool, command_slots, hub_key

__all__ = ["WaitHub", "Waiter", "hub_for"]


class Waiter(WaiterBase):
    """One waiter (see :class:`~django_redis_coord.core.waiting.rules.WaiterBase`)."""

    __slots__ = ("hub",)

    def __init__(self, number: int, hub: WaitHub, gate: Any) -> None:
        super().__init__(number, hub.channel, gate, Event())
        self.hub = hub

    def wait(self, timeout: float) -> Optional[bytes]:
        """The next message (``RECHECK``: look again in Redis now), or ``None`` after ``timeout`` s;
        reads the hub's connection itself while nobody else does (see :meth:`WaitHub.take_turn`)."""
        self.hub.take_turn(self, self.messages.__len__, time.monotonic() + timeout)
        return self.next_message()


class WaitHub(HubBase):
    """The waiting connection of one process (in asyncio: one event loop) for one connection pool
    (or cluster client)."""

    def __init__(self) -> None:
        super().__init__()
        self._gate: Optional[Semaphore] = None
        #: Held by the reader (taken without waiting, by one waiter of the hub at a time).
        self._reading = threading.Lock()
        self._pubsub: Any = None
        self._ready = Event()
        #: The worker that gives the connection back once nobody waited for :data:`IDLE_SECONDS`.
        self._closer: Any = None

    def register(self, client: Any, ready_within: float) -> Waiter:
        """A new waiter.  Subscribes the hub's connection (on ``client``'s pool) if it is not, and
        waits up to ``ready_within`` seconds for the subscription, so that the first grant is not
        missed (it would be found at the first refresh)."""
        check_pool(client)
        waiter = Waiter(self._next_number(), self, self.gate_for(client))
        self._add(waiter)
        self._client = client
        if not self._ready.is_set():
            try:
                self.take_turn(waiter, self._ready.is_set, time.monotonic() + ready_within)
            except BaseException:  # interrupted (cancelled, a signal handler's exception): not kept
                self.unregister(waiter)
                raise
        return waiter

    def gate_for(self, client: Any) -> Semaphore:
        """The gate every call of this hub's waiters goes through (see
        :attr:`~django_redis_coord.core.waiting.rules.WaiterBase.gate`), made on first use: the first
        try of a blocking acquire, made before it registers, goes through it too."""
        gate = self._gate
        if gate is None:
            with self._lock:
                if self._gate is None:
                    self._gate = Semaphore(command_slots(client))
                gate = self._gate
        return gate

    def take_turn(self, waiter: Waiter, done: Callable[[], Any], deadline: float) -> None:
        """Until ``done()`` or ``deadline``: read the channel while nobody else does (handing the
        reading over when stopping), else sleep until woken (a message for ``waiter``, or the
        reading handed over to it)."""
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._reading.acquire(blocking=False):
                try:
                    while not done() and (left := deadline - time.monotonic()) > 0:
                        self.read(left)
                finally:
                    self._reading.release()
                    self.pass_reading(waiter)
                return
            if wait_event(waiter.event, left):
                waiter.event.clear()  # a message, or the reading handed over: look again

    def read(self, timeout: float) -> None:
        """One read of the channel (by the waiter holding ``_reading``), for up to ``timeout`` s:
        subscribes first if needed, hands what it read over, and handles a lost connection."""
        try:
            if self._pubsub is None:
                pause = self._retry_at - time.monotonic()
                if pause > 0:
                    sleep(min(pause, timeout))
                    return
                self._open()
            message = self._pubsub.get_message(timeout=min(timeout, READ_SECONDS))
        except READ_FAILURES as exc:  # the connection dropped, a failover, the pool ran dry
            pubsub, self._pubsub = self._pubsub, None
            _close(pubsub)
            self._failed(exc)
            return
        self._took(message)

    def _open(self) -> None:
        # An asyncio cluster client learns its slots on its first command, but its pub/sub routes
        # SUBSCRIBE through the slot table without asking (redis-py 8.1 raises KeyError on a
        # client that ran nothing yet).  initialize() does nothing once done, nor for a plain client.
        pubsub = self._client.pubsub()
        try:
            pubsub.subscribe(self.channel)
        except BaseException:  # cancelled too: a half-made subscription is not kept
            _close(pubsub)
            raise
        self._pubsub = pubsub
        with self._lock:
            if self._closer is None:
                self._closer = start(self._close_when_idle, "django_redis_coord waiting")

    def _close_when_idle(self) -> None:
        """Give the connection back once nobody waited for :data:`IDLE_SECONDS` (a new waiter opens
        a new one), or when the event loop shuts down (in asyncio: this task is cancelled)."""
        pubsub: Any = None
        closed = False
        try:
            while not closed:
                with self._lock:
                    idle_for = time.monotonic() - self._idle_since if self._idle_since is not None else 0.0
                if idle_for < IDLE_SECONDS:
                    sleep(IDLE_SECONDS - idle_for)
                    continue
                if not self._reading.acquire(blocking=False):
                    sleep(READ_SECONDS)
                    continue
                try:
                    with self._lock:
                        if not self._waiters and self._idle_since is not None:
                            pubsub, closed = self._let_go(), True
                finally:
                    self._reading.release()
                    self.pass_reading(None)  # a waiter that found the reading taken meanwhile sleeps
        finally:
            if not closed:  # cancelled
                with self._lock:
                    pubsub = self._let_go()
            _close(pubsub)

    def _let_go(self) -> Any:
        """Forget the connection (under ``_lock``): the next waiter subscribes anew; returns it."""
        self._ready.clear()
        self._subscribed = False
        self._closer = None
        pubsub, self._pubsub = self._pubsub, None
        return pubsub


def _close(pubsub: Any) -> None:
    if pubsub is not None:
        try:
            pubsub.close()
        except Exception:  # a connection already gone
            pass


#: The hubs of each scope (the process; in asyncio, each event loop), by pool (or cluster client).
_hubs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_hubs_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads nor connections: its hubs start afresh."""
    global _hubs_lock
    _hubs_lock = threading.Lock()
    _hubs.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def hub_for(client: Any) -> WaitHub:
    """The hub of this scope for ``client`` (shared by every client on the same pool)."""
    key = hub_key(client)
    by_key = _hubs.get(scope())
    hub = by_key.get(key) if by_key is not None else None
    if hub is None:
        with _hubs_lock:
            where = scope()
            by_key = _hubs.get(where)
            if by_key is None:
                drop_ended_scopes(_hubs)
                by_key = _hubs[where] = weakref.WeakKeyDictionary()
            hub = by_key.get(key)
            if hub is None:
                hub = by_key[key] = WaitHub()
    return hub
