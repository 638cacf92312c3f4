"""Locks through Sentinel (a primary, a replica, three sentinels), a failover, and durable grants.

The failover test kills the primary; Sentinel promotes the replica.  Meanwhile every lock call
ends with a clear redis-py error within its socket timeouts (never a hang), and afterwards lock
operations resume on the new primary.
"""

from __future__ import annotations

import threading
import time

import pytest
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from django_redis_coord import Lock, LockLostError, Semaphore
from django_redis_coord.core.durable.sync import DurableLock, ReplicationNotAcknowledged
from django_redis_coord.testing.server import RedisServer
from tests.support.cluster import LocalSentinel, wait_until

SERVICE = "coord"
#: Small timeouts and a single retry: a call to a dead primary fails fast instead of backing off.
CLIENT_OPTIONS = {
    "socket_timeout": 0.5,
    "socket_connect_timeout": 0.5,
    "retry": Retry(NoBackoff(), 1),
}


@pytest.fixture(scope="module")
def deployment():
    local = LocalSentinel(service=SERVICE).start()
    yield local
    local.stop()


@pytest.fixture
def primary(deployment):
    client = deployment.sentinel().master_for(SERVICE, **CLIENT_OPTIONS)
    client.flushall()
    client.execute_command("WAIT", 1, 2000)
    yield client
    client.close()


def test_sentinel_finds_the_primary(deployment, primary):
    assert deployment.current_primary_port() == deployment.primary.port
    assert primary.info("replication")["role"] == "master"


def test_lock_through_sentinel(deployment, primary):
    lock = Lock(primary, "through-sentinel", timeout=10)
    assert lock.acquire(blocking=False)
    assert Lock(primary, "through-sentinel", timeout=10).acquire(blocking=False) is False
    assert lock.extend(5)
    # The hold reaches the replica (asynchronously; WAIT makes sure before looking).
    assert primary.execute_command("WAIT", 1, 2000) == 1
    replica = deployment.sentinel().slave_for(SERVICE, socket_timeout=1)
    assert replica.get("through-sentinel") == lock.local.token
    lock.release()


def test_waiting_and_handoff_through_sentinel(primary):
    holder = Lock(primary, "handoff", timeout=10)
    holder.acquire()
    result = {}

    def wait() -> None:
        waiter = Lock(primary, "handoff", timeout=10)
        result["acquired"] = waiter.acquire(blocking_timeout=5)
        result["fence"] = waiter.fence
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    fence = holder.fence
    holder.release()
    thread.join(10)
    assert result["acquired"] and result["fence"] > fence


def test_semaphore_through_sentinel(primary):
    semaphore = Semaphore(primary, "sentinel-pool", limit=2, timeout=10)
    assert semaphore.acquire(blocking=False) and semaphore.acquire(blocking=False)
    assert semaphore.acquire(blocking=False) is False
    assert semaphore.release() and semaphore.release()


def test_settings_connect_through_sentinel(deployment, settings):
    from django_redis_coord.config.connection import get_client
    from django_redis_coord.config.shortcuts import lock

    settings.DJANGO_REDIS_COORD = {
        "SENTINEL": {"SENTINELS": deployment.sentinel_addresses, "SERVICE_NAME": SERVICE, "DB": 0},
    }
    client = get_client()
    assert client.connection_pool.service_name == SERVICE
    with lock("from-settings", timeout=5) as held:
        direct = deployment.primary.client()
        assert direct.get("from-settings") == held.local.token


# -- durable grants ------------------------------------------------------------------------------
def test_durable_lock_is_acknowledged_by_the_replica(deployment, primary):
    lock = DurableLock(primary, "durable", timeout=10, replicas=1, replica_timeout=2)
    assert lock.acquire(blocking=False)
    # Acknowledged: the replica has the hold without any further wait.
    replica = deployment.replicas[0].client(socket_timeout=1)
    assert replica.get("durable") == lock.local.token
    assert lock.extend(5)
    lock.release()


def test_durable_lock_covers_a_grant_handed_over_by_another_release(deployment, primary):
    holder = Lock(primary, "durable-handoff", timeout=10)
    holder.acquire()
    result = {}

    def wait() -> None:
        waiter = DurableLock(primary, "durable-handoff", timeout=10, replicas=1, replica_timeout=2)
        result["acquired"] = waiter.acquire(blocking_timeout=5)
        result["replica"] = deployment.replicas[0].client(socket_timeout=1).get("durable-handoff")
        result["token"] = waiter.local.token
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    holder.release()
    thread.join(10)
    assert result["acquired"] and result["replica"] == result["token"]


def _primary_with_replica(redis_servers) -> tuple[RedisServer, RedisServer]:
    (primary,) = redis_servers(1)
    (replica,) = redis_servers(1, args=["--replicaof", primary.host, str(primary.port)])
    wait_until(lambda: replica.client().info("replication")["master_link_status"] == "up", 10,
               what="the replica in sync")
    return primary, replica


def test_durable_lock_fails_closed_when_the_replica_is_paused(redis_servers):
    primary, replica = _primary_with_replica(redis_servers)
    client = primary.client(socket_timeout=5)
    lock = DurableLock(client, "paused-replica", timeout=10, replicas=1, replica_timeout=0.3)
    assert lock.acquire(blocking=False)
    lock.release()
    replica.pause()
    started = time.monotonic()
    with pytest.raises(ReplicationNotAcknowledged) as info:
        lock.acquire(blocking=False)
    assert 0.3 <= time.monotonic() - started < 2.0
    assert info.value.acknowledged == 0 and info.value.required == 1
    # Failed closed: not held here, and released on the primary.
    assert lock.local.token is None and not lock.valid
    assert client.get("paused-replica") is None
    replica.resume()
    assert lock.acquire(blocking=False)
    lock.release()


def test_durable_lock_fails_closed_when_the_replica_is_gone(redis_servers):
    primary, replica = _primary_with_replica(redis_servers)
    client = primary.client(socket_timeout=5)
    replica.kill()
    wait_until(lambda: client.info("replication")["connected_slaves"] == 0, 10, what="the primary to notice")
    lock = DurableLock(client, "gone-replica", timeout=10, replicas=1, replica_timeout=0.2)
    with pytest.raises(ReplicationNotAcknowledged):
        lock.acquire(blocking=False)
    assert client.get("gone-replica") is None
    with pytest.raises(LockLostError):
        lock.confirm()


def test_asyncio_durable_lock(redis_servers):
    import asyncio

    from django_redis_coord.core.durable.aio import DurableLock as AsyncDurableLock

    primary, replica = _primary_with_replica(redis_servers)

    async def main() -> None:
        client = primary.async_client(socket_timeout=5)
        lock = AsyncDurableLock(client, "aio-durable", timeout=10, replicas=1, replica_timeout=2)
        async with lock:
            assert replica.client().get("aio-durable") == lock.local.token
        replica.pause()
        try:
            fast = AsyncDurableLock(client, "aio-durable", timeout=10, replicas=1, replica_timeout=0.2)
            with pytest.raises(ReplicationNotAcknowledged):
                await fast.acquire(blocking=False)
            assert await client.get("aio-durable") is None
        finally:
            replica.resume()
        await client.aclose()

    asyncio.run(main())


def test_asyncio_durable_lock_cancelled_twice_while_confirming_gives_its_grant_back(redis_servers):
    """A task cancelled while its grant waits for the replica, and cancelled again while giving the
    grant back, still gives it back (not left to its 30 s TTL)."""
    import asyncio

    from django_redis_coord.core.durable.aio import DurableLock as AsyncDurableLock

    primary, replica = _primary_with_replica(redis_servers)

    async def main() -> None:
        client = primary.async_client(socket_timeout=10)
        lock = AsyncDurableLock(client, "aio-durable-cancelled", timeout=30, replicas=1, replica_timeout=8)
        replica.pause()
        try:
            task = asyncio.ensure_future(lock.acquire(blocking=False))
            deadline = time.monotonic() + 5
            while await client.get("aio-durable-cancelled") is None:  # granted, now waiting for the replica
                assert time.monotonic() < deadline, "no grant"
                await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.sleep(0)  # the task is now giving the grant back
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            deadline = time.monotonic() + 5
            while await client.get("aio-durable-cancelled") is not None:
                assert time.monotonic() < deadline, "the unconfirmed grant was not given back"
                await asyncio.sleep(0.01)
        finally:
            replica.resume()
        await client.aclose()

    asyncio.run(main())


def test_durable_lock_bad_arguments(redis_client):
    from django_redis_coord import InvalidLockArgument, InvalidLockArgumentType

    with pytest.raises(InvalidLockArgument):
        DurableLock(redis_client, "x", replicas=0)
    with pytest.raises(InvalidLockArgumentType):
        DurableLock(redis_client, "x", replicas="1")
    with pytest.raises(InvalidLockArgument):
        DurableLock(redis_client, "x", replica_timeout=0)
    assert redis_client.dbsize() == 0


# -- failover (last: it replaces the primary of the module's deployment) --------------------------------
def test_failover_lock_operations_resume_and_the_gap_fails_fast(deployment):
    sentinel = deployment.sentinel()
    client = sentinel.master_for(SERVICE, **CLIENT_OPTIONS)
    old_port = deployment.current_primary_port()
    holder = Lock(client, "survives", timeout=60)
    holder.acquire()
    first_fence = holder.fence
    assert client.execute_command("WAIT", 1, 2000) == 1  # the hold is on the replica too

    deployment.server_on(old_port).kill()
    killed_at = time.monotonic()
    errors: list[str] = []
    resumed = None
    while time.monotonic() - killed_at < 25:
        attempt = Lock(client, "during-failover", timeout=5)
        started = time.monotonic()
        try:
            if attempt.acquire(blocking=False):
                resumed = attempt
                break
        except RedisError as exc:  # a clear redis-py error (connection refused, read-only replica, ...)
            errors.append(type(exc).__name__)
        finally:
            # Every call ends within its timeouts: never a hang.
            assert time.monotonic() - started < 3.0
        time.sleep(0.1)
    assert resumed is not None, f"lock operations did not resume within 25 s (errors: {errors})"
    assert errors, "the gap should have been visible as errors"
    new_port = deployment.current_primary_port()
    assert new_port != old_port and new_port == deployment.replicas[0].port
    # The acknowledged hold survived the failover; the new primary's fences keep growing.
    assert holder.owned()
    assert resumed.fence > first_fence
    holder.release()
    resumed.release()
    again = Lock(client, "survives", timeout=5)
    assert again.acquire(blocking=False) and again.fence > first_fence
    again.release()
