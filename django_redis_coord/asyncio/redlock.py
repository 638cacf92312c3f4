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
from .._base import Number
from .._redlock_base import Command, NoBackoff, QuorumUnavailable, RedlockBase, SharedHold, pack
from .._tasks import drop_closed_loops, in_background, run_to_completion
from ..exceptions import LockError

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
    loop = asyncio.get_running_loop()
    by_pool = _links.get(loop)
    if by_pool is None:
        drop_closed_loops(_links)  # a new event loop: let go of the links of the loops that ended
        by_pool = _links[loop] = weakref.WeakKeyDictionary()
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
        started, replies = await self._fan_out(self.everywhere(command))
        return started, [reply[0] for reply in replies]

    async def __aenter__(self) -> Redlock:
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
        """Acquire the lock on a quorum of masters; see :meth:`django_redis_coord.Redlock.acquire`."""
        sleep, blocking, stop_at, raw = self.acquire_arguments(sleep, blocking, blocking_timeout, token)
        task = asyncio.current_task()
        worker = task.get_name() if task is not None else "asyncio"
        while True:
            try:
                hint = await self._attempt(raw, worker)
            except QuorumUnavailable:
                raise  # already undone
            except BaseException:
                # Cancelled mid-attempt: give back whatever it may have been granted, then stop.
                await run_to_completion(self._undo(raw, set()))
                raise
            if hint is True:
                return True
            delay = self.retry_delay(hint, sleep, stop_at) if blocking else None
            if delay is None:
                return False
            await asyncio.sleep(delay)

    async def _attempt(self, token: bytes, worker: str) -> Union[bool, float, None]:
        started, replies = await self._everywhere(self.acquire_command(token, worker))
        grants = self.tally(replies, self.accept_grant, range(len(self.masters)))
        if len(grants.ok) >= self.quorum:
            fence, synced, lagging = self.fence_of(grants)
            if lagging:
                _, recorded = await self._fan_out(self.only(lagging, [self.fence_command(token, fence)]))
                synced += self.recorded(lagging, recorded)
            deadline = self.held_until(started, grants, synced)
            if deadline is not None:
                hold = self._own(token, fence, deadline)
                if self.auto_renew:
                    _watchdog.async_watchdog().register(self, hold, token)
                return True
        await self._undo(token, set(grants.refused))
        return self.failed_attempt(grants)

    async def _undo(self, token: bytes, skip: set[int]) -> None:
        """Release an attempt everywhere it may have been granted (all masters but ``skip``)."""
        undo = [i for i in range(len(self.masters)) if i not in skip]
        if undo:
            await self._fan_out(self.only(undo, [self.release_command(token)]))

    async def locked(self) -> bool:
        return self.held_by_one(self.tokens_of((await self._everywhere(self.get_command()))[1], "check the lock"))

    async def owned(self) -> bool:
        token = self._state().token
        if token is None:
            return False
        return self.held_by(self.tokens_of((await self._everywhere(self.get_command()))[1], "check the lock"), token)

    def _mark_lost(self, hold: SimpleNamespace) -> None:
        result = self.mark_lost(hold)
        if asyncio.iscoroutine(result):
            in_background(result)

    async def release(self) -> None:
        # Completes even if this task is cancelled meanwhile (see Lock.release).
        await run_to_completion(self._release_call())

    def _release_call(self) -> Any:
        """The call that releases this task's hold, needing nothing from the task (see
        :meth:`django_redis_coord.asyncio.Lock._release_call`)."""
        hold, token = self.hold_to_release()
        if self.auto_renew:
            _watchdog.async_watchdog().unregister(self, hold)
        return self._release_hold(hold, token)

    async def _release_hold(self, hold: SimpleNamespace, token: bytes) -> None:
        self.released(hold, (await self._everywhere(self.release_command(token)))[1])

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        hold, command = self.hold_to_extend(additional_time, replace_ttl)
        sent_at, replies = await self._everywhere(command)
        repair = self.extended(hold, sent_at, replies)
        if self.auto_renew:  # a shorter deadline must not wait for the watchdog's next look
            _watchdog.async_watchdog().look_again()
        if repair:
            await self._repair(hold.token, repair)
        return True

    async def reacquire(self) -> bool:
        self.check_reacquire()
        return await self.extend(self.timeout, replace_ttl=True)

    async def _repair(self, token: bytes, nodes: list[int]) -> None:
        task = asyncio.current_task()
        worker = task.get_name() if task is not None else "asyncio"
        await self._fan_out(self.only(nodes, self.repair_commands(token, worker)))

    async def _renew_many(self, tokens: list[bytes]) -> list[Any]:
        _, replies = await self._fan_out([self.renewal_commands(tokens)] * len(self.masters))
        outcomes = []
        for offset, token in enumerate(tokens):
            outcome, repair = self.renewal_outcome(replies, offset)
            if repair:
                await self._repair(token, repair)
            outcomes.append(outcome)
        return outcomes
