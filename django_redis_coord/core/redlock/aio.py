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
from collections.abc import Sequence
from typing import Any, Optional, Union

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import watchdog as _watchdog
from ..arguments import Number
from ..concurrency import drop_closed_loops, in_background, run_to_completion
from ..events import held_time
from ..exceptions import QuorumUnavailable
from ..holds import Hold
from ..lock.rules import AsyncWithBlock
from ..scripts import async_scripts
from .commands import (
    Command,
    accept_grant,
    describe_master,
    fence_of,
    fence_recorded,
    missing_scripts,
    queue_commands,
    tally_replies,
)
from .rules import RedlockBase, SharedHold

__all__ = ["Redlock", "QuorumUnavailable"]

logger = logging.getLogger("django_redis_coord")


_clients: weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary[Any, dict[float, redis.asyncio.Redis]]] = (
    weakref.WeakKeyDictionary()
)


def _client_for(pool: Any, node_timeout: float) -> redis.asyncio.Redis:
    """A client of its own for the master of ``pool`` (for one event loop): the same connection
    settings, but no retries and a connection timeout of ``node_timeout``; every exchange runs
    under ``asyncio.wait_for(node_timeout)``."""
    kwargs = dict(pool.connection_kwargs)
    kwargs["retry"] = Retry(NoBackoff(), 0)
    kwargs["socket_timeout"] = None  # the exchange's wait_for bounds it: no per-read timers
    if "host" in kwargs or "connection_pool" in kwargs:
        kwargs["socket_connect_timeout"] = node_timeout
    own_pool = redis.asyncio.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    return redis.asyncio.Redis(connection_pool=own_pool)


def clients_for(masters: Sequence[Any], node_timeout: float) -> list[redis.asyncio.Redis]:
    """The Redlock clients of ``masters`` in the running event loop (one per master pool and
    ``node_timeout``); those of event loops that ended are let go."""
    loop = asyncio.get_running_loop()
    by_pool = _clients.get(loop)
    if by_pool is None:
        drop_closed_loops(_clients)
        by_pool = _clients[loop] = weakref.WeakKeyDictionary()
    clients = []
    for master in masters:
        by_timeout = by_pool.setdefault(master.connection_pool, {})
        client = by_timeout.get(node_timeout)
        if client is None:
            client = by_timeout[node_timeout] = _client_for(master.connection_pool, node_timeout)
        clients.append(client)
    return clients


async def _exchange(client: redis.asyncio.Redis, batch: Sequence[Command], load: bool) -> list[Any]:
    """One pipeline to one master: a reply per command, error replies in place."""
    pipe = client.pipeline(transaction=False)
    skip = queue_commands(pipe, async_scripts, client, batch, load)
    return (await pipe.execute(raise_on_error=False))[skip:]


async def _one_master(client: redis.asyncio.Redis, batch: Sequence[Command], timeout: float, where: str,
                      load: bool) -> list[Any]:
    if not batch:
        return []
    try:
        return await asyncio.wait_for(_exchange(client, batch, load), timeout)
    except asyncio.TimeoutError:
        return [RedisTimeoutError(f"{where} did not answer in time")] * len(batch)
    except Exception as exc:
        return [exc] * len(batch)


async def fan_out(
    clients: Sequence[redis.asyncio.Redis],
    batches: Sequence[Sequence[Command]],
    node_timeout: float,
    names: Sequence[str],
) -> tuple[float, list[list[Any]]]:
    """Send ``batches[i]`` to master ``i`` for all masters at once; see the sync ``fan_out``."""
    started = time.monotonic()
    results = list(await asyncio.gather(*(
        _one_master(client, batch, node_timeout, where, False) for client, batch, where in zip(clients, batches, names)
    )))
    retry = [missing_scripts(batch, replies) for batch, replies in zip(batches, results)]
    if any(retry):
        again = await asyncio.gather(*(
            _one_master(client, [batch[i] for i in indexes], node_timeout, where, True)
            for client, batch, indexes, where in zip(clients, batches, retry, names)
        ))
        for replies, indexes, answers in zip(results, retry, again):
            for index, answer in zip(indexes, answers):
                replies[index] = answer
    return started, results


class _TaskHold:
    """Hold state private to the current asyncio task (or the thread, outside a loop)."""

    def __init__(self) -> None:
        self._by_task: weakref.WeakKeyDictionary[Any, Hold] = weakref.WeakKeyDictionary()
        self._outside = Hold(deadline=0.0)

    @property
    def hold(self) -> Hold:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is None:
            return self._outside
        hold = self._by_task.get(task)
        if hold is None:
            hold = self._by_task[task] = Hold(deadline=0.0)
        return hold

    @property
    def token(self) -> Optional[bytes]:
        return self.hold.token


class _RenewalBatch:
    def __init__(self, owner: Redlock) -> None:
        self.owner = owner
        self.renewals: list[tuple[bytes, int]] = []

    def add(self, token: bytes, ms: int) -> None:
        self.renewals.append((token, ms))

    async def execute(self, raise_on_error: bool = False) -> list[Any]:
        return await self.owner._renew_many(self.renewals)


class _QuorumClient:
    """``owner.redis`` as the asyncio watchdog sees it."""

    def __init__(self, owner: Redlock) -> None:
        self._owner = weakref.proxy(owner)

    def pipeline(self, transaction: bool = False) -> _RenewalBatch:
        return _RenewalBatch(self._owner)  # type: ignore[arg-type]


class Redlock(AsyncWithBlock, RedlockBase):
    """Asyncio Redlock over ``redis.asyncio.Redis`` masters; see :class:`django_redis_coord.Redlock`."""

    def __init__(self, masters: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(masters, name, *args, **kwargs)
        self.local: Any = _TaskHold() if self.thread_local else SharedHold()
        self._names = [describe_master(master, index) for index, master in enumerate(self.masters)]
        self.redis = _QuorumClient(self)

    async def _fan_out(self, batches: Sequence[Sequence[Command]]) -> tuple[float, list[list[Any]]]:
        clients = clients_for(self.masters, self.node_timeout)
        return await fan_out(clients, batches, self.node_timeout, self._names)

    async def _everywhere(self, command: Command) -> tuple[float, list[Any]]:
        started, replies = await self._fan_out(self.everywhere(command))
        return started, [reply[0] for reply in replies]

    async def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock on a quorum of masters; see :meth:`django_redis_coord.Redlock.acquire`."""
        started = time.monotonic()
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
                await self._atell_acquired(self._state(), started, self._release_call)
                return True
            delay = self.retry_delay(hint, sleep, stop_at) if blocking else None
            if delay is None:
                await self._atell_contended(started)
                return False
            await asyncio.sleep(delay)

    async def _attempt(self, token: bytes, worker: str) -> Union[bool, float, None]:
        started, replies = await self._everywhere(self.acquire_command(token, worker))
        grants = tally_replies(replies, accept_grant, range(len(self.masters)))
        if len(grants.ok) >= self.quorum:
            fence, synced, lagging = fence_of(grants)
            if lagging:
                _, recorded = await self._fan_out(self.only(lagging, [self.fence_command(token, fence)]))
                synced += fence_recorded(lagging, recorded)
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

    _report_loss = RedlockBase._atell_lost

    def _mark_lost(self, hold: Hold) -> None:
        result = self.mark_lost(hold)
        if asyncio.iscoroutine(result):
            in_background(result)

    async def release(self) -> None:
        hold = self._state()
        fence, held = hold.fence, held_time(hold)
        # Completes (and is told) even if this task is cancelled meanwhile (see Lock.release).
        await run_to_completion(self._release_told(self._release_call(), fence, held))

    def _release_call(self) -> Any:
        """The call that releases this task's hold, needing nothing from the task (see
        :meth:`django_redis_coord.asyncio.Lock._release_call`)."""
        hold, token = self.hold_to_release()
        if self.auto_renew:
            _watchdog.async_watchdog().unregister(self, hold)
        return self._release_hold(hold, token)

    async def _release_hold(self, hold: Hold, token: bytes) -> None:
        self.released(hold, (await self._everywhere(self.release_command(token)))[1])

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        hold, command = self.hold_to_extend(additional_time, replace_ttl)
        sent_at, replies = await self._everywhere(command)
        repair = self.extended(hold, sent_at, replies)
        if self.auto_renew:  # a shorter deadline must not wait for the watchdog's next look
            _watchdog.async_watchdog().look_again()
        if repair and hold.token is not None:
            await self._repair(hold.token, repair)
        return True

    async def reacquire(self) -> bool:
        self.check_reacquire()
        return await self.extend(self.timeout, replace_ttl=True)

    async def _repair(self, token: bytes, nodes: list[int]) -> None:
        task = asyncio.current_task()
        worker = task.get_name() if task is not None else "asyncio"
        await self._fan_out(self.only(nodes, self.repair_commands(token, worker)))

    async def _renew_many(self, renewals: list[tuple[bytes, int]]) -> list[Any]:
        _, replies = await self._fan_out([self.renewal_commands(renewals)] * len(self.masters))
        outcomes = []
        for offset, (token, _) in enumerate(renewals):
            outcome, repair = self.renewal_outcome(replies, offset)
            if repair:
                await self._repair(token, repair)
            outcomes.append(outcome)
        return outcomes
