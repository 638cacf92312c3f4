"""Waiting in line without a connection per waiter (sync).

Every blocking acquire of a process that has to wait registers with the process's :class:`WaitHub`
for its client's connection pool (one per pool, or per cluster client): the hub holds one
subscribed connection, on a channel of its own, and hands each message to the waiting thread it
names.  The scripts that grant a lock or a permit to a queued waiter publish the grant to that
waiter's channel (the queue entry records channel and waiter number), so a process with any number
of waiting threads uses one waiting connection per Redis server, and each thread is woken alone,
in FIFO order.  A waiter uses the pool only for its own commands (the queueing call, its refresh
every ``refresh_interval``, the cancel), never while it waits.

A message is only a wake-up.  The grant is written before it is announced, so a lost message (the
connection dropped, a failover) costs at most one refresh period: the waiter's refresh finds that
it holds the lock.  When the hub notices that its connection came back, it makes every waiter look
again at once.  The asyncio twin is :mod:`django_redis_coord.asyncio.waiting`.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Optional

from ._waiting_base import (
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

__all__ = ["WaitHub", "Waiter", "hub_for"]


class Waiter(WaiterBase):
    """One waiting thread (see :class:`~django_redis_coord._waiting_base.WaiterBase`)."""

    __slots__ = ()

    def wait(self, timeout: float) -> Optional[bytes]:
        """The next message (``RECHECK``: look again in Redis now), or ``None`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self.messages:
            left = deadline - time.monotonic()
            if left <= 0 or not self.event.wait(left):
                break
            self.event.clear()
        return self.next_message()


class WaitHub(HubBase):
    """The waiting connection of one process for one connection pool (or cluster client)."""

    def __init__(self) -> None:
        super().__init__()
        self._gate: Optional[threading.BoundedSemaphore] = None
        self._thread: Optional[threading.Thread] = None
        #: Set while the channel is subscribed.
        self._ready = threading.Event()

    def register(self, client: Any, ready_within: float) -> Waiter:
        """A new waiter; starts the hub's thread (on ``client``'s pool) if it is not running.  Waits
        up to ``ready_within`` seconds for the subscription, so that the first grant is not missed
        (it would be found at the first refresh)."""
        check_pool(client)
        with self._lock:
            if self._gate is None:
                self._gate = threading.BoundedSemaphore(command_slots(client))
            waiter = Waiter(self._next_number(), self.channel, self._gate, threading.Event())
            self._waiters[waiter.id] = waiter
            if self._thread is None:
                self._ready.clear()
                self._thread = threading.Thread(target=self._run, args=(client,), name="django_redis_coord waiting",
                                                daemon=True)
                self._thread.start()
        self._ready.wait(ready_within)
        return waiter

    def _idle_out(self, idle_since: Optional[float]) -> tuple[bool, Optional[float]]:
        """Whether the thread stops now (nobody waited for :data:`IDLE_SECONDS`), and since when idle."""
        with self._lock:
            if self._waiters:
                return False, None
            now = time.monotonic()
            if idle_since is None:
                return False, now
            if now - idle_since < IDLE_SECONDS:
                return False, idle_since
            self._thread = None
            self._ready.clear()
            return True, idle_since

    def _stop_if_idle(self) -> bool:
        """Stop the thread (True) if nobody waits; the next waiter starts a new one."""
        with self._lock:
            if self._waiters:
                return False
            self._thread = None
            self._ready.clear()
            return True

    def _run(self, client: Any) -> None:
        pubsub = None
        failures = 0
        self._subscribed = False
        idle_since: Optional[float] = None
        try:
            while True:
                stop, idle_since = self._idle_out(idle_since)
                if stop:
                    return
                try:
                    if pubsub is None:
                        pubsub = client.pubsub()
                        pubsub.subscribe(self.channel)
                    message = pubsub.get_message(timeout=READ_SECONDS)
                except Exception as exc:  # the connection dropped, a failover, the pool ran dry
                    self._ready.clear()
                    _close(pubsub)
                    pubsub = None
                    if self._stop_if_idle():
                        return  # nobody waits: nothing to reconnect for
                    failures += 1
                    log_failure(failures, exc)
                    self._recheck_all()  # a grant may have been announced while nobody listened
                    time.sleep(retry_pause(failures))
                    continue
                if self._handle(message):
                    failures = 0
                    self._ready.set()
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
            _close(pubsub)


def _close(pubsub: Any) -> None:
    if pubsub is not None:
        try:
            pubsub.close()
        except Exception:  # a connection already gone
            pass


_hubs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_hubs_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: its hubs start afresh."""
    global _hubs_lock
    _hubs_lock = threading.Lock()
    _hubs.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def hub_for(client: Any) -> WaitHub:
    """The hub of this process for ``client`` (shared by every client on the same pool)."""
    key = hub_key(client)
    hub = _hubs.get(key)
    if hub is None:
        with _hubs_lock:
            hub = _hubs.get(key)
            if hub is None:
                hub = _hubs[key] = WaitHub()
    return hub
