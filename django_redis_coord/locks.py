"""The fenced Redis lock (sync), a drop-in superset of :class:`redis.lock.Lock`.

* Acquire, release, extend and reacquire are one Lua script each (one round trip).
* Every grant carries a fence token (``lock.fence``) that is strictly greater than any fence
  issued before for the same name, even after the server restarted without persistence.
* A blocking ``acquire`` never polls: it joins a FIFO queue and blocks on its own wake list;
  the releasing script grants the lock to the queue head server-side.  A waiter also looks
  again when the holder's TTL runs out, so a crashed holder is replaced promptly.
* Optional watchdog renewal, an explicit loss signal and reentrancy.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections import deque
from types import TracebackType
from typing import Any, Optional, Union

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import watchdog as _watchdog
from ._base import (
    ACQUIRE_KEYS,
    RELEASE_KEYS,
    Grant,
    LockBase,
    Number,
    QueuedBase,
    SharedHold,
    ThreadHold,
    as_bytes,
    check_number,
    encode_token,
    new_token,
    to_ms,
)
from .exceptions import (
    InvalidLockArgument,
    LockError,
    LockLostError,
    LockNotOwnedError,
)
from .scripts import sync_scripts

__all__ = ["Lock", "QueuedPrimitive"]

#: How many links (see :class:`Link`) may be out per connection pool and process, and at most an
#: eighth of the pool's ``max_connections``.
PINNED_PER_POOL = 16
#: Links are used only on pools allowed at least this many connections (redis-py's default is
#: 100): a pool sized to its threads must not run out because holds and threads keep theirs.
LINKS_MIN_MAX_CONNECTIONS = 64

_pins_lock = threading.Lock()
_pinned: dict[int, int] = {}
#: Each thread's spare link (``.link``): the connection of its last release, for its next acquire.
_spare = threading.local()
#: Kept connections of holds dropped without a release, given back by the next checkout.
_orphans: deque = deque()


def _after_fork_in_child() -> None:
    """In a forked child: the parent's kept connections are not this process's to give back."""
    global _pins_lock
    _pins_lock = threading.Lock()
    _pinned.clear()
    _orphans.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def lends_links(pool: Any) -> bool:
    """Whether a pool (of the plain kind) may lend kept connections: one allowed at least
    :data:`LINKS_MIN_MAX_CONNECTIONS` connections."""
    return bool(pool.max_connections >= LINKS_MIN_MAX_CONNECTIONS)


def marked_for_reconnection(conn: Any) -> bool:
    """Whether redis-py marked ``conn`` to be reconnected (a maintenance notification): the pool
    closes such a connection when it comes back, which a kept one does not."""
    marked = getattr(conn, "should_reconnect", None)  # redis-py 8
    return bool(marked is not None and marked())


def _quiet(conn: Any) -> bool:
    """Whether nothing waits to be read on the socket of ``conn`` (no reply, no end of stream):
    one ``poll``.  A connection is only kept after its last reply was read in full, so its
    parser holds nothing either."""
    if marked_for_reconnection(conn):
        return False
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return True  # not connected: writing connects it
    try:
        if _poll is None:  # no poll(): select(), for descriptors below FD_SETSIZE
            return not select.select((sock,), (), (), 0)[0]
        watch = _poll()
        watch.register(sock, select.POLLIN)
        return not watch.poll(0)
    except (OSError, ValueError):  # closed meanwhile, or select() cannot watch it
        return False


_poll = getattr(select, "poll", None)


def count_in(pool: Any) -> bool:
    """Count one more link (sync or asyncio) out of ``pool``, unless as many as allowed are out:
    :data:`PINNED_PER_POOL`, and an eighth of its ``max_connections``."""
    with _pins_lock:
        count = _pinned.get(id(pool), 0)
        if count >= min(PINNED_PER_POOL, pool.max_connections // 8):
            return False
        _pinned[id(pool)] = count + 1
        return True


def count_out(pool: Any) -> None:
    """One link of ``pool`` fewer out (see :func:`count_in`)."""
    with _pins_lock:
        count = _pinned.pop(id(pool), 0) - 1
        if count > 0:
            _pinned[id(pool)] = count


def _give_back_orphans() -> None:
    while _orphans:
        try:
            pool, conn, pid = _orphans.popleft()
        except IndexError:  # another thread took the last one
            return
        if pid == os.getpid():
            count_out(pool)
            pool.release(conn)


class Link:
    """A connection of a plain client's pool, checked out by one acquire and kept, once granted,
    by the hold until its release.

    redis-py's pool checkout and give-back cost more client time than the scripts they carry, and a
    lock's hand-off waits for the releasing holder's client code before its script and for the
    next holder's after its wake-up (and, on a machine with few cores, for the CPU the releasing
    process spends after its release).  So a blocking acquire waits (BLPOP) on the connection its
    attempt went out on, the hold keeps that connection and the release is written at once; the
    thread then keeps it as its spare for its next acquire (one spare per thread, the latest).
    At most :data:`PINNED_PER_POOL` links per pool (an eighth of its ``max_connections``) are out
    (beyond that, calls use the pool each time, as before); a hold dropped without a release, or
    the spare of a thread that ended, goes back at the next acquire or release in the process; a
    connection with something to read (closed by the server, say), or that redis-py marked for
    reconnection, is not written on: the release goes through the pool.  Only for a plain
    ``redis.Redis`` client on a plain ``redis.ConnectionPool`` allowed at least
    :data:`LINKS_MIN_MAX_CONNECTIONS` connections (what the short path of the scripts serves,
    with redis-py's default size): any other client or pool keeps its own way of picking
    connections.  The asyncio twin is :class:`django_redis_coord.asyncio.lock.AsyncLink`.
    """

    __slots__ = ("pool", "conn", "pid")

    def __init__(self, pool: Any, conn: Any) -> None:
        self.pool = pool
        self.conn = conn
        self.pid = os.getpid()

    @classmethod
    def checkout(cls, client: Any) -> Optional[Link]:
        """A connection of ``client``'s pool for one acquire, or ``None`` for other kinds of client
        and when :data:`PINNED_PER_POOL` links of the pool are out (counted from here, so that the
        hold just granted has nothing left to count)."""
        if type(client) is not redis.Redis or client.connection is not None:
            return None
        pool = client.connection_pool
        if type(pool) is not redis.ConnectionPool or not lends_links(pool):
            return None
        if _orphans:
            _give_back_orphans()
        spare = getattr(_spare, "link", None)
        if spare is not None and spare.pool is pool:
            _spare.link = None
            if spare.pid == os.getpid() and _quiet(spare.conn):
                return spare  # counted already
            spare.give_back(closed=True)  # something to read on it (or another process's)
        if not count_in(pool):
            return None
        try:
            conn = pool.get_connection()
        except BaseException:
            count_out(pool)
            raise
        return cls(pool, conn)

    def for_release(self) -> Any:
        """The kept connection when the release can go out on it, else ``None`` (given back: the
        release goes through the pool).  As the pool does before it hands out a connection, one
        with something to read (the server closed it, say) is not written on."""
        conn = self.conn
        if self.pid == os.getpid() and _quiet(conn):
            return conn
        self.give_back(closed=True)
        return None

    def done(self) -> None:
        """After a call that left nothing to read on this link: keep it as the thread's spare for
        its next acquire (a pool checkout and give-back fewer), in place of an older spare."""
        if self.conn is None or self.pid != os.getpid():
            self.give_back()
            return
        older = getattr(_spare, "link", None)
        _spare.link = self
        if older is not None:
            older.give_back()
        if _orphans:
            _give_back_orphans()

    def give_back(self, closed: bool = False) -> None:
        """Return the connection to the pool (``closed``: close it first, it is not to be trusted)."""
        conn, self.conn = self.conn, None
        if conn is None or self.pid != os.getpid():
            return
        if closed:
            conn.disconnect()
        count_out(self.pool)
        self.pool.release(conn)

    def __del__(self) -> None:
        # No lock may be taken here (the garbage collector can run this anywhere): the next
        # checkout gives the connection back.
        if self.conn is not None:
            try:
                _orphans.append((self.pool, self.conn, self.pid))
            except Exception:  # interpreter shutdown: nothing left to give it back to
                pass


def connection_pool_for(client: Any, key: bytes) -> Any:
    """The connection pool of the node that serves ``key`` (plain clients have just one)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return pool
    node = client.get_node_from_key(key)  # redis.cluster.RedisCluster
    return client.get_redis_connection(node).connection_pool


def blocking_pop(client: Any, key: bytes, budget: Optional[float], server_timeout: float,
                 link: Optional[Link] = None) -> Any:
    """BLPOP ``key`` for at most ``budget`` seconds (``None``: ``server_timeout``), on ``link``'s
    connection when given (else on one of the pool's).

    The server's own BLPOP timeout can fire up to one ``hz`` tick (100 ms by default, Redis 6)
    late, so the budget is kept on the client: when it runs out first, the connection is dropped,
    which unblocks the server side.  Returns the popped value or ``None``.
    """
    if budget is not None and budget <= 0:
        return None
    if link is not None:
        return _pop_on(link.conn, key, budget, server_timeout)
    pool = connection_pool_for(client, key)
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py < 6 needs a command name
        conn = pool.get_connection("BLPOP")
    try:
        return _pop_on(conn, key, budget, server_timeout)
    finally:
        pool.release(conn)


def _pop_on(conn: Any, key: bytes, budget: Optional[float], server_timeout: float) -> Any:
    """BLPOP on ``conn`` (see :func:`blocking_pop`); the connection is closed when the wait ends
    without its reply read (the client-side deadline, an error, an interruption)."""
    try:
        wait = server_timeout + 1.0 if budget is None else min(budget, server_timeout + 1.0)
        conn.send_command("BLPOP", key, server_timeout)
        if not conn.can_read(timeout=wait):
            conn.disconnect()
            return None
        reply = conn.read_response()
    except BaseException:
        conn.disconnect()
        raise
    return None if reply is None else reply[1]


class QueuedPrimitive(QueuedBase):
    """The sync side of a queued primitive: one acquire attempt, and the wait in line after it.

    Subclasses name their scripts (see :class:`~django_redis_coord._base.QueuedBase`); the asyncio
    twin in :mod:`django_redis_coord.asyncio.lock` has the same names and shape.
    """

    scripts = sync_scripts

    def _watchdog(self) -> Any:
        return _watchdog.sync_watchdog()

    @staticmethod
    def _worker() -> str:
        """Who is acquiring, for the holder metadata: the current thread's name."""
        return threading.current_thread().name

    def _take(self, token: bytes, blocking: bool, stop_at: Optional[float],
              own: bool = False) -> Optional[tuple[Grant, float, Optional[Link]]]:
        """Try once and, when ``blocking``, wait in line until ``stop_at``.

        Returns the grant, the instant its hold is measured from and the :class:`Link` it came on
        (``None`` for clients that have none; the caller keeps or gives it back), or ``None`` when
        not granted.
        """
        worker = self._worker()
        link = Link.checkout(self.redis)
        sent_at = time.monotonic()
        try:
            grant = self.do_acquire(token, self.acquire_mode(1 if blocking else 0, own), worker, link)
        except BaseException as exc:
            if link is not None:
                link.give_back()
            # Interrupted, or no reply read (a timeout, a connection lost): the call may have
            # reached Redis and granted (or queued) this token.  Undo that, best effort when Redis
            # cannot be reached (the TTL and the waiter lease bound it).
            if not isinstance(exc, Exception) or isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
                self._abandon(token, worker)
            raise
        if grant.acquired:
            return grant, sent_at, link
        if blocking:
            try:
                grant, sent_at = self._wait(token, worker, grant, stop_at, sent_at, own, link)
            except BaseException:
                if link is not None:
                    link.give_back()
                self._abandon(token, worker)
                raise
            if grant.acquired:
                return grant, sent_at, link
        if link is not None:
            link.done()
        return None

    def _wait(
        self, token: bytes, worker: str, grant: Grant, stop_at: Optional[float], sent_at: float,
        own: bool = False, link: Optional[Link] = None,
    ) -> tuple[Grant, float]:
        """Wait in the queue until handed the hold, the holder expires or ``stop_at`` passes.

        A hand-off can happen any time after the last queueing call reached Redis (even before
        the BLPOP is sent), so a handed-over hold is measured from that call's send instant.
        """
        queued_at = sent_at
        while True:
            if stop_at is not None and time.monotonic() >= stop_at:
                return self.do_cancel(token, worker), queued_at
            budget = self.wait_budget(grant, stop_at)
            payload = blocking_pop(self.redis, self.keys.wake(token), budget, self.refresh_interval, link)
            if payload is not None:
                grant = self.woken_grant(payload)
                if grant.acquired:
                    return grant, queued_at
                continue  # told of a new holder's expiry: wait until then
            if stop_at is not None and time.monotonic() >= stop_at:
                return self.do_cancel(token, worker), queued_at  # no refresh on the way out
            called_at = time.monotonic()
            grant = self.do_acquire(token, self.acquire_mode(2, own), worker, link)
            if grant.acquired:  # possibly handed over before this call: measure from the one before
                return grant, queued_at
            queued_at = called_at

    def _abandon(self, token: bytes, worker: str) -> None:
        """Best effort after an interrupted wait: leave the queue, give back a hold just handed over."""
        try:
            if self.do_cancel(token, worker).acquired:
                self.do_release(token)
        except Exception:  # the original error matters more; the waiter lease bounds the rest
            pass

    def _extend_hold(self, hold: Any, ms: int, mode: str) -> bool:
        """Change the expiry of ``hold`` (its ``token`` and local ``deadline``) in Redis."""
        sent_at = time.monotonic()
        hold.deadline = self.deadline_for(sent_at, self.do_extend(hold.token, ms, mode))
        if getattr(hold, "watched", False):  # a shorter deadline must not wait for the loop's next look
            self._watchdog().look_again()
        return True

    def do_acquire(self, token: bytes, enqueue: int, worker: str, link: Optional[Link] = None) -> Grant:
        script = self.scripts.get(self.redis, self.acquire_script)
        if link is not None:
            reply = script.run_on(link.conn, self.redis, self.encoded_parts().acquire_count, ACQUIRE_KEYS,
                                  self.acquire_encoded(token, enqueue, worker))
        else:
            reply = script(self.acquire_keys(token), self.acquire_args(token, enqueue, worker), client=self.redis,
                           encoded=self.acquire_encoded(token, enqueue, worker))
        return self.grant_from_reply(reply)

    def do_cancel(self, token: bytes, worker: str) -> Grant:
        script = self.scripts.get(self.redis, self.cancel_script)
        reply = script(self.acquire_keys(token), self.acquire_args(token, 2, worker), client=self.redis)
        return Grant.from_reply(reply)

    def do_release(self, token: bytes) -> Any:
        raise NotImplementedError

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        raise NotImplementedError


class Lock(QueuedPrimitive, LockBase):
    """A distributed lock with fencing tokens, FIFO waiting and an explicit loss signal.

    Takes redis-py's arguments (``timeout=None`` means no expiry, ``sleep`` is accepted for
    compatibility: waiting does not poll) plus, keyword-only: ``label`` (shown to operators),
    ``auto_renew`` (watchdog renewal at ``timeout / 3``), ``on_lost`` (called with the lock when
    a hold is found lost), ``reentrant`` and ``waiter_lease``.
    """

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local = self._new_local()

    def _new_local(self) -> Any:
        return ThreadHold() if self.thread_local else SharedHold()

    # -- local state (per thread unless thread_local=False) --------------------------------
    def _state(self) -> Any:
        """This thread's hold: token, fence, deadline, count, lost (the watchdog updates it)."""
        return self.local.hold

    # -- context manager ---------------------------------------------------------------------
    def __enter__(self) -> Lock:
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

    # -- public API ----------------------------------------------------------------------------
    def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock; returns True once held, False when ``blocking`` is off or time ran out.

        A blocking call queues in FIFO order and is woken by the releasing holder, or when the
        holder's TTL ends, or at ``blocking_timeout`` (honoured on the client's monotonic clock).
        """
        if sleep is not None:
            check_number("sleep", sleep, allow_none=False, positive=False, lock_name=self.name)
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        local = self._state()
        if self.reentrant and local.token is not None and getattr(local, "count", 0) > 0:
            if token is not None and encode_token(token, self.name) != local.token:
                raise InvalidLockArgument("a reentrant hold keeps its first token", lock_name=self.name)
            if not self.valid:  # its TTL ran out, or the watchdog found it gone: nothing to join
                raise LockLostError("The hold this re-entry would join was lost", lock_name=self.name)
            local.count += 1
            return True
        own = token is None  # made here for this call: Redis can tell a resend of it (see _take)
        token = new_token() if token is None else encode_token(token, self.name)
        taken = self._take(token, blocking, stop_at, own)
        if taken is None:
            return False
        grant, sent_at, link = taken
        self._own(token, grant, sent_at)
        if link is not None:
            local.link = link  # for the release (see Link)
        return True

    def locked(self) -> bool:
        """True when anyone holds the lock."""
        return self.redis.get(self.name) is not None

    def owned(self) -> bool:
        """True when the lock is held with this thread's token (checked in Redis)."""
        token = self._state().token
        if token is None:
            return False
        return as_bytes(self.redis.get(self.name)) == token

    def release(self) -> None:
        """Release the lock (the outermost hold, for a reentrant lock); raises if not held."""
        local = self._state()
        token = local.token
        if token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        if self.reentrant and getattr(local, "count", 1) > 1:
            local.count -= 1
            return
        lost = getattr(local, "lost", False)
        fence = getattr(local, "fence", None)
        if getattr(local, "watched", False):
            self._watchdog().unregister(self, local)
        # Keep the token until Redis answered: a connection error must leave a way to retry.
        try:
            self.do_release(token, self._unpin(local))
        except LockNotOwnedError:
            if self._still_holding(local, token, fence):
                self._forget_hold(local)
                self._mark_lost(local)  # found here before the watchdog did: on_lost still fires once
            raise
        if self._still_holding(local, token, fence):
            self._forget_hold(local)
        if lost:
            raise LockLostError("The lock was lost before it was released", lock_name=self.name)

    def do_release(self, token: bytes, link: Optional[Link] = None) -> None:
        script = self.scripts.get(self.redis, "lock_release")
        conn = link.for_release() if link is not None else None
        if conn is not None:
            try:
                reply = script.run_on(conn, self.redis, self.encoded_parts().release_count, RELEASE_KEYS,
                                      self.release_encoded(token))
            except BaseException:
                link.give_back()  # type: ignore[union-attr]
                raise
            link.done()  # type: ignore[union-attr]
        else:
            reply = script(self.release_keys(), self.release_args(token), client=self.redis,
                           encoded=self.release_encoded(token))
        if int(reply) != 1:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the remaining TTL (or set it, with ``replace_ttl``)."""
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        local = self._state()
        if local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        self.check_extendable("extend")
        return self._extend_hold(local, to_ms(additional_time), "replace" if replace_ttl else "add")

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "lock_extend")
        pttl = int(script(self.extend_keys(), self.extend_args(token, ms, mode), client=self.redis))
        if pttl == -2:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        return pttl

    def reacquire(self) -> bool:
        """Reset the TTL to ``timeout``."""
        local = self._state()
        if local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        self.check_extendable("reacquire")
        return self._extend_hold(local, self._ttl_ms, "replace")

    def do_reacquire(self) -> bool:
        return self.reacquire()
