"""Redlock: one lock over N independent Redis masters, held while a majority of them grant it.

>>> import redis                                                   # doctest: +SKIP
>>> from django_redis_coord import Redlock
>>> masters = [redis.Redis(port=p) for p in (6379, 6380, 6381)]
>>> with Redlock(masters, "invoices:close-month", timeout=30) as lock:
...     lock.ensure_valid()              # raises LockLostError once the validity time is over
...     close_month(fence=lock.fence)    # let the resource refuse stale fences

The algorithm (see docs/redlock.md for what it does and does not guarantee):

1. Note the monotonic time, then send the lock script to **all** masters at once: every request
   goes out before any reply is awaited, so one attempt costs the slowest master's round trip,
   and each master gets ``node_timeout`` (much smaller than the TTL) to answer.
2. The lock is held when a quorum (``N // 2 + 1``) granted it and the validity time
   ``TTL - elapsed - drift`` (``drift = 1% of the TTL + 2 ms``) is still positive.
3. Otherwise the attempt is undone on every master that may have granted it, and a blocking
   acquire tries again after a random delay (up to ``sleep`` seconds).
4. ``release`` goes to all masters; ``extend`` (and the watchdog's renewal) needs a quorum.

Each master runs the ordinary lock scripts on the keys a :class:`~django_redis_coord.Lock` of the
same name uses.  Replies are read on dedicated connections to each master (built from the
client's own connection settings, without retries), so an unreachable master costs at most
``node_timeout`` instead of redis-py's reconnect back-off.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from types import SimpleNamespace, TracebackType
from typing import Any, Optional, Union

from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from . import watchdog as _watchdog
from ._base import Number
from ._redlock_base import (
    DEFAULT_RETRY_DELAY,
    DEFAULT_TIMEOUT,
    Command,
    NoBackoff,
    QuorumUnavailable,
    RedlockBase,
    SharedHold,
    pack,
)
from .exceptions import LockError

__all__ = ["Redlock", "QuorumUnavailable", "DEFAULT_TIMEOUT", "DEFAULT_RETRY_DELAY"]

logger = logging.getLogger("django_redis_coord")


# -- talking to all masters at once -----------------------------------------------------------
class _Link:
    """Dedicated connections to one master, built from its client's connection settings with
    no retries and socket timeouts of ``node_timeout``; idle ones are kept for reuse."""

    def __init__(self, pool: Any, node_timeout: float) -> None:
        self.connection_class = pool.connection_class
        kwargs = dict(pool.connection_kwargs)
        kwargs["retry"] = Retry(NoBackoff(), 0)  # type: ignore[arg-type]
        kwargs["socket_timeout"] = node_timeout
        if "host" in kwargs or "service_name" in kwargs or "connection_pool" in kwargs:
            kwargs["socket_connect_timeout"] = node_timeout
        self.kwargs = kwargs
        self.pid = os.getpid()
        self.idle: deque[Any] = deque()
        self.connecting = 0
        self.failing = False

    def take(self) -> Optional[Any]:
        """An idle connection that is still usable, or None."""
        if self.pid != os.getpid():  # forked: the idle sockets belong to the parent
            self.idle = deque()
            self.pid = os.getpid()
            self.connecting = 0
        while True:
            try:
                conn = self.idle.pop()
            except IndexError:
                return None
            try:
                if not _readable(conn):
                    return conn
            except Exception:
                pass
            conn.disconnect()  # closed by the server (restart, timeout) or out of step

    def open(self) -> Any:
        conn = self.connection_class(**self.kwargs)
        conn.connect()
        return conn

    def give(self, conn: Any) -> None:
        self.idle.append(conn)


def _readable(conn: Any) -> bool:
    """True when an idle connection has something to read: the server closed it, or it is out of
    step.  One ``select`` on its socket (redis-py's ``can_read`` costs three system calls)."""
    if not hasattr(conn, "_sock"):
        return bool(conn.can_read(timeout=0))
    if conn._sock is None:
        return True  # disconnected: not reusable as it is
    return bool(select.select([conn._sock], [], [], 0)[0])


_links: weakref.WeakKeyDictionary[Any, dict[float, _Link]] = weakref.WeakKeyDictionary()
_links_lock = threading.Lock()


def _links_for(masters: Sequence[Any], node_timeout: float) -> list[_Link]:
    links = []
    with _links_lock:
        for master in masters:
            pool = master.connection_pool
            by_timeout = _links.get(pool)
            if by_timeout is None:
                by_timeout = _links[pool] = {}
            link = by_timeout.get(node_timeout)
            if link is None:
                link = by_timeout[node_timeout] = _Link(pool, node_timeout)
            links.append(link)
    return links


class _Connector:
    """The per-process threads that open new connections, so that several masters are dialled at
    once and a master that does not answer a connection attempt never holds up the caller."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dcoord-redlock")


_connector: Optional[_Connector] = None
_connector_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _connector
    connector = _connector
    if connector is None or connector.pid != os.getpid():
        with _connector_lock:
            connector = _connector
            if connector is None or connector.pid != os.getpid():
                connector = _connector = _Connector()
    return connector.executor


def _send(conn: Any, packed: bytes) -> None:
    conn.send_packed_command([packed], check_health=False)


def _connect_and_send(link: _Link, packed: bytes, deadline: float) -> Any:
    try:
        conn = link.open()
    except BaseException:
        link.failing = True
        raise
    finally:
        link.connecting = max(0, link.connecting - 1)
    link.failing = False
    if time.monotonic() >= deadline:
        link.give(conn)
        raise RedisTimeoutError("connected too late")
    try:
        _send(conn, packed)
    except BaseException:
        conn.disconnect()
        raise
    return conn


def _drop_late(future: Future) -> None:
    """A connection whose requests were given up on: its replies will never be read."""
    try:
        conn = future.result()
    except BaseException:
        return
    conn.disconnect()


def _read(
    link: _Link, conn: Any, batch: Sequence[Command], deadline: float, budget: float, where: str
) -> list[Any]:
    """Read one reply per command (errors become exception values) before ``deadline``."""
    replies: list[Any] = []
    retry: list[int] = []
    try:
        for index in range(len(batch)):
            replies.append(_read_one(conn, deadline, where))
            if isinstance(replies[-1], NoScriptError) and batch[index].fallback is not None:
                retry.append(index)
        if retry:
            # The script cache was flushed: one more round trip, with its own budget.
            _send(conn, pack([batch[i].fallback for i in retry]))  # type: ignore[misc]
            deadline = time.monotonic() + budget
            for index in retry:
                replies[index] = _read_one(conn, deadline, where)
    except BaseException as exc:
        conn.disconnect()
        if not isinstance(exc, Exception):
            raise
        replies.extend([exc] * (len(batch) - len(replies)))
        for index in retry:
            if isinstance(replies[index], NoScriptError):
                replies[index] = exc
        return replies
    link.give(conn)
    return replies


def _read_one(conn: Any, deadline: float, where: str) -> Any:
    # A reply that is already there counts even when the budget ran out while other masters
    # were read: it was sent in time.
    if not conn.can_read(timeout=max(0.0, deadline - time.monotonic())):
        raise RedisTimeoutError(f"{where} did not answer in time")
    try:
        return conn.read_response()
    except ResponseError as exc:  # an error reply: the connection stays in step
        return exc


def fan_out(
    links: Sequence[_Link], batches: Sequence[Sequence[Command]], node_timeout: float, names: Sequence[str]
) -> tuple[float, list[list[Any]]]:
    """Send ``batches[i]`` (pipelined) to master ``i`` for every master before reading any reply.

    Returns the instant before the first send and, per master, one reply per command; a master
    that fails or does not answer within ``node_timeout`` gets the error as each of its replies.
    """
    started = time.monotonic()
    deadline = started + node_timeout
    results: list[list[Any]] = [[] for _ in links]
    ready: list[tuple[int, Any]] = []
    dialling: list[tuple[int, Future]] = []
    packed: dict[int, bytes] = {}
    for index, (link, batch) in enumerate(zip(links, batches)):
        if not batch:
            continue
        conn = link.take()
        if conn is not None:
            data = packed.get(id(batch))
            if data is None:
                data = packed[id(batch)] = pack([command.args for command in batch])
            try:
                _send(conn, data)
                ready.append((index, conn))
                continue
            except Exception:
                conn.disconnect()
        if link.failing and link.connecting > 0:
            # The last attempt to reach this master failed and another one is still under way.
            error = RedisTimeoutError(f"{names[index]} is unreachable (a connection attempt is under way)")
            results[index] = [error] * len(batch)
            continue
        # A new connection may reach a new (or restarted) server: send the scripts' text, which
        # also caches them there, instead of their SHA1 digests.
        text = pack([command.fallback or command.args for command in batch])
        link.connecting += 1
        dialling.append((index, _executor().submit(_connect_and_send, link, text, deadline)))
    for index, conn in ready:
        results[index] = _read(links[index], conn, batches[index], deadline, node_timeout, names[index])
    for index, future in dialling:
        batch = batches[index]
        try:
            conn = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            future.add_done_callback(_drop_late)
            results[index] = [RedisTimeoutError(f"{names[index]} did not accept a connection in time")] * len(batch)
            continue
        except Exception as exc:
            results[index] = [exc] * len(batch)
            continue
        results[index] = _read(links[index], conn, batch, deadline, node_timeout, names[index])
    return started, results


# -- the lock ---------------------------------------------------------------------------------
class _ThreadHold(SharedHold, threading.local):
    """Hold state private to each thread (a plain namespace the watchdog thread can update)."""


class _RenewalBatch:
    """What the watchdog's ``client.pipeline()`` returns for a Redlock: renewals of its holds."""

    def __init__(self, owner: Redlock) -> None:
        self.owner = owner
        self.tokens: list[bytes] = []

    def add(self, token: bytes) -> None:
        self.tokens.append(token)

    def execute(self, raise_on_error: bool = False) -> list[Any]:
        return self.owner._renew_many(self.tokens)


class _QuorumClient:
    """``owner.redis`` as the watchdog sees it: its pipelines renew holds on all masters at once."""

    def __init__(self, owner: Redlock) -> None:
        self._owner = weakref.proxy(owner)

    def pipeline(self, transaction: bool = False) -> _RenewalBatch:
        return _RenewalBatch(self._owner)  # type: ignore[arg-type]


class Redlock(RedlockBase):
    """A lock held on a majority of N independent Redis masters (the Redlock algorithm).

    ``Redlock(masters, name, timeout=10.0, sleep=0.2, blocking=True, blocking_timeout=None,
    thread_local=True, raise_on_release_error=True, *, node_timeout=None, label=None,
    auto_renew=False, on_lost=None)``

    * ``masters``: one ``redis.Redis`` client per independent master (not replicas of each other).
    * ``timeout``: the lease in seconds (required: a Redlock always expires).
    * ``sleep``: upper bound of the random delay between two attempts of a blocking acquire.
    * ``node_timeout``: how long each master may take to answer one round (default: 100 ms, at most
      a tenth of ``timeout``; at most a quarter of it when given).

    The methods are those of :class:`~django_redis_coord.Lock`.  ``acquire`` returns False when
    the lock is busy (and ``blocking`` is off or ``blocking_timeout`` ran out) and raises
    :class:`QuorumUnavailable` as soon as fewer than a quorum of masters answer.
    """

    def __init__(self, masters: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(masters, name, *args, **kwargs)
        self.local: Any = _ThreadHold() if self.thread_local else SharedHold()
        self._links = _links_for(self.masters, self.node_timeout)
        self._names = [self.describe(index) for index in range(len(self.masters))]
        #: What the watchdog talks to (see :class:`_QuorumClient`).
        self.redis = _QuorumClient(self)

    def _fan_out(self, batches: Sequence[Sequence[Command]]) -> tuple[float, list[list[Any]]]:
        return fan_out(self._links, batches, self.node_timeout, self._names)

    def _everywhere(self, command: Command) -> tuple[float, list[Any]]:
        started, replies = self._fan_out(self.everywhere(command))
        return started, [reply[0] for reply in replies]

    # -- context manager ---------------------------------------------------------------------
    def __enter__(self) -> Redlock:
        if self.acquire():
            return self
        raise self.timed_out()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except LockError:
            self.release_failed()

    # -- acquire -----------------------------------------------------------------------------
    def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock on a quorum of masters; True once held, False when busy.

        A blocking call retries after a random delay (uniform up to ``sleep``, never past the
        holder's remaining lease or ``blocking_timeout``).  Raises :class:`QuorumUnavailable`
        when fewer than a quorum of masters answer an attempt.
        """
        sleep, blocking, stop_at, raw = self.acquire_arguments(sleep, blocking, blocking_timeout, token)
        worker = threading.current_thread().name
        while True:
            try:
                hint = self._attempt(raw, worker)
            except QuorumUnavailable:
                raise  # already undone
            except BaseException:
                # Interrupted mid-attempt (KeyboardInterrupt, ...): give back what may have been granted.
                try:
                    self._undo(raw, set())
                except Exception:
                    pass
                raise
            if hint is True:
                return True
            delay = self.retry_delay(hint, sleep, stop_at) if blocking else None
            if delay is None:
                return False
            time.sleep(delay)

    def _attempt(self, token: bytes, worker: str) -> Union[bool, float, None]:
        """One round of the algorithm: True when held, else a hint (seconds until the other
        holder's lease ends somewhere, or None)."""
        started, replies = self._everywhere(self.acquire_command(token, worker))
        grants = self.tally(replies, self.accept_grant, range(len(self.masters)))
        if len(grants.ok) >= self.quorum:
            fence, synced, lagging = self.fence_of(grants)
            if lagging:
                _, recorded = self._fan_out(self.only(lagging, [self.fence_command(token, fence)]))
                synced += self.recorded(lagging, recorded)
            deadline = self.held_until(started, grants, synced)
            if deadline is not None:
                hold = self._own(token, fence, deadline)
                if self.auto_renew:
                    _watchdog.sync_watchdog().register(self, hold, token)
                return True
        self._undo(token, set(grants.refused))
        return self.failed_attempt(grants)

    def _undo(self, token: bytes, skip: set[int]) -> None:
        """Release an attempt everywhere it may have been granted (all masters but ``skip``,
        which clearly refused it)."""
        undo = [i for i in range(len(self.masters)) if i not in skip]
        if undo:
            self._fan_out(self.only(undo, [self.release_command(token)]))

    # -- inspection ----------------------------------------------------------------------------
    def locked(self) -> bool:
        """True when one token holds the lock on a quorum of masters."""
        return self.held_by_one(self.tokens_of(self._everywhere(self.get_command())[1], "check the lock"))

    def owned(self) -> bool:
        """True when this thread's token holds the lock on a quorum of masters."""
        token = self._state().token
        if token is None:
            return False
        return self.held_by(self.tokens_of(self._everywhere(self.get_command())[1], "check the lock"), token)

    def _mark_lost(self, hold: SimpleNamespace) -> None:
        """Called by the watchdog when a hold could not be renewed on a quorum in time."""
        self.mark_lost(hold)

    # -- release / extend ------------------------------------------------------------------------
    def release(self) -> None:
        """Release the lock on every master; raises if it was not held on a quorum any more."""
        hold, token = self.hold_to_release()
        if self.auto_renew:
            _watchdog.sync_watchdog().unregister(self, hold)
        self.released(hold, self._everywhere(self.release_command(token))[1])

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to each master's remaining lease (or set it, with
        ``replace_ttl``); needs a quorum.  Masters that lost the hold meanwhile (a restart) take
        it again when the quorum still has it."""
        hold, command = self.hold_to_extend(additional_time, replace_ttl)
        sent_at, replies = self._everywhere(command)
        repair = self.extended(hold, sent_at, replies)
        if self.auto_renew:  # a shorter deadline must not wait for the watchdog's next look
            _watchdog.sync_watchdog().look_again()
        if repair:
            self._repair(hold.token, repair)
        return True

    def reacquire(self) -> bool:
        """Reset the lease to ``timeout`` on every master (needs a quorum)."""
        self.check_reacquire()
        return self.extend(self.timeout, replace_ttl=True)

    def _repair(self, token: bytes, nodes: list[int]) -> None:
        self._fan_out(self.only(nodes, self.repair_commands(token, threading.current_thread().name)))

    def _renew_many(self, tokens: list[bytes]) -> list[Any]:
        """The watchdog's batch: renew each hold on all masters in one round."""
        _, replies = self._fan_out([self.renewal_commands(tokens)] * len(self.masters))
        outcomes = []
        for offset, token in enumerate(tokens):
            outcome, repair = self.renewal_outcome(replies, offset)
            if repair:
                self._repair(token, repair)
            outcomes.append(outcome)
        return outcomes
