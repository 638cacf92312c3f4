"""What the sync and asyncio waiting hubs share (see :mod:`django_redis_coord.core.waiting.sync`).

A queued waiter is told of its grant by a message on its process's channel: ``"<number>.<attempt>
<fence> <provisional>"``, or ``"<number>.<attempt> expires <ms>"`` (a note), published by the script
that made the grant (``notify`` in ``lua/common.lua``).  The hub of the process subscribes one
connection to the channel; one of its waiters at a time reads it (the *reader*: the first to wait,
then whoever it hands the reading to when it leaves), takes the messages about itself and hands
every other message to waiter ``number``.  The reader is thus woken by its own read, with no
thread (or task) in between: the only waiter of a process, the common case, always is.  A waiter
takes a message only when it is about its latest queueing call (``attempt``): a grant announced
for an earlier call may have ended since.
A message is only a wake-up: the grant is written in Redis before it is announced, so a waiter that
misses one (its hub's connection dropped, a failover) finds the grant at its next refresh.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
from collections import deque
from typing import Any, Optional

from redis.exceptions import RedisClusterException, RedisError

from ..exceptions import ConnectionPoolTooSmall

logger = logging.getLogger("django_redis_coord")

#: The start of every hub's channel; the rest is random, one per hub (a process has one hub per
#: connection pool, or per cluster client).
CHANNEL_PREFIX = b"dcoord:wait:"
#: A hub with nobody waiting gives its connection back after this many seconds.
IDLE_SECONDS = 10.0
#: How long one read of the channel waits for a message at most.
READ_SECONDS = 1.0
#: What a read of the channel meets when the connection dropped, a failover runs or the pool ran
#: dry: the reader reconnects.  Anything else (a signal handler's exception, such as Celery's soft
#: time limit, raised in the waiting thread while it reads) ends the waiter's call, as it would
#: anywhere else in that call.
READ_FAILURES = (RedisError, RedisClusterException, OSError)
#: What a hub hands its waiters after its connection came back: a message may have been lost
#: meanwhile, so each looks again in Redis at once.
RECHECK = b""
#: The first and the longest pause between two attempts of a hub to (re)subscribe.
RETRY_FIRST = 0.05
RETRY_MAX = 1.0


def new_channel() -> bytes:
    """A channel name of a new hub: no other hub (in any process) picks the same."""
    return CHANNEL_PREFIX + secrets.token_hex(12).encode()


def hub_key(client: Any) -> Any:
    """What one hub serves: the client's connection pool, or (a cluster client) the client."""
    pool = getattr(client, "connection_pool", None)
    return pool if pool is not None else client


def check_pool(client: Any) -> None:
    """Refuse a client whose pool cannot hold the hub's connection and one command beside it."""
    pool = getattr(client, "connection_pool", None)
    size = getattr(pool, "max_connections", None)
    if isinstance(size, int) and size < 2:
        raise ConnectionPoolTooSmall(
            f"the connection pool allows {size} connection(s): a blocking acquire needs one for its "
            "process's waiting connection and at least one more for its commands. Raise the pool's "
            "max_connections (with django-redis: CACHES[...]['OPTIONS']['CONNECTION_POOL_KWARGS']"
            "['max_connections']) to 2 or more, or acquire with blocking=False."
        )


def command_slots(client: Any) -> int:
    """How many calls the waiters of one hub may have under way at once: half of what the pool
    allows beside the hub's own connection (and 32 for clients without a pool size, as a cluster
    client).  Without a bound, the refreshes of a thousand waiters that queued together would ask
    for a thousand connections at once, more than redis-py's pools allow (they raise
    ``MaxConnectionsError``, or wait for a free connection while holders wait to release)."""
    size = getattr(getattr(client, "connection_pool", None), "max_connections", None)
    if not isinstance(size, int):
        return 32
    return max(1, (size - 1) // 2)


def parse_message(data: Any) -> Optional[tuple[int, int, bytes]]:
    """The waiter's number, the attempt the message is about and the rest of a message of the
    channel (``"<number>.<attempt> <rest>"``), or ``None`` if it is not one of ours."""
    if isinstance(data, str):
        data = data.encode()
    head, _, rest = bytes(data).partition(b" ")
    number, _, attempt = head.partition(b".")
    try:
        return int(number), int(attempt), rest
    except ValueError:
        return None


def retry_pause(failures: int) -> float:
    """The pause before the next attempt to subscribe after ``failures`` failed ones in a row."""
    return float(min(RETRY_MAX, RETRY_FIRST * 2 ** max(0, failures - 1)))


def log_failure(failures: int, exc: BaseException) -> None:
    """Log a lost waiting connection: a warning the first time in a row, then at debug level."""
    level = logging.WARNING if failures == 1 else logging.DEBUG
    logger.log(level, "The waiting connection of django_redis_coord failed (%s: %s); waiters look again in "
               "Redis and it reconnects", type(exc).__name__, exc)


class WaiterBase:
    """One waiting call: the messages its hub handed it, and an event to sleep on (a
    ``threading.Event`` or an ``asyncio.Event``).

    ``gate`` is the hub's bound on the calls its waiters have under way at once (see
    :func:`command_slots`): every call of a waiter passes it.
    """

    __slots__ = ("id", "event", "messages", "channel", "attempt", "gate")

    def __init__(self, number: int, channel: bytes, gate: Any, event: Any) -> None:
        self.id = number
        self.event = event
        self.messages: deque = deque()
        self.channel = channel
        #: The number of the waiter's latest queueing call (see :meth:`reply_to`).
        self.attempt = 0
        self.gate = gate

    def reply_to(self) -> tuple[bytes, bytes]:
        """What the next queueing call sends: where a grant is announced (the hub's channel) and
        ``"<number>.<attempt>"``, a new attempt per call.  A message about an earlier call's grant
        is then told apart and dropped: that grant may have ended since (a later call found the
        lock gone and queued again), and taking it would hold a lock someone else holds."""
        self.attempt += 1
        return self.channel, b"%d.%d" % (self.id, self.attempt)

    def deliver(self, message: bytes, attempt: int = 0) -> None:
        """Hand the waiter ``message`` about its call ``attempt`` (0: about no call, ``RECHECK``)."""
        self.messages.append((attempt, message))
        self.event.set()

    def next_message(self) -> Optional[bytes]:
        """The oldest message about the latest call (or about none) not yet taken, or ``None``."""
        while self.messages:
            attempt, message = self.messages.popleft()
            if attempt in (0, self.attempt):
                return message
        return None


class HubBase:
    """What the sync and asyncio hubs keep: their channel, their waiters by number, and what a
    message read from the channel does."""

    def __init__(self) -> None:
        self.channel = new_channel()
        #: Guards ``_waiters`` (the sync hub's thread and the waiting threads; never contended
        #: under asyncio, where one loop runs the hub and its waiters).
        self._lock = threading.Lock()
        self._waiters: dict[int, WaiterBase] = {}
        self._numbers = itertools.count(1)
        #: Whether the hub's connection saw its subscription confirmed already.
        self._subscribed = False
        #: The client a waiter registered with (``None`` while nobody waits): what the
        #: connection is subscribed through.
        self._client: Any = None
        #: The monotonic instant the last waiter left (``None`` while anyone waits).
        self._idle_since: Optional[float] = None
        #: Held by the waiter that reads the channel (a ``threading.Lock`` or an ``asyncio.Lock``).
        self._reading: Any = None
        #: Set while the channel is subscribed (a ``threading.Event`` or an ``asyncio.Event``).
        self._ready: Any = None
        #: Failed attempts to read or subscribe in a row, and when the next one may start.
        self._failures = 0
        self._retry_at = 0.0

    def _next_number(self) -> int:
        return next(self._numbers)

    def _add(self, waiter: WaiterBase) -> None:
        with self._lock:
            self._waiters[waiter.id] = waiter
            self._idle_since = None

    def unregister(self, waiter: WaiterBase) -> None:
        """``waiter`` leaves: the reading passes to another waiter if nobody reads."""
        with self._lock:
            self._waiters.pop(waiter.id, None)
            if not self._waiters:
                self._idle_since = time.monotonic()
                self._client = None  # the hub, kept by its pool, must not keep the pool alive
        self.pass_reading(waiter)

    def pass_reading(self, leaving: Optional[WaiterBase]) -> None:
        """Wake the longest-registered waiter other than ``leaving`` to take the reading over, if
        nobody reads now (the reader hands it over when it stops, see the twins' ``Waiter.wait``;
        so does the sync hub's idle-closer, which takes the reading to look)."""
        if self._reading.locked():
            return
        with self._lock:
            for waiter in self._waiters.values():
                if waiter is not leaving:
                    waiter.event.set()
                    return

    def _wake_all(self) -> None:
        """Wake every waiter without a message (each looks whether it should read)."""
        with self._lock:
            waiters = list(self._waiters.values())
        for waiter in waiters:
            waiter.event.set()

    def _failed(self, exc: BaseException) -> None:
        """After the connection failed (and was closed): a pause before the next subscription,
        and every waiter looks again in Redis now (a grant may have been announced meanwhile)."""
        self._ready.clear()
        self._failures += 1
        self._retry_at = time.monotonic() + retry_pause(self._failures)
        log_failure(self._failures, exc)
        self._recheck_all()

    def _took(self, message: Optional[dict]) -> None:
        """Act on what one read gave; the first confirmation of the subscription lets the
        waiters that register meanwhile go on."""
        if self._handle(message):
            self._failures = 0
            if not self._ready.is_set():
                self._ready.set()
                self._wake_all()

    def _recheck_all(self) -> None:
        """Make every waiter look again in Redis now (a message may have been lost)."""
        with self._lock:
            waiters = list(self._waiters.values())
        for waiter in waiters:
            waiter.deliver(RECHECK)

    def _handle(self, message: Optional[dict]) -> bool:
        """Act on what one read of the channel gave; True when it confirms the subscription."""
        if message is None:
            return False
        if message["type"] == "message":
            parsed = parse_message(message["data"])
            if parsed is not None:
                with self._lock:
                    waiter = self._waiters.get(parsed[0])
                if waiter is not None:
                    waiter.deliver(parsed[2], parsed[1])
            return False
        if message["type"] != "subscribe":
            return False
        # The first subscription of this run, or redis-py's own after a reconnection: then a
        # message may have been lost meanwhile.
        if self._subscribed:
            self._recheck_all()
        self._subscribed = True
        return True
