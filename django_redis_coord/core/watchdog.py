"""Automatic renewal of held locks and permits, with an explicit loss signal.

One watchdog per process (a thread) renews every registered hold at a third of its timeout,
batching all holds due at the same moment on the same client into one pipeline round trip.
Each batch runs on a thread of its own, so a server that stops answering holds up neither the
renewals on other servers nor the watchdog, which declares a hold lost at its local deadline:
``send instant + TTL - drift`` on the monotonic clock.  A lost hold gets ``valid == False`` and its
``on_lost`` callback (and the ``lock_lost`` signal) fires once, on a worker thread of its own
(:mod:`django_redis_coord.core.callbacks`): a callback that blocks delays neither a renewal nor another
lock's loss signal, and one running for over a second is reported with a warning.

The asyncio twin (:class:`AsyncWatchdog`) is one task per event loop with the same behaviour.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from .callbacks import CallbackRunner
from .concurrency import in_background

logger = logging.getLogger("django_redis_coord")

#: After a failed renewal, try again this often (seconds) until the deadline passes.
RETRY_INTERVAL = 0.05
#: The watchdog looks at its holds at least this often (seconds), with or without holds due.
LOOK_EVERY = 1.0
#: A hold due within this fraction of its renewal interval is renewed with the holds due now.
EARLY = 0.25


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
    def create(cls, owner: Any, local: Any, token: bytes, first_in: Optional[float], once: bool,
               now: Optional[float] = None) -> Hold:
        interval = max(owner.renew_ttl_ms / 3000.0, RETRY_INTERVAL)
        hold = cls(owner, local, token, interval, once=once, key=(id(owner), id(local), token))
        hold.due = (time.monotonic() if now is None else now) + (interval if first_in is None else first_in)
        return hold

    def first_look(self) -> float:
        """When the watchdog must first look at this hold: its renewal, or its local deadline."""
        deadline = self.local.deadline
        return self.due if deadline is None else min(self.due, deadline)


def _settle(holds: dict, hold: Hold, sent_at: float, reply: Any, now: float) -> bool:
    """Apply a renewal outcome to a registered hold: reschedule or forget it; True when it is
    lost (forgotten here; the caller runs :meth:`Watchdog._lose`)."""
    hold.in_flight = False
    if hold.key not in holds:
        return False
    outcome = _renew_reply(hold, sent_at, reply)
    if outcome is False:
        holds.pop(hold.key, None)
        # Not held in Redis any more: no longer valid from now on, even before on_lost has run.
        deadline = hold.local.deadline
        hold.local.deadline = now if deadline is None else min(deadline, now)
        return True
    if outcome is None:
        hold.due = now + min(RETRY_INTERVAL, hold.interval)
    elif hold.once:
        holds.pop(hold.key, None)
    else:
        hold.due = now + hold.interval
    return False


def _look(holds: dict, now: float) -> tuple[list[Hold], list[Hold], float]:
    """One look at the registered holds (sync and asyncio watchdogs alike): those due for renewal
    (marked in flight), those past their local deadline (forgotten here: they are lost), and when
    to look again (at most a second from ``now``)."""
    wake_at = now + LOOK_EVERY
    due: list[Hold] = []
    lost: list[Hold] = []
    for hold in list(holds.values()):
        deadline = hold.local.deadline
        if deadline is not None and now >= deadline:
            holds.pop(hold.key, None)
            lost.append(hold)
            continue
        if deadline is not None:
            wake_at = min(wake_at, deadline)
        if hold.in_flight:
            continue
        if now >= hold.due:
            due.append(hold)
        else:
            wake_at = min(wake_at, hold.due)
    if due:
        # Holds coming due soon go in the same round trips (a renewal a little early is harmless):
        # holds taken at different instants then share batches instead of one round trip each.
        taken = set(map(id, due))
        due.extend(hold for hold in holds.values()
                   if not hold.in_flight and id(hold) not in taken and now >= hold.due - hold.interval * EARLY)
    for hold in due:
        hold.in_flight = True
    return due, lost, wake_at


def _by_client(holds: list[Hold]) -> list[list[Hold]]:
    """``holds`` in batches renewed together: one per Redis client."""
    batches: dict[int, list[Hold]] = {}
    for hold in holds:
        batches.setdefault(id(hold.owner.redis), []).append(hold)
    return list(batches.values())


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
        #: When the waiting loop looks at its holds again by itself; 0.0 while it is not waiting
        #: (it looks at every hold before it waits again).  A hold registered for no earlier than
        #: that needs no wake-up, which would cost a thread switch on every acquire.
        self._wake_at = 0.0
        # on_lost callbacks and lock_lost signals, away from the renewals and from each other.
        self._callbacks = CallbackRunner()
        #: Claims registered with no lock taken (see :meth:`register`), taken in at the next look.
        self._arriving: deque = deque()
        self._thread = threading.Thread(target=self._run, name="dcoord-watchdog", daemon=True)
        self._thread.start()

    # -- registration ------------------------------------------------------------------------
    def register(
        self, owner: Any, local: Any, token: bytes, first_in: Optional[float] = None, once: bool = False
    ) -> None:
        """Renew ``token``'s hold every third of its timeout (or once, ``first_in`` seconds from now).

        A single renewal due no sooner than the loop's next look by itself (:data:`LOOK_EVERY`) --
        the claim of a hold handed over provisionally, registered on every contended acquire -- is
        only queued: no lock, no wake-up of the loop, which takes it in at that look.  ``local``
        then names its queued entry (``arriving``), so that an unregistration, or a later
        registration, before that look voids it.
        """
        if once and first_in is not None and first_in >= LOOK_EVERY:
            entry = (owner, local, token, first_in, time.monotonic())
            local.arriving = entry
            self._arriving.append(entry)
            return
        hold = Hold.create(owner, local, token, first_in, once)
        with self._cond:
            if local.arriving is not None:
                local.arriving = None
            self._holds[hold.key] = hold
            if hold.first_look() < self._wake_at:
                self._cond.notify()

    def unregister(self, owner: Any, local: Any) -> None:
        token = local.token
        if local.arriving is not None:
            local.arriving = None  # before the look that would take it in (under the lock below)
        with self._cond:
            self._holds.pop((id(owner), id(local), token), None)

    def _take_in(self) -> None:
        """Move the queued claims still wanted into the holds (called with the lock held)."""
        arriving = self._arriving
        while arriving:
            entry = arriving.popleft()
            owner, local, token, first_in, registered_at = entry
            if local.arriving is entry:
                hold = Hold.create(owner, local, token, first_in, True, now=registered_at)
                self._holds[hold.key] = hold

    def look_again(self) -> None:
        """A registered hold's local deadline moved (an extend): let the loop see it now."""
        with self._cond:
            self._cond.notify()

    def __len__(self) -> int:
        return len(self._holds) + len(self._arriving)

    # -- loop ----------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                if self._arriving:
                    self._take_in()
                now = time.monotonic()
                self._callbacks.warn_long(now)
                due, lost, wake_at = _look(self._holds, now)
                if not due and not lost:
                    self._wake_at = wake_at
                    self._cond.wait(max(0.0, wake_at - now))
                    self._wake_at = 0.0
                    continue
            self._report(lost)
            for batch in _by_client(due):
                # A thread per batch: a client whose server stopped answering keeps its own
                # renewals in flight (its holds meet their deadlines), nobody else's.
                threading.Thread(target=self._renew_batch, args=(batch,), name="dcoord-renew", daemon=True).start()

    def _renew_batch(self, batch: list[Hold]) -> None:
        sent_at = time.monotonic()
        try:
            pipe = batch[0].owner.redis.pipeline(transaction=False)
            for hold in batch:
                hold.owner.queue_renewal(pipe, hold.token, hold.once, hold.local)
            sent_at = time.monotonic()
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:  # connection refused, timeout, ...
            replies = [exc] * len(batch)
        with self._cond:
            now = time.monotonic()
            lost = [hold for hold, reply in zip(batch, replies) if _settle(self._holds, hold, sent_at, reply, now)]
            self._cond.notify()
        self._report(lost)

    def _report(self, lost: list[Hold]) -> None:
        """Run the loss handling of ``lost`` holds (callbacks, signals) on the callbacks' workers."""
        for hold in lost:
            about = f"on_lost of {hold.owner.kind} {hold.owner.name!r}"
            self._callbacks.submit(functools.partial(self._lose, hold), about)

    @staticmethod
    def _lose(hold: Hold) -> None:
        if hold.local.token != hold.token:
            return  # that hold ended meanwhile, and its state may describe the next hold already
        max_hold = getattr(hold.owner, "max_hold", None)
        started = hold.local.started
        if max_hold is not None and started is not None and time.monotonic() >= started + max_hold - hold.interval:
            logger.error("Ended %s %r at max_hold: held for %gs, no renewal past that", hold.owner.kind,
                         hold.owner.name, max_hold)
        else:
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
        #: As :attr:`Watchdog._wake_at`.
        self._wake_at = 0.0
        self._task = loop.create_task(self._run(), name="dcoord-watchdog")

    def register(
        self, owner: Any, local: Any, token: bytes, first_in: Optional[float] = None, once: bool = False
    ) -> None:
        hold = Hold.create(owner, local, token, first_in, once)
        self._holds[hold.key] = hold
        if hold.first_look() < self._wake_at:
            self._changed.set()

    def unregister(self, owner: Any, local: Any) -> None:
        self._holds.pop((id(owner), id(local), local.token), None)

    def look_again(self) -> None:
        """As :meth:`Watchdog.look_again`."""
        self._changed.set()

    def __len__(self) -> int:
        return len(self._holds)

    async def _run(self) -> None:
        try:
            await self._loop_forever()
        finally:  # the loop is shutting down (its tasks are cancelled): let it and its holds go
            if _async_watchdogs.get(self.loop) is self:
                del _async_watchdogs[self.loop]

    async def _loop_forever(self) -> None:
        while True:
            due, lost, wake_at = _look(self._holds, time.monotonic())
            for hold in lost:
                Watchdog._lose(hold)
            for batch in _by_client(due):
                in_background(self._renew_batch(batch))
            self._changed.clear()
            # asyncio.wait, not wait_for: wait_for can swallow the cancellation that ends the loop
            # (Python 3.10/3.11), which would hang asyncio.run() at shutdown.
            waiter = asyncio.ensure_future(self._changed.wait())
            self._wake_at = wake_at
            try:
                await asyncio.wait({waiter}, timeout=max(0.0, wake_at - time.monotonic()))
            finally:
                self._wake_at = 0.0
                waiter.cancel()

    async def _renew_batch(self, batch: list[Hold]) -> None:
        client = batch[0].owner.redis
        sent_at = time.monotonic()
        try:
            pipe = client.pipeline(transaction=False)
            for hold in batch:
                hold.owner.queue_renewal(pipe, hold.token, hold.once, hold.local)
            replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:
            replies = [exc] * len(batch)
        now = time.monotonic()
        for hold, reply in zip(batch, replies):
            if _settle(self._holds, hold, sent_at, reply, now):
                Watchdog._lose(hold)
        self._changed.set()


_async_watchdogs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncWatchdog] = weakref.WeakKeyDictionary()


def async_watchdog() -> AsyncWatchdog:
    """The running event loop's watchdog, started on first use."""
    loop = asyncio.get_running_loop()
    dog = _async_watchdogs.get(loop)
    if dog is None:
        dog = _async_watchdogs[loop] = AsyncWatchdog(loop)
    return dog
