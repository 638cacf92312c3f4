"""The asyncio twin of :class:`django_redis_coord.locks.Lock`, over ``redis.asyncio``.

Same names, arguments and behaviour.  One difference from redis-py's asyncio lock: the hold is
kept per *task* (not per thread), so two tasks sharing one instance never release or extend each
other's hold.  Pass ``thread_local=False`` to share one hold between tasks deliberately.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections import deque
from collections.abc import Awaitable
from types import SimpleNamespace, TracebackType
from typing import Any, Optional, Union

import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import watchdog as _watchdog
from .._base import (
    ACQUIRE_KEYS,
    RELEASE_KEYS,
    Grant,
    LockBase,
    Number,
    QueuedBase,
    as_bytes,
    check_number,
    encode_token,
    new_token,
    to_ms,
)
from .._tasks import in_background, run_to_completion
from ..exceptions import (
    InvalidLockArgument,
    LockError,
    LockLostError,
    LockNotOwnedError,
)
from ..locks import count_in, count_out, lends_links, marked_for_reconnection
from ..scripts import async_scripts

__all__ = ["Lock", "QueuedPrimitive"]

logger = logging.getLogger("django_redis_coord")


def connection_pool_for(client: Any, key: bytes) -> Any:
    """The connection pool of the node that serves ``key`` (plain clients have just one)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return pool
    node = client.get_node_from_key(key)  # redis.asyncio.cluster.RedisCluster
    return node  # a ClusterNode: acquire_connection()/release()


#: Each pool's spare connection (the one of its last release, for its next acquire), by weak
#: reference: the pool keeps it alive (it counts it in use), and a pool whose event loop ended
#: goes away with it (a redis-py connection may refer to its pool: a strong reference here would
#: keep both alive).
_async_spares: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: Connections to give back by the next checkout on their loop, as ``(pool, conn, loop, counted,
#: close)``: links dropped without a release (their holds collected, their tasks ended, released
#: through a sync twin), spares replaced by newer ones, spares whose check was interrupted.
_async_orphans: deque = deque()


async def _quiet(conn: Any) -> bool:
    """Whether nothing waits to be read on ``conn`` (what the pool checks before it hands one out)."""
    if marked_for_reconnection(conn):
        return False
    if not getattr(conn, "is_connected", True):
        return True  # nothing to read on no connection: the next command connects it
    try:
        check = conn.can_read if hasattr(conn, "can_read") else conn.can_read_destructive  # redis-py 8 / 6-7
        return not await check()
    except Exception:  # closed meanwhile: the pool's own checks decide
        return False


def _orphan(pool: Any, conn: Any, loop: Any, counted: bool, close: bool) -> None:
    """Leave ``conn`` to the next checkout on ``loop`` (no await: safe anywhere)."""
    try:
        _async_orphans.append((pool, conn, loop, counted, close))
    except Exception:  # interpreter shutdown
        pass


class AsyncLink:
    """The asyncio form of :class:`django_redis_coord.locks.Link`: a connection of a plain
    ``redis.asyncio.Redis`` client's pool, checked out by one acquire, kept by the hold it grants
    until its release, then kept as the pool's spare for its next acquire (one per pool: an event
    loop runs one task at a time).  Same limits as the sync links.  Nothing that gives a
    connection up waits (so no cancellation can come in between): what needs an await is left to
    the next checkout on the same loop."""

    __slots__ = ("pool", "conn", "loop")

    def __init__(self, pool: Any, conn: Any, loop: Any) -> None:
        self.pool = pool
        self.conn = conn
        self.loop = loop

    @classmethod
    async def checkout(cls, client: Any) -> Optional[AsyncLink]:
        """A connection for one acquire, or ``None`` (other clients and pools, or the limit reached)."""
        if type(client) is not redis.asyncio.Redis or client.single_connection_client:
            return None
        pool = client.connection_pool
        if type(pool) is not redis.asyncio.ConnectionPool or not lends_links(pool):
            return None
        loop = asyncio.get_running_loop()
        if _async_orphans:
            await _give_back_async_orphans(loop)
        if not count_in(pool):
            return None
        spare_ref = _async_spares.pop(pool, None)
        spare = spare_ref() if spare_ref is not None else None
        try:
            if spare is not None:
                if await _quiet(spare):
                    return cls(pool, spare, loop)
                conn, spare = spare, None
                _orphan(pool, conn, loop, False, True)
            return cls(pool, await pool.get_connection(), loop)
        except BaseException:
            count_out(pool)
            if spare is not None:  # its check was interrupted: closed and given back later
                _orphan(pool, spare, loop, False, True)
            raise

    async def for_release(self) -> Any:
        """The kept connection when the release can go out on it, else ``None`` (given back)."""
        conn = self.conn
        if conn is not None and await _quiet(conn):
            return conn
        await self.give_back(closed=True)
        return None

    def done(self) -> None:
        """After a call that left nothing to read: keep the connection as the pool's spare."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        count_out(self.pool)
        older = _spare_of(self.pool)
        _async_spares[self.pool] = weakref.ref(conn)
        if older is not None:
            _orphan(self.pool, older, self.loop, False, False)

    def drop(self) -> None:
        """Give the connection of a hold up from anywhere (a thread, a done callback): the next
        checkout or release on its loop gives it back."""
        conn, self.conn = self.conn, None
        if conn is not None:
            _orphan(self.pool, conn, self.loop, True, False)

    async def give_back(self, closed: bool = False) -> None:
        """Return the connection to the pool (``closed``: close it first)."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        count_out(self.pool)
        if closed:
            await _close_and_release(self.pool, conn)
        else:
            await self.pool.release(conn)

    def __del__(self) -> None:
        if self.conn is not None:  # no await here: the next checkout on its loop gives it back
            _orphan(self.pool, self.conn, self.loop, True, False)


def _spare_of(pool: Any) -> Any:
    """The spare connection kept for ``pool``, or ``None``."""
    ref = _async_spares.get(pool)
    return ref() if ref is not None else None


async def _close_and_release(pool: Any, conn: Any) -> None:
    try:
        await conn.disconnect()
    except Exception:  # a close that timed out: the pool checks the connection before reusing it
        pass
    await pool.release(conn)


async def _give_back_async_orphans(loop: Any) -> None:
    """Give back the orphans of ``loop`` (the running one), forget those of loops that ended and
    leave those of other loops to them.  A clean one (not to be closed) of a pool that has no
    spare becomes its spare instead: a hold released from another thread (``@locked``'s release
    of an async view, run where the response is closed) leaves its connection for the next acquire
    as a release on the loop does."""
    for _ in range(len(_async_orphans)):
        try:
            entry = _async_orphans.popleft()
        except IndexError:
            return
        pool, conn, owner, counted, close = entry
        if owner is loop and not close and _spare_of(pool) is None:
            if counted:
                count_out(pool)
            _async_spares[pool] = weakref.ref(conn)  # checked before use, as every spare
        elif owner is loop:
            try:
                await (_close_and_release(pool, conn) if close else pool.release(conn))
            except Exception:
                pass
            except BaseException:  # cancelled before the pool took it: kept for the next time
                _async_orphans.append(entry)
                raise
            if counted:
                count_out(pool)
        elif owner.is_closed():
            if counted:
                count_out(pool)
        else:
            _async_orphans.append(entry)


async def blocking_pop(client: Any, key: bytes, budget: Optional[float], server_timeout: float,
                       link: Optional[AsyncLink] = None, cancels: int = 0) -> Any:
    """BLPOP ``key`` for at most ``budget`` seconds (``None``: ``server_timeout``), on ``link``'s
    connection when given; see the sync twin."""
    if budget is not None and budget <= 0:
        return None
    if link is not None:
        return await _pop_on(link.conn, key, budget, server_timeout, cancels)
    pool = connection_pool_for(client, key)
    cluster_node = not hasattr(pool, "get_connection")
    conn = pool.acquire_connection() if cluster_node else await pool.get_connection()
    try:
        return await _pop_on(conn, key, budget, server_timeout, cancels)
    finally:
        if cluster_node:
            pool.release(conn)
        else:
            await pool.release(conn)


def _cancels() -> int:
    """How many cancellations of the current task are pending (``Task.cancelling()``, Python
    3.11+; 0 before)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def _cancel_swallowed(before: int) -> None:
    """Raise the ``CancelledError`` of a cancellation requested since ``before`` (see
    :func:`_cancels`) that nothing raised: Python 3.11's ``asyncio.wait_for``, which redis-py sends
    and reads through, swallows one that comes as its call completes.  The task still counts it."""
    if _cancels() > before:
        raise asyncio.CancelledError


async def _pop_on(conn: Any, key: bytes, budget: Optional[float], server_timeout: float, cancels: int = 0) -> Any:
    try:
        wait = server_timeout + 1.0 if budget is None else min(budget, server_timeout + 1.0)
        await conn.send_command("BLPOP", key, server_timeout)
        _cancel_swallowed(cancels)  # a cancelled waiter must not go on waiting
        try:
            reply = await asyncio.wait_for(conn.read_response(), wait)
        except asyncio.TimeoutError:
            await conn.disconnect()
            return None
        _cancel_swallowed(cancels)  # nor take a grant (the caller gives it back)
    except BaseException:
        await conn.disconnect()
        raise
    return None if reply is None else reply[1]


class _TaskLocal:
    """Attribute storage private to the current asyncio task (or to the thread outside a loop)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_by_task", weakref.WeakKeyDictionary())
        object.__setattr__(self, "_outside", SimpleNamespace(token=None))

    def _space(self) -> SimpleNamespace:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is None:
            return object.__getattribute__(self, "_outside")
        by_task = object.__getattribute__(self, "_by_task")
        space = by_task.get(task)
        if space is None:
            space = by_task[task] = SimpleNamespace(token=None)
        return space

    def __getattr__(self, name: str) -> Any:
        return getattr(self._space(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._space(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._space(), name)

    def space(self) -> SimpleNamespace:
        """The namespace of the current task (what the watchdog keeps a reference to)."""
        return self._space()


def _ended_holding(lock_ref: Any, hold: Any, token: bytes, task: asyncio.Future) -> None:
    """A task that took a hold of its own ended without releasing it: nothing can release it any
    more.  Say so, and stop renewing it, so that its TTL ends it."""
    if getattr(hold, "token", None) != token:
        return
    link = LockBase._unpin(hold)
    if link is not None:  # nothing will release on it: the pool gets it back
        link.drop()
    lock = lock_ref()
    if lock is None:
        return
    renewed = getattr(hold, "watched", False)
    if renewed:
        lock._watchdog().unregister(lock, hold)
    logger.warning(
        "The task that acquired lock %r ended without releasing it: no other task can release it, so it "
        "ends with its TTL%s.  Release it in the task that acquired it (asyncio.wait_for() runs the "
        "acquire in a task of its own before Python 3.12), or pass thread_local=False.",
        lock.name,
        " (its renewal was stopped)" if renewed else " (it has none: it stays held)" if lock.timeout is None else "",
    )


class QueuedPrimitive(QueuedBase):
    """The asyncio side of a queued primitive; see :class:`django_redis_coord.locks.QueuedPrimitive`."""

    scripts = async_scripts

    def _watchdog(self) -> Any:
        return _watchdog.async_watchdog()

    @staticmethod
    def _worker() -> str:
        """Who is acquiring, for the holder metadata: the current task's name."""
        task = asyncio.current_task()
        return task.get_name() if task is not None else "asyncio"

    def _after_loss(self, result: Any) -> None:
        if asyncio.iscoroutine(result):
            in_background(result)

    async def _take(self, token: bytes, blocking: bool, stop_at: Optional[float],
                    own: bool = False) -> Optional[tuple[Grant, float, Optional[AsyncLink]]]:
        """Try once and, when ``blocking``, wait in line until ``stop_at``; see the sync twin."""
        worker = self._worker()
        cancels = _cancels()
        link = await AsyncLink.checkout(self.redis)
        sent_at = time.monotonic()
        try:
            grant = await self.do_acquire(token, self.acquire_mode(1 if blocking else 0, own), worker, link)
            _cancel_swallowed(cancels)
        except (asyncio.CancelledError, RedisConnectionError, RedisTimeoutError):
            # The call may have reached Redis and granted (or queued) this token: undo that
            # (best effort when Redis cannot be reached; the TTL and the waiter lease bound it).
            await run_to_completion(self._abandon(token, worker, link))
            raise
        except BaseException:
            if link is not None:
                await run_to_completion(link.give_back())
            raise
        if grant.acquired:
            return grant, sent_at, link
        if blocking:
            try:
                grant, sent_at = await self._wait(token, worker, grant, stop_at, sent_at, own, link, cancels)
            except BaseException:
                # Cancelled or failed while queued: leave the queue (and return a hold just
                # handed over) even though this task is being cancelled.
                await run_to_completion(self._abandon(token, worker, link))
                raise
            if grant.acquired:
                return grant, sent_at, link
        if link is not None:
            link.done()
        return None

    async def _wait(
        self, token: bytes, worker: str, grant: Grant, stop_at: Optional[float], sent_at: float,
        own: bool = False, link: Optional[AsyncLink] = None, cancels: int = 0,
    ) -> tuple[Grant, float]:
        """Wait in the queue until handed the hold, the holder expires or ``stop_at`` passes.

        A hand-off can happen any time after the last queueing call reached Redis (even before
        the BLPOP is sent), so a handed-over hold is measured from that call's send instant.
        """
        queued_at = sent_at
        while True:
            if stop_at is not None and time.monotonic() >= stop_at:
                return await self.do_cancel(token, worker), queued_at
            budget = self.wait_budget(grant, stop_at)
            payload = await blocking_pop(self.redis, self.keys.wake(token), budget, self.refresh_interval, link,
                                         cancels)
            if payload is not None:
                grant = self.woken_grant(payload)
                if grant.acquired:
                    return grant, queued_at
                continue  # told of a new holder's expiry: wait until then
            if stop_at is not None and time.monotonic() >= stop_at:
                return await self.do_cancel(token, worker), queued_at  # no refresh on the way out
            called_at = time.monotonic()
            grant = await self.do_acquire(token, self.acquire_mode(2, own), worker, link)
            if grant.acquired:  # possibly handed over before this call: measure from the one before
                return grant, queued_at
            queued_at = called_at

    async def _abandon(self, token: bytes, worker: str, link: Optional[AsyncLink] = None) -> None:
        """Best effort after an interrupted wait: leave the queue, give back a hold just handed over
        (and ``link``, closed: a reply may be left unread on it)."""
        if link is not None:
            try:
                await link.give_back(closed=True)
            except Exception:
                pass
        try:
            if (await self.do_cancel(token, worker)).acquired:
                await self.do_release(token)
        except Exception:  # the original error matters more; the waiter lease bounds the rest
            pass

    async def _extend_hold(self, hold: Any, ms: int, mode: str) -> bool:
        """Change the expiry of ``hold`` (its ``token`` and local ``deadline``) in Redis."""
        sent_at = time.monotonic()
        hold.deadline = self.deadline_for(sent_at, await self.do_extend(hold.token, ms, mode))
        if getattr(hold, "watched", False):  # a shorter deadline must not wait for the loop's next look
            self._watchdog().look_again()
        return True

    async def do_acquire(self, token: bytes, enqueue: int, worker: str, link: Optional[AsyncLink] = None) -> Grant:
        script = self.scripts.get(self.redis, self.acquire_script)
        if link is not None:
            reply = await script.run_on(link.conn, self.redis, self.encoded_parts().acquire_count, ACQUIRE_KEYS,
                                        self.acquire_encoded(token, enqueue, worker))
        else:
            reply = await script(self.acquire_keys(token), self.acquire_args(token, enqueue, worker),
                                 client=self.redis, encoded=self.acquire_encoded(token, enqueue, worker))
        return self.grant_from_reply(reply)

    async def do_cancel(self, token: bytes, worker: str) -> Grant:
        script = self.scripts.get(self.redis, self.cancel_script)
        reply = await script(self.acquire_keys(token), self.acquire_args(token, 2, worker), client=self.redis)
        return Grant.from_reply(reply)

    async def do_release(self, token: bytes) -> Any:
        raise NotImplementedError

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        raise NotImplementedError


class Lock(QueuedPrimitive, LockBase):
    """Asyncio distributed lock with fencing tokens, FIFO waiting and an explicit loss signal."""

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local: Any = self._new_local()

    def _new_local(self) -> Any:
        return _TaskLocal() if self.thread_local else SimpleNamespace(token=None)

    def _state(self) -> Any:
        local = self.local
        return local.space() if isinstance(local, _TaskLocal) else local

    def _own(self, token: bytes, grant: Grant, sent_at: float) -> None:
        super()._own(token, grant, sent_at)
        task = asyncio.current_task() if isinstance(self.local, _TaskLocal) else None
        if task is not None:  # a hold of this task only: nobody else can release it
            hold = self._state()
            callback = functools.partial(_ended_holding, weakref.ref(self), hold, token)
            task.add_done_callback(callback)
            hold.task_end = (task, callback)  # removed on release (a long-lived task acquires many times)

    async def __aenter__(self) -> Lock:
        if await self.acquire():
            return self
        raise self.timed_out()

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError:
            self.release_failed()

    async def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock; see :meth:`django_redis_coord.locks.Lock.acquire`."""
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
        taken = await self._take(token, blocking, stop_at, own)
        if taken is None:
            return False
        grant, sent_at, link = taken
        self._own(token, grant, sent_at)
        if link is not None:
            self._state().link = link  # for the release (see AsyncLink)
        return True

    async def locked(self) -> bool:
        return await self.redis.get(self.name) is not None

    async def owned(self) -> bool:
        token = self._state().token
        if token is None:
            return False
        return as_bytes(await self.redis.get(self.name)) == token

    async def release(self) -> None:
        local = self._state()
        token = local.token
        if token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        if self.reentrant and getattr(local, "count", 1) > 1:
            local.count -= 1
            return
        lost = getattr(local, "lost", False)
        # Once asked, the release completes even if this task is cancelled meanwhile (a client
        # going away under ASGI): otherwise the lock would stay held, renewed by nobody.
        await run_to_completion(self._release_call())
        if lost:
            raise LockLostError("The lock was lost before it was released", lock_name=self.name)

    def _release_call(self) -> Awaitable[None]:
        """Stop renewing this task's hold and return the call that releases it; that call needs
        nothing from the task, so it can finish in another one (see :func:`run_to_completion`)."""
        local = self._state()
        self._detach(local)
        return self._release_hold(local, local.token, self._unpin(local), getattr(local, "fence", None))

    def _detach(self, local: Any) -> None:
        """Take the hold ``local`` out of the watchdog and off its task's end (before it is released)."""
        if getattr(local, "watched", False):
            self._watchdog().unregister(self, local)
        task_end = getattr(local, "task_end", None)
        if task_end is not None:
            local.task_end = None
            task_end[0].remove_done_callback(task_end[1])

    async def _release_hold(self, local: Any, token: bytes, link: Optional[AsyncLink] = None,
                            fence: Optional[int] = None) -> None:
        try:
            await self.do_release(token, link)
        except LockNotOwnedError:
            if self._still_holding(local, token, fence):
                self._forget_hold(local)
                self._mark_lost(local)  # found here before the watchdog did: on_lost still fires once
            raise
        if self._still_holding(local, token, fence):
            self._forget_hold(local)

    async def do_release(self, token: bytes, link: Optional[AsyncLink] = None) -> None:
        script = self.scripts.get(self.redis, "lock_release")
        conn = await link.for_release() if link is not None else None
        if conn is not None:
            try:
                reply = await script.run_on(conn, self.redis, self.encoded_parts().release_count, RELEASE_KEYS,
                                            self.release_encoded(token))
            except BaseException:
                await link.give_back()  # type: ignore[union-attr]
                raise
            link.done()  # type: ignore[union-attr]
            if _async_orphans:  # this release runs to its end (see release): a good time for them
                await _give_back_async_orphans(asyncio.get_running_loop())
        else:
            reply = await script(self.release_keys(), self.release_args(token), client=self.redis,
                                 encoded=self.release_encoded(token))
        if int(reply) != 1:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        local = self._state()
        if local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        self.check_extendable("extend")
        return await self._extend_hold(local, to_ms(additional_time), "replace" if replace_ttl else "add")

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "lock_extend")
        pttl = int(await script(self.extend_keys(), self.extend_args(token, ms, mode), client=self.redis))
        if pttl == -2:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        return pttl

    async def reacquire(self) -> bool:
        local = self._state()
        if local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        self.check_extendable("reacquire")
        return await self._extend_hold(local, self._ttl_ms, "replace")
