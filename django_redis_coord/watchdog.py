"""Automatic renewal of held locks and permits, with an explicit loss signal.

One watchdog per process (a thread) renews every registered hold at a third of its timeout,
batching all holds due at the same moment on the same client into one pipeline round trip.
Network calls run on a separate I/O thread, so a server that stops answering cannot keep the
watchdog from declaring a hold lost at its local deadline: ``send instant + TTL - drift`` on the
monotonic clock.  A lost hold gets ``valid == False`` and its ``on_lost`` callback fires once.

The asyncio twin (:class:`AsyncWatchdog`) is one task per event loop with the same behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

logger = logging.getLogger("django_redis_coord")

#: After a failed renewal, try again this often (seconds) until the deadline passes.
RETRY_INTERVAL = 0.05


@dataclass
class Hold:
    """One renewed hold: the primitive, its per-thread/task state and the token it holds."""

    owner: Any
    local: Any
    token: bytes
    #: Seconds between renewals (a third of the timeout).
    interval: float
    due: float = 0.0
    in_flight: bool = False
    #: Renew once, then forget (claiming the rest of a provisional hand-off).
    once: bool = False
    key: tuple = field(default=())

    @classmethod
    def create(cls, owner: Any, local: Any, token: bytes, first_in: Optional[float], once: bool) -> Hold:
        interval = max(owner.renew_ttl_ms / 3000.0, RETRY_INTERVAL)
        hold = cls(owner, local, token, interval, once=once, key=(id(owner), id(local), token))
        hold.due = time.monotonic() + (interval if first_in is None else first_in)
        return hold


def _settle(holds: dict, hold: Hold, sent_at: float, reply: Any, now: float) -> None:
    """Apply a renewal outcome to a registered hold: reschedule, forget, or declare it lost."""
    hold.in_flight = False
    if hold.key not in holds:
        return
    outcome = _renew_reply(hold, sent_at, reply)
    if outcome is False:
        holds.pop(hold.key, None)
        Watchdog._lose(hold)
    elif outcome is None:
        hold.due = now + min(RETRY_INTERVAL, hold.interval)
    elif hold.once:
        holds.pop(hold.key, None)
    else:
        hold.due = now + hold.interval


def _renew_reply(hold: Hold, sent_at: float, reply: Any) -> Optional[bool]:
    """Apply one renewal reply: True renewed, False lost, None failed (retry)."""
    if isinstance(reply, BaseException):
        logger.warning("Renewing %r failed: %s", hold.owner.name, reply)
        return None
    pttl = int(reply)
    if pttl == -2:
        return False
    hold.local.deadline = hold.owner.deadline_for(sent_at, pttl)
    return True


class Watchdog:
    """The per-process renewal thread for sync primitives."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._holds: dict[tuple, Hold] = {}
        self._cond = threading.Condition()
        self._io = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dcoord-renew")
        self._thread = threading.Thread(target=self._run, name="dcoord-watchdog", daemon=True)
        self._thread.start()

    # -- registration ------------------------------------------------------------------------
    def register(
        self, owner: Any, local: Any, token: bytes, first_in: Optional[float] = None, once: bool = False
    ) -> None:
        """Renew ``token``'s hold every third of its timeout (or once, ``first_in`` seconds from now)."""
        hold = Hold.create(owner, local, token, first_in, once)
        with self._cond:
            self._holds[hold.key] = hold
            self._cond.notify()

    def unregister(self, owner: Any, local: Any) -> None:
        token = getattr(local, "token", None)
        with self._cond:
            self._holds.pop((id(owner), id(local), token), None)

    def __len__(self) -> int:
        return len(self._holds)

    # -- loop ----------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                wake_at = now + 1.0
                due: list[Hold] = []
                for hold in list(self._holds.values()):
                    deadline = getattr(hold.local, "deadline", None)
                    if deadline is not None and now >= deadline:
                        self._holds.pop(hold.key, None)
                        self._lose(hold)
                        continue
                    if deadline is not None:
                        wake_at = min(wake_at, deadline)
                    if hold.in_flight:
                        continue
                    if now >= hold.due:
                        due.append(hold)
                    else:
                        wake_at = min(wake_at, hold.due)
                for hold in due:
                    hold.in_flight = True
                if not due:
                    self._cond.wait(max(0.0, wake_at - now))
                    continue
            by_client: dict[int, list[Hold]] = {}
            for hold in due:
                by_client.setdefault(id(hold.owner.redis), []).append(hold)
            for batch in by_client.values():
                future = self._io.submit(self._renew_batch, batch)
                future.add_done_callback(self._after_batch(batch))

    def _renew_batch(self, batch: list[Hold]) -> tuple[float, list[Any]]:
        client = batch[0].owner.redis
        pipe = client.pipeline(transaction=False)
        for hold in batch:
            hold.owner.queue_renewal(pipe, hold.token)
        sent_at = time.monotonic()
        return sent_at, pipe.execute(raise_on_error=False)

    def _after_batch(self, batch: list[Hold]):
        def done(future: Future) -> None:
            try:
                sent_at, replies = future.result()
            except BaseException as exc:  # connection refused, timeout, ...
                replies = [exc] * len(batch)
                sent_at = time.monotonic()
            with self._cond:
                now = time.monotonic()
                for hold, reply in zip(batch, replies):
                    _settle(self._holds, hold, sent_at, reply, now)
                self._cond.notify()

        return done

    @staticmethod
    def _lose(hold: Hold) -> None:
        logger.error("Lost %s %r: it could not be renewed before its deadline", hold.owner.kind, hold.owner.name)
        try:
            hold.owner._mark_lost(hold.local)
        except Exception:  # a failing callback must not stop the watchdog
            logger.exception("on_lost callback of %r failed", hold.owner.name)


_sync_watchdog: Optional[Watchdog] = None
_sync_lock = threading.Lock()


def sync_watchdog() -> Watchdog:
    """The process's watchdog, started on first use (and again in a forked child)."""
    global _sync_watchdog
    dog = _sync_watchdog
    if dog is None or dog.pid != os.getpid():
        with _sync_lock:
            dog = _sync_watchdog
            if dog is None or dog.pid != os.getpid():
                dog = _sync_watchdog = Watchdog()
    return dog


class AsyncWatchdog:
    """The per-event-loop renewal task for asyncio primitives."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._holds: dict[tuple, Hold] = {}
        self._changed = asyncio.Event()
        self._task = loop.create_task(self._run(), name="dcoord-watchdog")

    def register(
        self, owner: Any, local: Any, token: bytes, first_in: Optional[float] = None, once: bool = False
    ) -> None:
        hold = Hold.create(owner, local, token, first_in, once)
        self._holds[hold.key] = hold
        self._changed.set()

    def unregister(self, owner: Any, local: Any) -> None:
        self._holds.pop((id(owner), id(local), getattr(local, "token", None)), None)

    def __len__(self) -> int:
        return len(self._holds)

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            wake_at = now + 1.0
            due: list[Hold] = []
            for hold in list(self._holds.values()):
                deadline = getattr(hold.local, "deadline", None)
                if deadline is not None and now >= deadline:
                    self._holds.pop(hold.key, None)
                    Watchdog._lose(hold)
                    continue
                if deadline is not None:
                    wake_at = min(wake_at, deadline)
                if hold.in_flight:
                    continue
                if now >= hold.due:
                    due.append(hold)
                else:
                    wake_at = min(wake_at, hold.due)
            by_client: dict[int, list[Hold]] = {}
            for hold in due:
                hold.in_flight = True
                by_client.setdefault(id(hold.owner.redis), []).append(hold)
            for batch in by_client.values():
                self.loop.create_task(self._renew_batch(batch))
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.0, wake_at - time.monotonic()))
            except asyncio.TimeoutError:
                pass

    async def _renew_batch(self, batch: list[Hold]) -> None:
        client = batch[0].owner.redis
        sent_at = time.monotonic()
        try:
            pipe = client.pipeline(transaction=False)
            for hold in batch:
                hold.owner.queue_renewal(pipe, hold.token)
            replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:
            replies = [exc] * len(batch)
        now = time.monotonic()
        for hold, reply in zip(batch, replies):
            _settle(self._holds, hold, sent_at, reply, now)
        self._changed.set()


_async_watchdogs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncWatchdog] = weakref.WeakKeyDictionary()


def async_watchdog() -> AsyncWatchdog:
    """The running event loop's watchdog, started on first use."""
    loop = asyncio.get_running_loop()
    dog = _async_watchdogs.get(loop)
    if dog is None:
        dog = _async_watchdogs[loop] = AsyncWatchdog(loop)
    return dog
