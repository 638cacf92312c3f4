"""Asking every master at once from threads: each master's batch is one pipeline run on a small
per-process thread pool, on a client of its own (the master client's connection settings, socket
timeouts of ``node_timeout``, no retries), so that an unreachable master costs at most
``node_timeout`` instead of redis-py's reconnect back-off; and a hold per thread.  The asyncio
side is :mod:`django_redis_coord.core.redlock.masters.aio` (same names)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Optional

import redis
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ...scripts import sync_scripts
from ..commands import Command, queue_commands
from ..rules import SharedHold

__all__ = ["Masters", "WorkerHold"]

_clients: weakref.WeakKeyDictionary[Any, dict[float, redis.Redis]] = weakref.WeakKeyDictionary()
_clients_lock = threading.Lock()


def _client_for(pool: Any, node_timeout: float) -> redis.Redis:
    """A client of its own for the master of ``pool``: the same connection settings, but socket
    timeouts of ``node_timeout`` and no retries (redis-py's reconnect back-off would make a dead
    master cost seconds), on a connection pool of its own."""
    kwargs = dict(pool.connection_kwargs)
    kwargs["retry"] = Retry(NoBackoff(), 0)
    kwargs["socket_timeout"] = node_timeout
    if "host" in kwargs or "service_name" in kwargs or "connection_pool" in kwargs:
        kwargs["socket_connect_timeout"] = node_timeout
    own_pool = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    return redis.Redis(connection_pool=own_pool)


def clients_for(masters: Sequence[Any], node_timeout: float) -> list[redis.Redis]:
    """The Redlock clients of ``masters`` (one per master pool and ``node_timeout``, made once)."""
    clients = []
    with _clients_lock:
        for master in masters:
            by_timeout = _clients.setdefault(master.connection_pool, {})
            client = by_timeout.get(node_timeout)
            if client is None:
                client = by_timeout[node_timeout] = _client_for(master.connection_pool, node_timeout)
            clients.append(client)
    return clients


_executor: Optional[tuple[int, ThreadPoolExecutor]] = None
_executor_lock = threading.Lock()


def executor() -> ThreadPoolExecutor:
    """The threads that talk to the masters (one per process: a forked child makes its own)."""
    global _executor
    current = _executor
    if current is None or current[0] != os.getpid():
        with _executor_lock:
            current = _executor
            if current is None or current[0] != os.getpid():
                pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="dcoord-redlock")
                current = _executor = (os.getpid(), pool)
    return current[1]


def _exchange(client: redis.Redis, batch: Sequence[Command], load: bool) -> list[Any]:
    """One pipeline to one master: a reply per command, error replies in place."""
    pipe = client.pipeline(transaction=False)
    skip = queue_commands(pipe, sync_scripts, client, batch, load)
    return pipe.execute(raise_on_error=False)[skip:]


class WorkerHold(SharedHold, threading.local):
    """Hold state private to each thread (a Hold the watchdog thread can update)."""


class Masters:
    """The masters of one Redlock, asked all at once (their clients are made once)."""

    def __init__(self, masters: Sequence[Any], node_timeout: float, names: Sequence[str]) -> None:
        self.clients = clients_for(masters, node_timeout)
        self.node_timeout = node_timeout
        self.names = names

    def ask(self, batches: Sequence[Sequence[Command]], load: bool) -> list[list[Any]]:
        """Send each master its batch, all masters in parallel; wait at most ``node_timeout``."""
        work = executor()
        futures = {
            index: work.submit(_exchange, client, batch, load)
            for index, (client, batch) in enumerate(zip(self.clients, batches))
            if batch
        }
        wait(futures.values(), timeout=self.node_timeout)
        results: list[list[Any]] = [[] for _ in self.clients]
        for index, future in futures.items():
            if future.cancel():  # still queued (every thread busy): nothing was sent
                error: Optional[BaseException] = RedisTimeoutError(f"{self.names[index]} was not asked in time")
            elif not future.done():  # its socket timeout closes the connection; the reply is dropped
                error = RedisTimeoutError(f"{self.names[index]} did not answer in time")
            else:
                error = future.exception()
                if error is None:
                    results[index] = future.result()
                    continue
            results[index] = [error] * len(batches[index])
        return results
