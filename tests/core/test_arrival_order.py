"""First come, first served through a connection pool: many locks of one process on one name,
each acquired by its own task (or thread), are granted in the order their acquires arrived.

An acquire *arrives* when Redis runs its first call.  That order is read from Redis itself (a
``MONITOR`` connection lists the calls in the order Redis ran them), so it is well-defined
whatever the machine's load; the callers start one after the other, each once the one before it
has sent its first call, so that many arrive while earlier ones are still on their way.  The
grants are read back in the order Redis made them (their fence tokens): the test asserts an
order, never a speed.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_redis_coord import Lock
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.core.keys import keys_for
from django_redis_coord.core.queue import aio as queue_aio
from django_redis_coord.core.queue import sync as queue_sync
from tests.support.cluster import wait_until
from tests.support.procs import CTX

#: The pool every caller goes through, as small as web workers' pools are.
POOL_SIZE = 16
#: How many of the adjacent grants may come out of arrival order: the callers whose tries are in
#: flight together as the name becomes contended can still queue in another order.  Without the
#: rule a quarter to a half of them are (tasks), several in a hundred (threads).
OUT_OF_ORDER_SHARE = 0.02
#: Longer than the arrivals may take on a loaded machine: a waiter whose refreshes came late
#: would lose its place (the lease is how dead waiters are skipped, not what is tested here).
LEASE = 300
#: Generous: a caller waits here only for the one before it to send one call.
SEND_TIMEOUT = 120.0
_TOKEN = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")


class RedisOrder:
    """The calls Redis runs, in its order (``MONITOR``, on a connection of its own)."""

    def __init__(self, redis_server) -> None:
        self._client = redis_server.client()
        self._monitor = self._client.monitor()
        self._monitor.__enter__()  # MONITOR answered: every call from now on is listed
        self._commands: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            command = self._monitor.next_command()["command"]
            if command == "ECHO fifo:end":
                return
            self._commands.append(command)

    def stop(self) -> None:
        self._client.echo("fifo:end")
        self._thread.join(SEND_TIMEOUT)
        self._monitor.__exit__(None, None, None)
        self._client.close()

    def arrivals(self, tokens: set[str]) -> dict[str, int]:
        """For each of ``tokens``: the rank of the first script call that named it."""
        first: dict[str, int] = {}
        for command in self._commands:
            if command.startswith(("EVALSHA ", "EVAL ")):
                for token in _TOKEN.findall(command):
                    if token in tokens and token not in first:
                        first[token] = len(first)
        return first


def out_of_order(grants: list[tuple[int, str]], arrivals: dict[str, int]) -> tuple[int, int]:
    """Of the adjacent grants (in the order Redis made them: by fence), how many went in the
    reverse of their arrival order, and how many pairs there are."""
    ranks = [arrivals[token] for _, token in sorted(grants)]
    pairs = list(zip(ranks, ranks[1:]))
    return sum(1 for first, second in pairs if first > second), len(pairs)


class _AsyncSent(redis.asyncio.Connection):
    """A connection that tells a task's ``sent`` event once the task sent a script call."""

    sent: dict = {}

    async def send_command(self, *args, **kwargs):
        await super().send_command(*args, **kwargs)
        if args and str(args[0]).upper() in ("EVALSHA", "EVAL"):
            event = self.sent.pop(asyncio.current_task(), None)
            if event is not None:
                event.set()


def test_tasks_through_a_pool_are_granted_in_arrival_order(redis_server, async_redis):
    callers = 1000

    async def scenario():
        _AsyncSent.sent = {}
        pool = redis.asyncio.BlockingConnectionPool(
            host=redis_server.host, port=redis_server.port, max_connections=POOL_SIZE,
            connection_class=_AsyncSent, timeout=None,
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        grants: list[tuple[int, str]] = []

        async def caller(sent: asyncio.Event) -> None:
            lock = AsyncLock(client, "fifo:tasks", timeout=60, waiter_lease=LEASE)
            _AsyncSent.sent[asyncio.current_task()] = sent
            assert await lock.acquire()
            try:
                grants.append((lock.fence, lock.local.token.decode()))
                await asyncio.sleep(0)  # held very briefly
            finally:
                await lock.release()

        tasks = []
        for _ in range(callers):
            sent = asyncio.Event()
            tasks.append(asyncio.create_task(caller(sent)))
            await asyncio.wait_for(sent.wait(), SEND_TIMEOUT)  # it has sent its first call
        await asyncio.gather(*tasks)
        await client.aclose()
        await pool.disconnect()
        return grants

    order = RedisOrder(redis_server)
    try:
        grants = asyncio.run(scenario())
    finally:
        order.stop()
    assert len(grants) == callers
    arrivals = order.arrivals({token for _, token in grants})
    assert len(arrivals) == callers
    swapped, pairs = out_of_order(grants, arrivals)
    assert swapped <= OUT_OF_ORDER_SHARE * pairs, f"{swapped} of {pairs} adjacent grants out of arrival order"


class _Sent(redis.Connection):
    """A connection that tells a thread's ``sent`` event once the thread sent a script call."""

    sent: dict = {}
    guard = threading.Lock()

    def send_command(self, *args, **kwargs):
        super().send_command(*args, **kwargs)
        if args and str(args[0]).upper() in ("EVALSHA", "EVAL"):
            with self.guard:
                event = self.sent.pop(threading.current_thread(), None)
            if event is not None:
                event.set()


def test_threads_through_a_pool_are_granted_in_arrival_order(redis_server, redis_client):
    callers = 300
    _Sent.sent = {}
    pool = redis.BlockingConnectionPool(
        host=redis_server.host, port=redis_server.port, max_connections=POOL_SIZE,
        connection_class=_Sent, timeout=None,
    )
    client = redis.Redis(connection_pool=pool)
    grants: list[tuple[int, str]] = []
    failures: list[BaseException] = []

    def caller(sent: threading.Event) -> None:
        try:
            lock = Lock(client, "fifo:threads", timeout=60, waiter_lease=LEASE)
            with _Sent.guard:
                _Sent.sent[threading.current_thread()] = sent
            assert lock.acquire()
            try:
                grants.append((lock.fence, lock.local.token.decode()))
            finally:
                lock.release()
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)
            sent.set()

    holder = Lock(redis_client, "fifo:threads", timeout=60)  # taken while the callers arrive
    assert holder.acquire(blocking=False)
    order = RedisOrder(redis_server)
    threads = []
    try:
        for _ in range(callers):
            sent = threading.Event()
            thread = threading.Thread(target=caller, args=(sent,), daemon=True)
            thread.start()
            threads.append(thread)
            assert sent.wait(SEND_TIMEOUT), "a caller never sent its first call"
        holder.release()
        for thread in threads:
            thread.join(SEND_TIMEOUT)
    finally:
        order.stop()
        pool.disconnect()
    assert not failures, failures
    assert len(grants) == callers
    arrivals = order.arrivals({token for _, token in grants})
    assert len(arrivals) == callers
    swapped, pairs = out_of_order(grants, arrivals)
    assert swapped <= OUT_OF_ORDER_SHARE * pairs, f"{swapped} of {pairs} adjacent grants out of arrival order"


# -- the count of blocking acquires in flight (what decides whether an acquire tries first) --------

def _counted(side, name: str) -> int:
    return side._in_flight.count(keys_for(name.encode(), b"lock").name)


def _child_count(name: str, queue) -> None:
    queue.put((_counted(queue_sync, name), _counted(queue_aio, name)))


def test_blocking_acquires_in_flight_are_counted_exactly(redis_client):
    """Counted while waiting; uncounted once timed out, failed, or in a forked child."""
    holder = Lock(redis_client, "fifo:count", timeout=60)
    assert holder.acquire(blocking=False)
    waiting = Lock(redis_client, "fifo:count", timeout=60, thread_local=False)
    thread = threading.Thread(target=waiting.acquire, daemon=True)
    thread.start()
    wait_until(lambda: _counted(queue_sync, "fifo:count") == 1, 30, what="the waiter counted")
    wait_until(lambda: redis_client.zcard(keys_for(b"fifo:count", b"lock").queue) == 1, 30, what="the waiter queued")

    queue = CTX.Queue()
    child = CTX.Process(target=_child_count, args=("fifo:count", queue))
    child.start()
    assert queue.get(timeout=30) == (0, 0)  # the parent's acquire in flight is not the child's
    child.join(30)

    assert not Lock(redis_client, "fifo:count", timeout=60).acquire(blocking_timeout=0.1)
    assert _counted(queue_sync, "fifo:count") == 1  # the timed-out one left, the waiter stays
    holder.release()
    thread.join(30)
    assert waiting.owned()
    waiting.release()
    assert _counted(queue_sync, "fifo:count") == 0

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = redis.Redis(port=port, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError):
        Lock(unreachable, "fifo:count", timeout=60).acquire()
    assert _counted(queue_sync, "fifo:count") == 0


def test_cancelled_and_timed_out_tasks_leave_the_count(redis_client, async_redis):
    async def scenario():
        client = async_redis()
        holder = AsyncLock(client, "fifo:acount", timeout=60)
        assert await holder.acquire(blocking=False)
        waiter = asyncio.create_task(AsyncLock(client, "fifo:acount", timeout=60).acquire())
        for _ in range(3000):  # until it is queued
            if await client.zcard(keys_for(b"fifo:acount", b"lock").queue):
                break
            await asyncio.sleep(0.01)
        assert _counted(queue_aio, "fifo:acount") == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert _counted(queue_aio, "fifo:acount") == 0
        assert not await AsyncLock(client, "fifo:acount", timeout=60).acquire(blocking_timeout=0.1)
        assert _counted(queue_aio, "fifo:acount") == 0
        await holder.release()
        await client.aclose()

    asyncio.run(scenario())
