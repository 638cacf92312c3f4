"""Waiting that scales: every waiter of a process shares one waiting connection per server.

Each test runs against a private redis-server (so that ``CLIENT LIST`` shows only its own
connections), queues many waiters of one process on one lock or semaphore, then checks that:
all were served, in the order of the queue in Redis (fences follow the queue snapshot), with no
error, no overlapping hold and no hold lost (a release raises if its hold was lost), while the
connections given over to waiting (blocked, or subscribed) stayed at or under 4.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

import pytest
import redis
import redis.asyncio

from django_redis_coord import Lock, Semaphore
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.asyncio import Semaphore as AsyncSemaphore
from django_redis_coord.core.exceptions import ConnectionPoolTooSmall

#: Connections given over to waiting may be at most this many (the issue's bound).
MAX_WAITING_CONNECTIONS = 4


def waiting_connections(server: Any) -> int:
    """Connections blocked in a command, or subscribed to a channel, as ``CLIENT LIST`` shows them."""
    admin = server.client()
    try:
        clients = admin.client_list()
    finally:
        admin.close()
    return sum(
        1 for c in clients
        if "b" in c["flags"] or "P" in c["flags"] or int(c.get("sub", 0)) > 0 or int(c.get("psub", 0)) > 0
    )


class Record:
    """What the waiters did: grants as (fence, token), holds at once, errors."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.grants: list[tuple[int, bytes]] = []
        self.inside = 0
        self.overlaps = 0
        self.guard = threading.Lock()

    def enter(self, fence: int, token: bytes) -> None:
        with self.guard:
            self.grants.append((fence, token))
            self.inside += 1
            if self.inside > self.limit:
                self.overlaps += 1

    def leave(self) -> None:
        with self.guard:
            self.inside -= 1

    def order(self) -> list[bytes]:
        return [token for _, token in sorted(self.grants)]


#: The waiters' lease in the ordering tests: far above any delay of a refresh on a loaded machine.
WAITER_LEASE = 60


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# -- threads ---------------------------------------------------------------------------------------
def _threads_on(kind: str, client: redis.Redis, server: Any, count: int) -> None:
    limit = 4 if kind == "semaphore" else 1
    record = Record(limit)
    errors: list[BaseException] = []

    def make() -> Any:
        # The order of live waiters is what is checked: a waiter whose refresh a loaded machine
        # delays past its lease loses its place by design, so the leases here are long.
        if kind == "semaphore":
            return Semaphore(client, "hot", limit=limit, timeout=60, waiter_lease=WAITER_LEASE)
        return Lock(client, "hot", timeout=60, waiter_lease=WAITER_LEASE)

    holders = [make() for _ in range(limit)]
    for holder in holders:
        assert holder.acquire(blocking=False)
    queue_key = holders[0].keys.queue

    def one() -> None:
        primitive = make()
        try:
            assert primitive.acquire(blocking=True, blocking_timeout=120)
            token = primitive.permit().token if kind == "semaphore" else primitive.local.token
            record.enter(primitive.fence, token)
            time.sleep(0.0005)
            record.leave()
            released = primitive.release()
            assert released is not False  # a semaphore says False for a permit it no longer held
        except BaseException as exc:  # noqa: B902 - reported below
            errors.append(exc)

    threads = []
    for _ in range(count):
        thread = threading.Thread(target=one)
        thread.start()
        threads.append(thread)
    wait_for(lambda: client.zcard(queue_key) == count, 60, "every thread queued")
    queue = client.zrange(queue_key, 0, -1)
    waiting = waiting_connections(server)
    for holder in holders:
        holder.release()
    for thread in threads:
        thread.join(180)
    assert not errors, errors[:3]
    assert len(record.grants) == count
    assert record.overlaps == 0
    assert record.order() == queue, "not served in the order of the queue"
    assert waiting <= MAX_WAITING_CONNECTIONS, waiting


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_300_threads_through_a_blocking_pool_of_16_are_served_in_order(redis_servers, kind):
    (server,) = redis_servers(1)
    pool = redis.BlockingConnectionPool(host=server.host, port=server.port, max_connections=16, timeout=20)
    client = redis.Redis(connection_pool=pool)
    try:
        _threads_on(kind, client, server, 300)
    finally:
        client.close()
        pool.disconnect()


# -- asyncio tasks ---------------------------------------------------------------------------------
async def _tasks_on(kind: str, client: Any, server: Any, count: int) -> None:
    limit = 4 if kind == "semaphore" else 1
    record = Record(limit)

    def make() -> Any:
        if kind == "semaphore":  # long leases, as for threads
            return AsyncSemaphore(client, "hot", limit=limit, timeout=60, waiter_lease=WAITER_LEASE)
        return AsyncLock(client, "hot", timeout=60, waiter_lease=WAITER_LEASE)

    holders = [make() for _ in range(limit)]
    for holder in holders:
        assert await holder.acquire(blocking=False)
    queue_key = holders[0].keys.queue

    async def one() -> None:
        primitive = make()
        assert await primitive.acquire(blocking=True, blocking_timeout=120)
        token = primitive.permit().token if kind == "semaphore" else primitive.local.token
        record.enter(primitive.fence, token)
        await asyncio.sleep(0)
        record.leave()
        assert await primitive.release() is not False

    tasks = []
    for _ in range(count):  # as requests arrive: each task starts after the last one yielded once
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(0)
    deadline = time.monotonic() + 60
    while await client.zcard(queue_key) < count:
        assert time.monotonic() < deadline, "not every task queued"
        await asyncio.sleep(0.05)
    queue = await client.zrange(queue_key, 0, -1)
    waiting = await asyncio.to_thread(waiting_connections, server)
    for holder in holders:
        await holder.release()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 180)
    errors = [result for result in results if isinstance(result, BaseException)]
    assert not errors, errors[:3]
    assert len(record.grants) == count
    assert record.overlaps == 0
    assert record.order() == queue, "not served in the order of the queue"
    assert waiting <= MAX_WAITING_CONNECTIONS, waiting


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
@pytest.mark.parametrize("pool", ["default", "blocking16"])
def test_1000_asyncio_tasks_are_served_in_order_on_one_waiting_connection(redis_servers, kind, pool):
    (server,) = redis_servers(1)

    async def main() -> None:
        if pool == "default":
            client = redis.asyncio.Redis(host=server.host, port=server.port)
        else:
            client = redis.asyncio.Redis(connection_pool=redis.asyncio.BlockingConnectionPool(
                host=server.host, port=server.port, max_connections=16, timeout=20))
        try:
            await _tasks_on(kind, client, server, 1000)
        finally:
            await client.aclose()

    asyncio.run(main())


# -- the direct wake-up ----------------------------------------------------------------------------
def _readers_of_grants(url: str, name: str, rounds: int, flavour: str) -> dict[str, Any]:
    """One contending process with one waiter at a time: for each grant message handed to a
    waiter, whether the thread (asyncio: the task) that read it was the waiting one."""
    from django_redis_coord.core.waiting import rules as _waiting_base

    handed: list[bool] = []
    owner: dict[str, Any] = {}
    original = _waiting_base.WaiterBase.deliver

    def deliver(self: Any, message: bytes, attempt: int = 0) -> None:
        if message:  # a grant or a note, not a recheck
            if flavour == "sync":
                handed.append(threading.get_ident() == owner["thread"])
            else:
                handed.append(asyncio.current_task() is owner["task"])
        original(self, message, attempt)

    _waiting_base.WaiterBase.deliver = deliver  # type: ignore[method-assign]  # this child only
    acquired = 0
    if flavour == "sync":
        owner["thread"] = threading.get_ident()
        client = redis.Redis.from_url(url)
        for _ in range(rounds):
            lock = Lock(client, name, timeout=10)
            acquired += lock.acquire(blocking_timeout=30)
            time.sleep(0.002)
            lock.release()
            time.sleep(0.001)
        client.close()
    else:
        async def main() -> int:
            owner["task"] = asyncio.current_task()
            client = redis.asyncio.Redis.from_url(url)
            count = 0
            for _ in range(rounds):
                lock = AsyncLock(client, name, timeout=10)
                count += await lock.acquire(blocking_timeout=30)
                await asyncio.sleep(0.002)
                await lock.release()
                await asyncio.sleep(0.001)
            await client.aclose()
            return count

        acquired = asyncio.run(main())
    return {"acquired": acquired, "by_waiter": sum(handed), "by_another": len(handed) - sum(handed)}


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_the_only_waiter_of_a_process_reads_its_own_grant(redis_servers, flavour):
    """Three processes take turns on one lock, one waiter each at a time: every grant announced to a
    waiter is read from the waiting connection by that waiter's own thread (asyncio: its own task),
    never handed over by another one: no thread switch between the grant and the waiter."""
    from tests.support.procs import run_processes

    (server,) = redis_servers(1)
    url = f"redis://{server.host}:{server.port}/0"
    results = run_processes(_readers_of_grants, [(url, "direct", 40, flavour)] * 3, timeout=120)
    assert [r["acquired"] for r in results] == [40, 40, 40]
    assert sum(r["by_waiter"] for r in results) >= 40, results  # most grants come by a message
    assert sum(r["by_another"] for r in results) == 0, results


# -- the waiting connection lost ------------------------------------------------------------------
def test_a_killed_waiting_connection_loses_no_grant(redis_servers):
    """The hub's connection is killed while 20 threads wait: each is still served, the first
    before its grant, had it been lost, would have gone to the next waiter."""
    (server,) = redis_servers(1)
    client = server.client()
    holder = Lock(client, "hot", timeout=60)
    assert holder.acquire(blocking=False)
    served: list[float] = []
    errors: list[BaseException] = []

    def one() -> None:
        lock = Lock(client, "hot", timeout=60, waiter_lease=1.5)  # refreshes every 0.5 s
        try:
            assert lock.acquire(blocking_timeout=60)
            served.append(time.monotonic())
            lock.release()
        except BaseException as exc:  # noqa: B902 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for thread in threads:
        thread.start()
    wait_for(lambda: client.zcard(holder.keys.queue) == 20, 20, "every thread queued")
    admin = server.client()
    assert admin.client_kill_filter(_type="pubsub") >= 1
    released_at = time.monotonic()
    holder.release()  # announced while nobody listens, or just after the hub is back
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    assert len(served) == 20
    # No grant lost: a grant its waiter does not take up is provisional and lasts 2 x waiter_lease
    # (3 s), then goes to the next in line; the head waiter, refreshing every 0.5 s, finds its
    # grant before that even if the announcement was lost with the connection.
    assert min(served) - released_at < 2 * 1.5
    admin.close()
    client.close()


def test_a_pool_too_small_for_the_waiting_connection_gets_a_clear_error(redis_client, redis_server):
    pool = redis.BlockingConnectionPool(host=redis_server.host, port=redis_server.port, max_connections=1)
    client = redis.Redis(connection_pool=pool)
    holder = Lock(redis_client, "busy", timeout=10)
    assert holder.acquire(blocking=False)
    try:
        assert Lock(client, "busy", timeout=10).acquire(blocking=False) is False  # needs no waiting
        with pytest.raises(ConnectionPoolTooSmall, match="max_connections"):
            Lock(client, "busy", timeout=10).acquire(blocking_timeout=1)
    finally:
        holder.release()
        pool.disconnect()


def test_an_idle_hub_gives_its_connection_back(redis_servers, monkeypatch):
    from django_redis_coord.core.waiting import rules as _waiting_base

    monkeypatch.setattr(_waiting_base, "IDLE_SECONDS", 0.3)
    monkeypatch.setattr("django_redis_coord.core.waiting.sync.IDLE_SECONDS", 0.3)
    (server,) = redis_servers(1)
    client = server.client()
    holder = Lock(client, "hot", timeout=0.2)
    assert holder.acquire(blocking=False)
    assert Lock(client, "hot", timeout=5).acquire(blocking_timeout=5)  # waits for the TTL
    assert waiting_connections(server) == 1
    wait_for(lambda: waiting_connections(server) == 0, 5, "the hub to give its connection back")
    client.close()


# -- failovers -----------------------------------------------------------------------------------
def _after_one_wait(redis_servers: Any, monkeypatch: Any) -> tuple[Any, redis.Redis, Any]:
    """A private server, a client whose one blocking acquire waited (for a 0.2 s TTL) and so
    subscribed its hub, and that hub, which idles out after 0.3 s."""
    from django_redis_coord.core.waiting import sync as waiting

    monkeypatch.setattr("django_redis_coord.core.waiting.sync.IDLE_SECONDS", 0.3)
    (server,) = redis_servers(1)
    client = server.client()
    holder = Lock(client, "hot", timeout=0.2)
    assert holder.acquire(blocking=False)
    assert Lock(client, "hot", timeout=5).acquire(blocking_timeout=5)  # waits: subscribes the hub
    return server, client, waiting.hub_for(client)


def test_an_idle_hub_keeps_no_reference_to_its_client(redis_servers, monkeypatch):
    """The hubs are kept by connection pool, weakly: an idle hub must not keep the client (and so
    the pool) alive."""
    import gc

    server, client, hub = _after_one_wait(redis_servers, monkeypatch)
    wait_for(lambda: waiting_connections(server) == 0, 5, "the hub to give its connection back")
    assert not [r for r in gc.get_referrers(client) if r is hub or r is vars(hub)]
    assert not [r for r in gc.get_referrers(client.connection_pool) if r is hub or r is vars(hub)]
    client.close()


def _queue_threads(client: Any, name: str, count: int) -> tuple[list[threading.Thread], list[float], list]:
    served: list[float] = []
    errors: list[BaseException] = []

    def one() -> None:
        lock = Lock(client, name, timeout=60, waiter_lease=1.5)  # refreshes every 0.5 s
        try:
            assert lock.acquire(blocking_timeout=90)
            served.append(time.monotonic())
            lock.release()
        except BaseException as exc:  # noqa: B902 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads, served, errors


def _eventually(call: Any, timeout: float = 30.0) -> Any:
    """``call()`` once Redis answers again (a client reconnects after a failover)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                redis.exceptions.ClusterDownError, redis.exceptions.ReadOnlyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_waiters_ride_out_a_sentinel_failover():
    """The primary dies while 10 threads wait through Sentinel: the waiting connection follows the
    failover, and every waiter is served once the holder releases on the new primary."""
    from tests.support.cluster import LocalSentinel, wait_until

    with LocalSentinel() as deployment:
        client = deployment.sentinel().master_for(deployment.service, socket_timeout=1.0,
                                                 socket_connect_timeout=1.0)
        holder = Lock(client, "hot", timeout=120)
        assert holder.acquire(blocking=False)
        threads, served, errors = _queue_threads(client, "hot", 10)
        wait_for(lambda: client.zcard(holder.keys.queue) == 10, 20, "every thread queued")
        assert client.execute_command("WAIT", 1, 2000) == 1  # the queue is on the replica too
        old_port = deployment.current_primary_port()
        deployment.server_on(old_port).kill()
        wait_until(lambda: deployment.current_primary_port() != old_port, 30, what="a new primary")
        _eventually(holder.release)
        released_at = time.monotonic()
        for thread in threads:
            thread.join(90)
        assert not errors, errors[:3]
        assert len(served) == 10
        assert min(served) - released_at < 0.5 + 1.0  # a refresh period and a reconnection
        client.close()


@pytest.mark.skipif(
    tuple(int(part) for part in redis.__version__.split(".")[:2]) < (7, 4),
    reason="redis-py before 7.4: a RedisCluster client shared by threads fails through a primary's failover "
    "(RedisClusterException 'I/O operation on closed file'; measured on 6.1 to 7.3, 7.4 and later pass)",
)
def test_waiters_ride_out_a_cluster_failover():
    """The primary serving the lock's slot dies while 10 threads wait on a Redis Cluster: the
    grant is published across the cluster bus, and every waiter is served."""
    from tests.support.cluster import LocalCluster

    with LocalCluster(primaries=3, replicas_per_primary=1) as cluster:
        client = cluster.client(socket_timeout=1.0, socket_connect_timeout=1.0)
        name = "{hot}:lock"
        holder = Lock(client, name, timeout=120)
        assert holder.acquire(blocking=False)
        threads, served, errors = _queue_threads(client, name, 10)
        wait_for(lambda: client.zcard(holder.keys.queue) == 10, 20, "every thread queued")
        primary = client.get_node_from_key(name)
        assert client.get_redis_connection(primary).execute_command("WAIT", 1, 2000) == 1
        next(node for node in cluster.nodes if node.port == primary.port).kill()
        _eventually(holder.release, 60)
        released_at = time.monotonic()
        for thread in threads:
            thread.join(90)
        assert not errors, errors[:3]
        assert len(served) == 10
        assert min(served) - released_at < 0.5 + 1.0
        client.close()


# -- @locked(wait=...) behind an ASGI server ---------------------------------------------------------
async def _get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_300_concurrent_requests_to_an_async_locked_view_under_uvicorn(redis_servers):
    """An async view with ``@locked(wait=60)`` served by uvicorn (one worker process): 300
    requests queued behind a holder are answered 200 one at a time, in queue order, while the
    worker gives at most 4 connections over to waiting.  A request answered 409 must have waited its
    60 s (a loaded machine may take longer than that to queue and serve the 300): it left the queue
    at its deadline, and the others were still served in queue order."""
    import os
    import socket
    import subprocess
    import sys

    (server,) = redis_servers(1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "DCOORD_TEST_REDIS_URL": server.url, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "tests.asgi:application", "--port", str(port), "--log-level", "warning",
         "--limit-concurrency", "1000", "--backlog", "1024"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    client = server.client()
    try:
        def up() -> bool:
            assert worker.poll() is None, "uvicorn exited before it listened"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return True
            except OSError:
                return False

        # Its start-up (Django's, the app's) only has to end: the limit guards against a hang.
        wait_for(up, 120, "uvicorn to listen")
        # The holder keeps the lock until the test releases it, however long queueing the 300 takes.
        holder = Lock(client, "await:x", timeout=600)
        assert holder.acquire(blocking=False)

        async def main() -> tuple[list, list, int]:
            async def timed() -> tuple[int, bytes, float]:
                sent_at = time.monotonic()
                status, body = await _get(port, "/t/await/x/")
                return status, body, time.monotonic() - sent_at

            requests = [asyncio.create_task(timed()) for _ in range(300)]
            # Every request queued, or (past its wait, on a loaded machine) answered already.
            while client.zcard(holder.keys.queue) + sum(request.done() for request in requests) < 300:
                await asyncio.sleep(0.05)
            queue = client.zrange(holder.keys.queue, 0, -1)
            waiting = waiting_connections(server)
            holder.release()
            return await asyncio.gather(*requests), queue, waiting

        responses, queue, waiting = asyncio.run(main())
        assert {status for status, _, _ in responses} <= {200, 409}, {status for status, _, _ in responses}
        early = [took for status, _, took in responses if status == 409 and took < 60]
        assert not early, f"answered 409 before its wait of 60 s ended: after {early[:3]} s"
        rows = [body.split() for status, body, _ in responses if status == 200]
        assert {row[0] for row in rows} <= {b"1"}, "two requests were inside at once"
        served = [token for _, token in sorted((int(row[1]), row[2]) for row in rows)]
        assert served == [token for token in queue if token in set(served)], "not served in the order of the queue"
        assert waiting <= MAX_WAITING_CONNECTIONS, waiting
    finally:
        worker.terminate()
        output = worker.communicate(timeout=30)[0]
        client.close()
    assert b"Traceback" not in output, output.decode(errors="replace")[-3000:]


def test_a_grant_found_after_an_outage_is_measured_from_the_call_that_found_it(redis_servers):
    """Refreshes time out while the server stalls; the first one after it finds the lock free and
    takes it with a full TTL.  The hold's local deadline counts from that call, not from the last
    refresh before the stall (that made the hold expired already when acquire returned True)."""
    import socket

    from redis.backoff import NoBackoff
    from redis.retry import Retry

    (server,) = redis_servers(1)
    admin = server.client()
    holder = Lock(admin, "gap", timeout=0.5)
    assert holder.acquire(blocking=False)
    client = server.client(socket_timeout=0.2, retry=Retry(NoBackoff(), 0))
    waiter = Lock(client, "gap", timeout=1.0)  # refreshes every 0.25 s
    result: dict = {}

    def wait() -> None:
        result["acquired"] = waiter.acquire(blocking_timeout=10)
        result["valid"] = waiter.valid
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for(lambda: admin.zcard(holder.keys.queue) == 1, 5, "the waiter queued")
    stall = socket.create_connection((server.host, server.port))
    stall.sendall(b"DEBUG SLEEP 1.5\r\n")  # the holder's TTL ends meanwhile; the refreshes time out
    thread.join(15)
    stall.close()
    assert result == {"acquired": True, "valid": True}
    admin.close()
    client.close()


def test_a_hub_with_nobody_waiting_stops_when_its_server_goes_away(redis_servers, caplog, monkeypatch):
    """No reconnection attempts (and no warnings) for a waiting connection nobody needs: nobody
    reads it, and it is given back once idle."""
    server, client, hub = _after_one_wait(redis_servers, monkeypatch)
    assert hub._pubsub is not None
    caplog.set_level("DEBUG", logger="django_redis_coord")
    server.stop()
    wait_for(lambda: hub._pubsub is None and hub._closer is None, 5, "the hub to stop")
    assert not [r for r in caplog.records if "waiting connection" in r.getMessage()]


def test_a_grant_announced_for_an_earlier_call_is_not_taken_after_it_ended(redis_servers):
    """The announcement of a grant reaches the waiter late (its waiting connection stalls) after
    that grant ended and another client took the lock, and after the waiter's refresh queued it
    again: the waiter must not take the stale grant (both would hold the lock), but wait its turn."""
    from django_redis_coord.core.waiting import sync as waiting
    from django_redis_coord.core.waiting.rules import command_slots

    (server,) = redis_servers(1)
    client = server.client(max_connections=100)  # a bounded gate (redis-py before 8: 2**31 connections)
    holder = Lock(client, "stale", timeout=5)
    assert holder.acquire(blocking=False)
    result: dict = {}

    def wait() -> None:
        lock = Lock(client, "stale", timeout=0.3)
        result["acquired"] = lock.acquire(token="w", blocking_timeout=10)
        result["at"] = time.monotonic()
        result["fence"] = lock.fence
        lock.release()

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for(lambda: client.zscore(holder.keys.queue, "w") is not None, 5, "the waiter queued")
    hub = waiting.hub_for(client)
    # Every slot of the gate, so that no refresh gets through: taken one by one, each waited for,
    # as the waiter may be inside a refresh holding one (its next refresh would then get through
    # while the grant is valid, and rightly take it).
    slots = [hub._gate.acquire() for _ in range(command_slots(client))]
    with hub._reading:  # nobody reads the waiting connection: the announcement waits there
        holder.release()  # granted to "w" for 0.3 s and announced; the announcement waits in the hub
        time.sleep(0.6)  # the grant ends unseen
        other = Lock(client, "stale", timeout=5)
        assert other.acquire(blocking=False)
        for _ in slots:
            hub._gate.release()  # the waiter's refresh finds "other" holding: it queues again
        wait_for(lambda: client.zscore(holder.keys.queue, "w") is not None, 5, "the waiter queued again")
    time.sleep(0.3)  # the waiter reads the stale announcement now
    assert "acquired" not in result, "the waiter took a grant that had ended"
    other_fence = other.fence
    released_at = time.monotonic()
    other.release()
    thread.join(10)
    assert result["acquired"] and result["at"] >= released_at and result["fence"] > other_fence
    client.close()


class _SoftTimeLimit(Exception):
    """What a signal handler raises in the waiting thread (as Celery's soft time limit does)."""


@contextlib.contextmanager
def _soft_limit_once(ready: Any, what: str, then: Optional[Callable[[], Any]] = None) -> Iterator[None]:
    """Inside the block, once ``ready()``, the main thread gets a signal whose handler raises
    :class:`_SoftTimeLimit` (and ``then()`` is called a moment later); the block must raise it."""
    import signal

    def raise_soft_limit(signum: int, frame: Any) -> None:
        raise _SoftTimeLimit()

    def signal_once_ready() -> None:
        wait_for(ready, 10, what)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)  # type: ignore[arg-type]
        if then is not None:
            time.sleep(0.2)
            then()

    previous = signal.signal(signal.SIGUSR1, raise_soft_limit)
    try:
        killer = threading.Thread(target=signal_once_ready)
        killer.start()
        with pytest.raises(_SoftTimeLimit):
            yield
        killer.join(10)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_an_exception_a_signal_raises_while_the_waiter_reads_reaches_the_caller(redis_client):
    """The only waiter of a process reads the waiting connection itself: an exception a signal
    handler raises there (Celery's ``SoftTimeLimitExceeded``, an alarm-based timeout) ends the
    acquire as it would anywhere else, and is not taken for a dropped connection; the waiter
    leaves the queue and the hub serves the next one."""
    from django_redis_coord.core.waiting import sync as waiting

    holder = Lock(redis_client, "signalled", timeout=30)
    assert holder.acquire(blocking=False)
    hub = waiting.hub_for(redis_client)
    with _soft_limit_once(lambda: redis_client.zcard(holder.keys.queue) == 1 and hub._reading.locked(),
                          "the waiter to queue and read"):
        Lock(redis_client, "signalled", timeout=30).acquire(blocking_timeout=15)
    assert redis_client.zcard(holder.keys.queue) == 0  # the waiter left the queue
    assert not hub._reading.locked()
    holder.release()
    assert Lock(redis_client, "signalled", timeout=30).acquire(blocking_timeout=15)


class _WatchedReading:
    """The hub's reading lock, watched: the idle-closer's take of it is held until ``go``, and a
    waiter's refused take is seen (``refused``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.closer_in = threading.Event()
        self.go = threading.Event()
        self.refused = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self.lock.acquire(blocking, timeout)
        if got and threading.current_thread().name == "django_redis_coord waiting":
            self.closer_in.set()
            self.go.wait(30)
        elif not got:
            self.refused.set()
        return got

    def release(self) -> None:
        self.lock.release()

    def locked(self) -> bool:
        return self.lock.locked()


def test_a_waiter_that_comes_while_the_idle_closer_looks_is_handed_the_reading(redis_servers, monkeypatch):
    """The idle-closer takes the reading to look whether anyone waits; a waiter that queued and
    found the reading taken meanwhile is handed it when the closer lets go (the closer sees it
    and keeps the connection), so it takes its grant from the release's message, not from its
    refresh 30 s later."""
    from django_redis_coord.core.waiting import sync as waiting

    monkeypatch.setattr("django_redis_coord.core.waiting.sync.IDLE_SECONDS", 0.3)
    (server,) = redis_servers(1)
    client = server.client()
    hub = waiting.hub_for(client)
    reading = hub._reading = _WatchedReading()  # type: ignore[assignment]
    first = Lock(client, "first", timeout=0.2)
    assert first.acquire(blocking=False)
    assert Lock(client, "first", timeout=5).acquire(blocking_timeout=5)  # waits: subscribes the hub
    assert reading.closer_in.wait(10), "the idle-closer never looked"
    holder = Lock(client, "next", timeout=120)
    assert holder.acquire(blocking=False)
    result: dict = {}

    def wait() -> None:
        lock = Lock(client, "next", timeout=120, waiter_lease=90)  # refreshes every 30 s
        assert lock.refresh_interval == 30
        result["acquired"] = lock.acquire(blocking_timeout=60)
        result["at"] = time.monotonic()
        lock.release()

    reading.refused.clear()
    thread = threading.Thread(target=wait)
    thread.start()
    assert reading.refused.wait(10), "the waiter never found the reading taken"
    reading.go.set()  # the closer sees the waiter, keeps the connection and lets the reading go
    wait_for(lambda: reading.locked(), 10, "the waiter to read")
    released_at = time.monotonic()
    holder.release()
    thread.join(60)
    assert result["acquired"]
    assert result["at"] - released_at < 15, "woken by its refresh, not by the release's message"
    client.close()


def test_a_waiter_interrupted_while_it_subscribes_is_not_kept(redis_servers):
    """The first waiter of a hub reads until its subscription is confirmed: an exception a signal
    handler raises there ends the acquire and takes the waiter off the hub (a waiter kept there
    would be handed the reading and never read, and the hub would never idle)."""
    from django_redis_coord.core.waiting import sync as waiting

    (server,) = redis_servers(1)
    client = server.client()
    holder = Lock(client, "interrupted", timeout=30)
    assert holder.acquire(blocking=False)
    hub = waiting.hub_for(client)
    waiter = Lock(client, "interrupted", timeout=30)
    # As after a blocking acquire that found the lock taken: the next one registers with the hub
    # (and so subscribes) before its first call, instead of trying first.
    waiter.line.contended = True
    server.pause()  # the subscription waits for the server's reply
    try:
        # The interrupted acquire is undone in Redis (it may have queued): the server answers again
        # once the signal has landed, or the undo would wait for it for good (no socket timeout).
        with _soft_limit_once(hub._reading.locked, "the waiter to subscribe", then=server.resume):
            waiter.acquire(blocking_timeout=15)
    finally:
        server.resume()
    assert not hub._waiters, "the interrupted waiter is still registered"
    client.close()


def test_1000_asyncio_tasks_that_start_at_once_stay_within_the_pool(redis_servers):
    """Their first tries, made before they register, go through the hub's gate like every later
    call: the default pool (100 connections at most) is not asked for 1000 at once.  All 1000 queue
    without an error; then they are cancelled together, and their give-backs (1000 calls at once
    again) leave the queue empty, without an error either."""
    (server,) = redis_servers(1)

    async def main() -> None:
        client = redis.asyncio.Redis(host=server.host, port=server.port)
        try:
            holder = AsyncLock(client, "at-once", timeout=60)
            assert await holder.acquire(blocking=False)

            async def one() -> None:
                lock = AsyncLock(client, "at-once", timeout=60)
                await lock.acquire(blocking=True)  # no deadline: the calls are under test, not the wait
                raise AssertionError("granted while the holder holds")

            tasks = [asyncio.create_task(one()) for _ in range(1000)]  # no yield in between
            while await client.zcard(holder.keys.queue) < 1000 and not any(t.done() for t in tasks):
                await asyncio.sleep(0.05)
            finished = [t for t in tasks if t.done()]
            assert not finished, [t.exception() for t in finished[:3]]  # a pool error ends a task early
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            errors = [result for result in results if not isinstance(result, asyncio.CancelledError)]
            assert not errors, errors[:3]
            assert await client.zcard(holder.keys.queue) == 0, "a cancelled waiter stayed in the queue"
            assert await holder.locked() and await holder.owned()
            await holder.release()
        finally:
            await client.aclose()

    asyncio.run(main())
