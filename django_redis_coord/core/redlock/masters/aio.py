"""Asking every master at once from asyncio: one task per master (``asyncio.gather``), each
exchange bounded by ``asyncio.wait_for(node_timeout)``; and a hold per task.  The thread side is
:mod:`django_redis_coord.core.redlock.masters.sync` (same names)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any, Optional

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError

from ...concurrency import drop_closed_loops
from ...holds import Hold
from ...scripts import async_scripts
from ..commands import Command, queue_commands

__all__ = ["Masters", "WorkerHold"]

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


class WorkerHold:
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


class Masters:
    """The masters of one Redlock, asked all at once (their clients are those of the running
    event loop)."""

    def __init__(self, masters: Sequence[Any], node_timeout: float, names: Sequence[str]) -> None:
        self.masters = masters
        self.node_timeout = node_timeout
        self.names = names

    async def ask(self, batches: Sequence[Sequence[Command]], load: bool) -> list[list[Any]]:
        """Send each master its batch, all masters at once, each bounded by ``node_timeout``."""
        clients = clients_for(self.masters, self.node_timeout)
        return list(await asyncio.gather(*(
            _one_master(client, batch, self.node_timeout, where, load)
            for client, batch, where in zip(clients, batches, self.names)
        )))
