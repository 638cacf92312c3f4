"""First come, first served through a connection pool: many locks of one process on one name,
each acquired by its own task (or thread), are granted in the order their acquires arrived.

Arrival order is made well-defined, whatever the machine's load: each caller is started only
once the one before it has sent its first acquire call to Redis (a connection class that records
each ``EVALSHA`` it sends, with the task or thread that sent it).  The grants are read back in
the order Redis made them (their fence tokens), so the test asserts an order, never a speed.
"""

from __future__ import annotations

import asyncio
import threading

import redis
import redis.asyncio

from django_redis_coord import Lock
from django_redis_coord.asyncio import Lock as AsyncLock

#: The pool every caller goes through, as small as web workers' pools are.
POOL_SIZE = 16
#: How many of the adjacent grants may come out of arrival order: a caller that arrives while
#: the name is free (or is just being handed on) tries first, and a try answered after a later
#: caller's call can take its place after it.  Without first-come-first-served order through the
#: pool, a quarter of them are.
OUT_OF_ORDER_SHARE = 0.02
#: Generous: a caller waits here only for the one before it to send one call.
SEND_TIMEOUT = 120.0


def out_of_order(fence_and_arrival: list[tuple[int, int]]) -> tuple[int, int]:
    """Of the adjacent grants (in the order Redis made them), how many were granted in the
    reverse of their arrival order, and how many pairs there are."""
    arrivals = [arrival for _, arrival in sorted(fence_and_arrival)]
    pairs = list(zip(arrivals, arrivals[1:]))
    return sum(1 for first, second in pairs if first > second), len(pairs)


class _AsyncSent(redis.asyncio.Connection):
    """A connection that tells a task's ``sent`` event once the task sent an ``EVALSHA``."""

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
        granted: list[tuple[int, int]] = []

        async def caller(arrival: int, sent: asyncio.Event) -> None:
            lock = AsyncLock(client, "fifo:tasks", timeout=60)
            _AsyncSent.sent[asyncio.current_task()] = sent
            assert await lock.acquire()
            try:
                granted.append((lock.fence, arrival))
                await asyncio.sleep(0)  # held very briefly
            finally:
                await lock.release()

        tasks = []
        for arrival in range(callers):
            sent = asyncio.Event()
            tasks.append(asyncio.create_task(caller(arrival, sent)))
            await asyncio.wait_for(sent.wait(), SEND_TIMEOUT)  # it has sent its first acquire call
        await asyncio.gather(*tasks)
        await client.aclose()
        await pool.disconnect()
        return granted

    granted = asyncio.run(scenario())
    assert len(granted) == callers
    swapped, pairs = out_of_order(granted)
    assert swapped <= OUT_OF_ORDER_SHARE * pairs, f"{swapped} of {pairs} adjacent grants out of arrival order"


class _Sent(redis.Connection):
    """A connection that tells a thread's ``sent`` event once the thread sent an ``EVALSHA``."""

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
    granted: list[tuple[int, int]] = []
    failures: list[BaseException] = []

    def caller(arrival: int, sent: threading.Event) -> None:
        try:
            lock = Lock(client, "fifo:threads", timeout=60)
            with _Sent.guard:
                _Sent.sent[threading.current_thread()] = sent
            assert lock.acquire()
            try:
                granted.append((lock.fence, arrival))
            finally:
                lock.release()
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)
            sent.set()

    threads = []
    for arrival in range(callers):
        sent = threading.Event()
        thread = threading.Thread(target=caller, args=(arrival, sent), daemon=True)
        thread.start()
        threads.append(thread)
        assert sent.wait(SEND_TIMEOUT), "a caller never sent its acquire call"
    for thread in threads:
        thread.join(SEND_TIMEOUT)
    pool.disconnect()
    assert not failures, failures
    assert len(granted) == callers
    swapped, pairs = out_of_order(granted)
    assert swapped <= OUT_OF_ORDER_SHARE * pairs, f"{swapped} of {pairs} adjacent grants out of arrival order"
