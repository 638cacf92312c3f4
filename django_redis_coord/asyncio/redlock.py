"""The asyncio twin of :class:`django_redis_coord.redlock.Redlock`, over ``redis.asyncio`` clients.

>>> from redis.asyncio import Redis                               # doctest: +SKIP
>>> from django_redis_coord.asyncio import Redlock
>>> masters = [Redis(port=p) for p in (6379, 6380, 6381)]
>>> async with Redlock(masters, "invoices:close-month", timeout=30) as lock:
...     await close_month(fence=lock.fence)

Same names, arguments and behaviour.  One round goes to all masters at once with
``asyncio.gather``; each master's exchange is bounded by ``node_timeout``.  A hold belongs to the
asyncio task that acquired it (``thread_local=False`` shares it between tasks).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from collections import deque
from collections.abc import Sequence
from types import SimpleNamespace, TracebackType
from typing import Any, Optional, Union

from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .. import watchdog as _watchdog
from .._base import Number, as_bytes, check_number, encode_token, new_token, to_ms
from .._redlock_base import Command, NoBackoff, QuorumUnavailable, RedlockBase, SharedHold, pack
from ..exceptions import LockAcquireTimeout, LockError, LockLostError, LockNotOwnedError

__all__ = ["Redlock", "QuorumUnavailable"]

logger = logging.getLogger("django_redis_coord")


class _Link:
    """Dedicated asyncio connections to one master (for one event loop), no retries."""

    def __init__(self, pool: Any, node_timeout: float) -> None:
        self.connection_class = pool.connection_class
        kwargs = dict(pool.connection_kwargs)
        kwargs["retry"] = Retry(NoBackoff(), 0)  # type: ignore[arg-type]
        # Every exchange runs under asyncio.wait_for(node_timeout): no per-socket timers needed.
        kwargs["socket_timeout"] = None
        if "host" in kwargs or "connection_pool" in kwargs:
            kwargs["socket_connect_timeout"] = node_timeout
        self.kwargs = kwargs
        self.idle: deque[Any] = deque()

    async def take(self) -> Optional[Any]:
        while self.idle:
            conn = self.idle.pop()
            check = conn.can_read if hasattr(conn, "can_read") else conn.can_read_destructive
            try:
                if not await check():
                    return conn
            except Exception:
                pass
            await conn.disconnect(nowait=True)
        return None

    async def open(self) -> Any:
        conn = self.connection_class(**self.kwargs)
        await conn.connect()
        return conn


_links: weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary[Any, dict[float, _Link]]] = (
    weakref.WeakKeyDictionary()
)


def _links_for(masters: Sequence[Any], node_timeout: float) -> list[_Link]:
    by_pool = _links.get(asyncio.get_running_loop())
    if by_pool is None:
        by_pool = _links[asyncio.get_running_loop()] = weakref.WeakKeyDictionary()
    links = []
    for master in masters:
        pool = master.connection_pool
        by_timeout = by_pool.get(pool)
        if by_timeout is None:
            by_timeout = by_pool[pool] = {}
        link = by_timeout.get(node_timeout)
        if link is None:
            link = by_timeout[node_timeout] = _Link(pool, node_timeout)
        links.append(link)
    return links


async def _exchange(link: _Link, batch: Sequence[Command], packed: bytes) -> list[Any]:
    conn = await link.take()
    if conn is None:
        # A new connection may reach a new (or restarted) server: send the scripts' text, which
        # also caches them there, instead of their SHA1 digests.
        packed = pack([command.fallback or command.args for command in batch])
        conn = await link.open()
    try:
        await conn.send_packed_command([packed], check_health=False)
        replies: list[Any] = []
        for _ in batch:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
        retry = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError) and batch[i].fallback]
        if retry:
            await conn.send_packed_command([pack([batch[i].fallback for i in retry])], check_health=False)  # type: ignore[misc]
            for index in retry:
                try:
                    replies[index] = await conn.read_response()
                except ResponseError as exc:
                    replies[index] = exc
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    link.idle.append(conn)
    return replies


async def _one_master(link: _Link, batch: Sequence[Command], packed: bytes, deadline: float, where: str) -> list[Any]:
    try:
        return await asyncio.wait_for(_exchange(link, batch, packed), max(0.0, deadline - time.monotonic()))
    except asyncio.TimeoutError:
        return [RedisTimeoutError(f"{where} did not answer in time")] * len(batch)
    except Exception as exc:
        return [exc] * len(batch)


async def fan_out(
    links: Sequence[_Link], batches: Sequence[Sequence[Command]], node_timeout: float, names: Sequence[str]
) -> tuple[float, list[list[Any]]]:
    """Send ``batches[i]`` to master ``i`` for all masters at once; see the sync ``fan_out``."""
    started = time.monotonic()
    deadline = started + node_timeout
    packed: dict[int, bytes] = {}
    calls = []
    for link, batch, where in zip(links, batches, names):
        if not batch:
            calls.append(_nothing())
            continue
        data = packed.get(id(batch))
        if data is None:
            data = packed[id(batch)] = pack([command.args for command in batch])
        calls.append(_one_master(link, batch, data, deadline, where))
    return started, list(await asyncio.gather(*calls))


async def _nothing() -> list[Any]:
    return []


class _TaskHold:
    """Hold state private to the current asyncio task (or the thread, outside a loop)."""

    def __init__(self) -> None:
        self._by_task: weakref.WeakKeyDictionary[Any, SimpleNamespace] = weakref.WeakKeyDictionary()
        self._outside = SimpleNamespace(token=None, fence=None, deadline=0.0, lost=False)

    @property
    def hold(self) -> SimpleNamespace:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is None:
            return self._outside
        hold = self._by_task.get(task)
        if hold is None:
            hold = self._by_task[task] = SimpleNamespace(token=None, fence=None, deadline=0.0, lost=False)
        return hold

    @property
    def token(self) -> Optional[bytes]:
        return self.hold.token


class _RenewalBatch:
    def __init__(self, owner: Redlock) -> None:
        self.owner = owner
        self.tokens: list[bytes] = []

    def add(self, token: bytes) -> None:
        self.tokens.append(token)

    async def execute(self, raise_on_error: bool = False) -> list[Any]:
        return await self.owner._renew_many(self.tokens)


class _QuorumClient:
    """``owner.redis`` as the asyncio watchdog sees it."""

    def __init__(self, owner: Redlock) -> None:
        self._owner = weakref.proxy(owner)

    def pipeline(self, transaction: bool = False) -> _RenewalBatch:
        return _RenewalBatch(self._owner)  # type: ignore[arg-type]


class Redlock(RedlockBase):
    """Asyncio Redlock over ``redis.asyncio.Redis`` masters; see :class:`django_redis_coord.Redlock`."""

    def __init__(self, masters: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(masters, name, *args, **kwargs)
        self.local: Any = _TaskHold() if self.thread_local else SharedHold()
        self._names = [self.describe(index) for index in range(len(self.masters))]
        self.redis = _QuorumClient(self)

    async def _fan_out(self, batches: Sequence[Sequence[Command]]) -> tuple[float, list[list[Any]]]:
        links = _links_for(self.masters, self.node_timeout)
        return await fan_out(links, batches, self.node_timeout, self._names)

    async def _everywhere(self, command: Command) -> tuple[float, list[Any]]:
        started, replies = await self._fan_out([[command]] * len(self.masters))
        return started, [reply[0] for reply in replies]

    async def __aenter__(self) -> Redlock:
        if await self.acquire():
            return self
        raise LockAcquireTimeout("Unable to acquire lock within the time specified", lock_name=self.name)

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning("Redlock %r was no longer owned when exiting the context manager.", self.name)

    async def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock on a quorum of masters; see :meth:`django_redis_coord.Redlock.acquire`."""
        if sleep is None:
            sleep = self.sleep
        check_number("sleep", sleep, allow_none=False, positive=False, lock_name=self.name)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=self.name)
        if self.thread_local and self._state().token is not None:
            raise LockError("This task already holds this Redlock; release it first", lock_name=self.name)
        token = encode_token(token, self.name) if token is not None else new_token()
        stop_at = time.monotonic() + blocking_timeout if blocking and blocking_timeout is not None else None
        task = asyncio.current_task()
        worker = task.get_name() if task is not None else "asyncio"
        while True:
            try:
                hint = await self._attempt(token, worker)
            except asyncio.CancelledError:
                # Give back whatever this attempt may have been granted, then stop.
                await asyncio.shield(asyncio.ensure_future(self._undo(token, set())))
                raise
            if hint is True:
                return True
            if not blocking:
                return False
            delay = random.uniform(0.0, sleep)
            if hint is not None:
                delay = min(delay, hint + 0.001)
            if stop_at is not None:
                remaining = stop_at - time.monotonic()
                if remaining <= 0:
                    return False
                delay = min(delay, remaining)
            await asyncio.sleep(delay)

    async def _attempt(self, token: bytes, worker: str) -> Union[bool, float, None]:
        n = len(self.masters)
        started, replies = await self._everywhere(self.acquire_command(token, worker))
        tally = self.tally(replies, self.accept_grant, range(n))
        if len(tally.ok) >= self.quorum:
            fence = max(grant.fence for grant in tally.ok.values())
            lagging = [i for i, grant in tally.ok.items() if grant.fence < fence]
            synced = [i for i in tally.ok if i not in lagging]
            if lagging:
                sync = [self.fence_command(token, fence)]
                _, sync_replies = await self._fan_out([sync if i in lagging else [] for i in range(n)])
                synced += [i for i in lagging if not isinstance(sync_replies[i][0], BaseException)
                           and int(sync_replies[i][0]) == 1]
            if len(synced) >= self.quorum:
                deadline = self.quorum_deadline(started, [tally.ok[i].pttl for i in synced])
                if deadline > time.monotonic():
                    hold = self._own(token, fence, deadline)
                    if self.auto_renew:
                        _watchdog.async_watchdog().register(self, hold, token)
                    return True
        await self._undo(token, set(tally.refused))
        if len(tally.failures) > n - self.quorum:
            raise self.unreachable(tally.failures, "acquire")
        return self.holder_hint(tally.refused)

    async def _undo(self, token: bytes, skip: set[int]) -> None:
        """Release an attempt everywhere it may have been granted (all masters but ``skip``)."""
        release = [self.release_command(token)]
        undo = [release if i not in skip else [] for i in range(len(self.masters))]
        if any(undo):
            await self._fan_out(undo)

    async def _tokens(self, action: str) -> list[Optional[bytes]]:
        _, replies = await self._everywhere(self.get_command())
        failures = {i: reply for i, reply in enumerate(replies) if isinstance(reply, BaseException)}
        if len(failures) > len(self.masters) - self.quorum:
            raise self.unreachable(failures, action)
        return [None if isinstance(reply, BaseException) else as_bytes(reply) for reply in replies]

    async def locked(self) -> bool:
        tokens = [token for token in await self._tokens("check the lock") if token is not None]
        return any(tokens.count(token) >= self.quorum for token in set(tokens))

    async def owned(self) -> bool:
        token = self._state().token
        if token is None:
            return False
        return (await self._tokens("check the lock")).count(token) >= self.quorum

    def ensure_valid(self) -> None:
        if not self.valid:
            raise LockLostError("The Redlock is no longer held", lock_name=self.name)

    def _mark_lost(self, hold: SimpleNamespace) -> None:
        if hold.lost:
            return
        hold.lost = True
        callback = self.on_lost
        if callback is not None:
            result = callback(self)
            if asyncio.iscoroutine(result):
                asyncio.ensure_future(result)

    async def release(self) -> None:
        hold = self._state()
        token = hold.token
        if token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        if self.auto_renew:
            _watchdog.async_watchdog().unregister(self, hold)
        _, replies = await self._everywhere(self.release_command(token))
        tally = self.tally(replies, self.accept_one, range(len(self.masters)))
        lost = hold.lost
        if len(tally.ok) < self.quorum and len(tally.ok) + len(tally.failures) >= self.quorum:
            raise self.unreachable(tally.failures, "release")
        self._forget(hold)
        if len(tally.ok) < self.quorum:
            raise LockNotOwnedError("Cannot release a Redlock that's no longer owned", lock_name=self.name)
        if lost:
            raise LockLostError("The Redlock was lost before it was released", lock_name=self.name)

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        hold = self._state()
        token = hold.token
        if token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        mode = "replace" if replace_ttl else "add"
        sent_at, replies = await self._everywhere(self.extend_command(token, to_ms(additional_time), mode))
        tally = self.tally(replies, self.accept_pttl, range(len(self.masters)))
        if len(tally.ok) >= self.quorum:
            hold.deadline = self.quorum_deadline(sent_at, tally.ok.values())
            if tally.refused:
                await self._repair(token, list(tally.refused))
            return True
        if len(tally.refused) > len(self.masters) - self.quorum:
            raise LockNotOwnedError("Cannot extend a Redlock that's no longer owned", lock_name=self.name)
        raise self.unreachable(tally.failures, "extend")

    async def reacquire(self) -> bool:
        if self._state().token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        return await self.extend(self.timeout, replace_ttl=True)

    async def _repair(self, token: bytes, nodes: list[int]) -> None:
        task = asyncio.current_task()
        commands = self.repair_commands(token, task.get_name() if task is not None else "asyncio")
        await self._fan_out([commands if i in nodes else [] for i in range(len(self.masters))])

    async def _renew_many(self, tokens: list[bytes]) -> list[Any]:
        commands = self.renewal_commands(tokens)
        _, replies = await self._fan_out([commands] * len(self.masters))
        outcomes = []
        for offset, token in enumerate(tokens):
            outcome, repair = self.renewal_outcome(replies, offset)
            if repair:
                await self._repair(token, repair)
            outcomes.append(outcome)
        return outcomes

