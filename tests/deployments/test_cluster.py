"""Every primitive on a real Redis Cluster of 3 primaries + 3 replicas started by the suite.

Clients are ``redis.cluster.RedisCluster`` and ``redis.asyncio.cluster.RedisCluster``; names are
chosen so that each of the three primaries serves some of them.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
from redis.cluster import RedisCluster
from redis.exceptions import LockNotOwnedError

from django_redis_coord import Lock, Semaphore, lock_holder
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.asyncio import Semaphore as AsyncSemaphore
from django_redis_coord.core.keys import key_slot, keys_for
from django_redis_coord.core.listing import HolderListing
from tests.support.cluster import LocalCluster, wait_until
from tests.support.procs import run_processes


@pytest.fixture(scope="module")
def cluster():
    local = LocalCluster(primaries=3, replicas_per_primary=1).start()
    yield local
    local.stop()


@pytest.fixture
def client(cluster):
    cluster.flushall()
    client = cluster.client(socket_timeout=5)
    yield client
    client.close()


def names_per_primary(client: RedisCluster, prefix: str, per_primary: int = 1) -> dict[str, list[str]]:
    """``per_primary`` names served by each primary, keyed by the primary's ``host:port``."""
    found: dict[str, list[str]] = {node.name: [] for node in client.get_primaries()}
    index = 0
    while any(len(names) < per_primary for names in found.values()):
        name = f"{prefix}:{index}"
        index += 1
        owner = client.get_node_from_key(name).name
        if len(found[owner]) < per_primary:
            found[owner].append(name)
    return found


def test_the_deployment_is_three_primaries_with_a_replica_each(cluster, client):
    assert len(cluster.primary_nodes()) == 3 and len(cluster.replica_nodes()) == 3
    assert len(client.get_primaries()) == 3
    assert len(client.get_replicas()) == 3


def test_lock_on_every_primary(cluster, client):
    for owner, (name,) in names_per_primary(client, "order").items():
        lock = Lock(client, name, timeout=10, label="cluster")
        assert lock.acquire(blocking=False), owner
        # The lock lives on the primary that serves its slot, side keys included.
        primary = client.get_node_from_key(name)
        direct = client.get_redis_connection(primary)
        assert direct.get(name) == lock.local.token
        assert key_slot(keys_for(name.encode()).meta) == key_slot(name.encode())
        assert direct.exists(keys_for(name.encode()).meta)
        holder = lock_holder(client, name)
        assert holder is not None and holder.fence == lock.fence and holder.label == "cluster"
        assert Lock(client, name, timeout=10).acquire(blocking=False) is False
        assert lock.extend(10)
        assert 15000 < client.pttl(name) <= 20000
        first = lock.fence
        lock.release()
        assert client.get(name) is None and lock_holder(client, name) is None
        again = Lock(client, name, timeout=10)
        assert again.acquire(blocking=False) and again.fence > first
        again.release()


def test_names_with_hash_tags_keep_their_keys_in_one_slot(client):
    for name in ["user:{42}:cart", "a}b", "{}", "é{ü}"]:
        with Lock(client, name, timeout=5) as lock:
            assert client.get(name) == lock.local.token  # a CROSSSLOT error would have been raised


def test_fifo_handoff_to_blocked_waiters(client):
    name = "queue:fifo"
    holder = Lock(client, name, timeout=30)
    holder.acquire()
    order: list[int] = []
    acquired_at: dict[int, float] = {}
    done = threading.Event()

    def wait(index: int) -> None:
        lock = Lock(client, name, timeout=30)
        assert lock.acquire(blocking_timeout=20)
        acquired_at[index] = time.monotonic()
        order.append(index)
        time.sleep(0.02)
        lock.release()
        if len(order) == 3:
            done.set()

    queue_key = keys_for(name.encode()).queue
    threads = []
    for index in range(3):
        thread = threading.Thread(target=wait, args=(index,))
        thread.start()
        threads.append(thread)
        wait_until(lambda n=index + 1: client.zcard(queue_key) == n, 10, what=f"{index + 1} queued waiters")
    released_at = time.monotonic()
    holder.release()
    assert done.wait(20)
    for thread in threads:
        thread.join(5)
    assert order == [0, 1, 2]
    # Handed over server-side and woken through the waiter's own list (BLPOP on its primary).
    assert acquired_at[0] - released_at < 1.0


def _contend(startup_nodes: list[tuple[str, int]], name: str, rounds: int) -> list[tuple[int, int, int]]:
    from redis.cluster import ClusterNode

    client = RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in startup_nodes])
    counter = name + ":counter"
    spans = []
    for _ in range(rounds):
        lock = Lock(client, name, timeout=10)
        lock.acquire(blocking_timeout=30)
        start = time.monotonic_ns()
        value = int(client.get(counter) or 0)  # unprotected read-modify-write
        time.sleep(0.0005)
        client.set(counter, value + 1)
        end = time.monotonic_ns()
        spans.append((start, end, lock.fence))
        lock.release()
    client.close()
    return spans


def test_mutual_exclusion_across_processes(cluster, client):
    name = "{shared}:job"  # the counter shares the hash tag, so it sits on the same primary
    results = run_processes(_contend, [(cluster.startup_nodes, name, 25)] * 3, timeout=120)
    spans = sorted(span for result in results for span in result)
    assert len(spans) == 75
    for earlier, later in zip(spans, spans[1:]):
        assert earlier[1] <= later[0], "two processes held the lock at the same time"
        assert earlier[2] < later[2], "fences must grow in grant order"
    assert int(client.get(name + ":counter")) == 75


def test_watchdog_renews_on_the_cluster(client):
    lock = Lock(client, "renewed", timeout=0.5, auto_renew=True)
    lock.acquire()
    time.sleep(1.6)
    valid = lock.valid and lock.owned()
    try:
        lock.release()
    except LockNotOwnedError:
        assert not valid
    assert valid


def test_semaphore_on_every_primary(client):
    for owner, (name,) in names_per_primary(client, "pool").items():
        semaphore = Semaphore(client, name, limit=2, timeout=10)
        first = semaphore.acquire(blocking=False)
        second = semaphore.acquire(blocking=False)
        assert first and second, owner
        assert semaphore.acquire(blocking=False) is False
        assert semaphore.get_current_size() == 2
        assert semaphore.release()
        assert semaphore.acquire(blocking=False)


def test_semaphore_watchdog_renews_on_the_cluster(client):
    semaphore = Semaphore(client, "renewed-pool", limit=2, timeout=0.5, auto_renew=True)
    assert semaphore.acquire(blocking=False)
    time.sleep(1.6)
    assert semaphore.valid and semaphore.get_current_size() == 1
    assert semaphore.release()


def test_semaphore_waiter_is_handed_a_permit(client):
    name = "pool:handoff"
    holder = Semaphore(client, name, limit=1, timeout=30)
    assert holder.acquire()
    result: dict[str, object] = {}

    def wait() -> None:
        waiter = Semaphore(client, name, limit=1, timeout=30)
        result["acquired"] = waiter.acquire(blocking=True, blocking_timeout=10)
        result["fence"] = waiter.fence
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: client.zcard(keys_for(name.encode(), b"sem").queue) == 1, 10, what="a queued waiter")
    fence = holder.fence
    holder.release()
    thread.join(10)
    assert result["acquired"] is True and result["fence"] > fence


def test_listing_reads_every_primary(client):
    held = []
    for names in names_per_primary(client, "listed", per_primary=2).values():
        for name in names:
            lock = Lock(client, name, timeout=30, label="listed")
            lock.acquire()
            held.append(lock)
    semaphore = Semaphore(client, "listed-pool", limit=3, timeout=30)
    semaphore.acquire()
    found = {(holder.name, holder.kind) for holder in HolderListing(client).holders()}
    assert {(lock.name, "lock") for lock in held} <= found
    assert ("listed-pool", "sem") in found
    for lock in held:
        lock.release()
    semaphore.release()
    assert not {(lock.name, "lock") for lock in held} & {(h.name, h.kind) for h in HolderListing(client).holders()}


def test_asyncio_lock_and_semaphore(cluster):
    async def main() -> None:
        client = cluster.async_client(socket_timeout=5)
        names = names_per_primary(cluster.client(), "aio")
        for name, in names.values():
            lock = AsyncLock(client, name, timeout=10)
            assert await lock.acquire(blocking=False)
            assert await lock.owned()
            waiter = AsyncLock(client, name, timeout=10, thread_local=False)  # acquired in another task
            task = asyncio.create_task(waiter.acquire(blocking_timeout=10))
            await asyncio.sleep(0.2)
            assert not task.done()
            fence = lock.fence
            await lock.release()
            assert await asyncio.wait_for(task, 10)
            assert waiter.fence > fence
            assert await waiter.extend(5)
            await waiter.release()
        semaphore = AsyncSemaphore(client, "aio-pool", limit=1, timeout=10)
        assert await semaphore.acquire(blocking=False)
        assert await AsyncSemaphore(client, "aio-pool", limit=1, timeout=10).acquire(blocking=False) is False
        assert await semaphore.release()
        await client.aclose()

    asyncio.run(main())


@pytest.mark.serial  # renewals of a 0.5 s hold: beside three busy workers one came too late
def test_asyncio_watchdog_renews_on_the_cluster(cluster):
    async def main() -> bool:
        client = cluster.async_client(socket_timeout=5)
        # Renewed every third of a 3 s TTL: outliving two TTLs shows the renewals; a shorter TTL
        # measured the machine (a 0.5 s one was lost beside a loaded run, as the watchdog says it must be).
        lock = AsyncLock(client, "aio-renewed", timeout=3, auto_renew=True)
        await lock.acquire()
        await asyncio.sleep(7)
        valid = lock.valid and await lock.owned()
        try:
            await lock.release()
        except LockNotOwnedError:
            assert not valid
        finally:
            await client.aclose()
        return valid

    assert asyncio.run(main())


def test_the_asyncio_waiting_connection_opens_on_a_client_that_ran_nothing_yet(cluster):
    """The hub subscribes through a fresh asyncio cluster client: its pub/sub looks the channel's
    slot up in the client's slot table, which the client fills on its first command only (a
    blocking acquire that tries first hid this; the hub must not rely on its caller)."""
    from django_redis_coord.core.waiting import aio as waiting

    async def main() -> bool:
        client = cluster.async_client(socket_timeout=5)
        try:
            hub = waiting.hub_for(client)
            waiter = await hub.register(client, 10.0)  # returns once subscribed (or after 10 s)
            hub.unregister(waiter)
            return hub._subscribed
        finally:
            await client.aclose()

    assert asyncio.run(main())


def test_durable_lock_on_the_cluster(client):
    from django_redis_coord.core.durable.sync import DurableLock

    for (name,) in names_per_primary(client, "durable").values():
        lock = DurableLock(client, name, timeout=10, replicas=1, replica_timeout=2)
        assert lock.acquire(blocking=False)
        # Acknowledged by the replica of the primary that serves the name: it has the hold already.
        primary = client.get_redis_connection(client.get_node_from_key(name))
        replica_port = int(primary.info("replication")["slave0"]["port"])
        replica = redis.Redis(port=replica_port, single_connection_client=True, socket_timeout=2)
        replica.execute_command("READONLY")
        assert replica.get(name) == lock.local.token
        replica.close()
        lock.release()


# -- the Django surfaces, configured for the cluster -----------------------------------------------
@pytest.fixture
def cluster_settings(cluster, settings):
    settings.DJANGO_REDIS_COORD = {"CLUSTER": {"STARTUP_NODES": cluster.startup_nodes}}
    return settings


def test_locked_and_the_settings_client_use_the_cluster(client, cluster_settings):
    from django_redis_coord import locked
    from django_redis_coord.config.connection import get_client

    assert isinstance(get_client(), RedisCluster)
    seen = []

    @locked("nightly-{day}", timeout=10)
    def job(day: str) -> None:
        seen.extend((holder.name, holder.kind) for holder in HolderListing(client).holders())

    job("monday")
    assert ("nightly-monday", "lock") in seen
    assert client.get("nightly-monday") is None


def test_locks_command_lists_every_primary(client, cluster_settings):
    import io
    import json

    from django.core.management import call_command

    held = [Lock(client, name, timeout=30) for names in names_per_primary(client, "cmd").values() for name in names]
    for lock in held:
        lock.acquire()
    out = io.StringIO()
    call_command("locks", "list", "--json", stdout=out, stderr=io.StringIO())
    listed = {entry["name"] for entry in json.loads(out.getvalue())}
    assert {lock.name for lock in held} <= listed
    for lock in held:
        lock.release()


@pytest.mark.django_db
def test_admin_page_lists_every_primary(client, cluster_settings, django_user_model):
    from django.test import Client
    from django.urls import reverse

    held = [Lock(client, name, timeout=30) for names in names_per_primary(client, "adm").values() for name in names]
    for lock in held:
        lock.acquire()
    user = django_user_model.objects.create_user("root", password=None, is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(user)
    response = browser.get(reverse("admin:django_redis_coord_holder_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    for lock in held:
        assert lock.name in html
    for lock in held:
        lock.release()


# -- rate limits ---------------------------------------------------------------------------------------
def test_rate_limits_on_every_primary(cluster, client):
    from django_redis_coord import RateLimit, SlidingWindowLimit
    from django_redis_coord.asyncio import RateLimit as AsyncRateLimit

    names = [name for found in names_per_primary(client, "rate").values() for name in found]
    for name in [*names, "{tag}x", "a}b", "x" * 5000]:
        for limit in (RateLimit(client, name, "2/m"), SlidingWindowLimit(client, name, "2/m")):
            assert [limit.hit().allowed for _ in range(3)] == [True, True, False]
            assert not limit.peek().allowed and limit.reset()
    for name in names:
        limit = RateLimit(client, name, "2/s", burst=1)
        first = limit.hit()
        reply = limit.acquire(wait=1)  # reserved in the one script call, on the name's primary
        assert reply.allowed and reply.server_time + reply.waited == pytest.approx(first.server_time + 0.5, abs=2e-6)

    async def main() -> None:
        async_client = cluster.async_client(socket_timeout=5)
        for name in names:
            limit = AsyncRateLimit(async_client, name, "2/s", burst=1)
            first = await limit.hit()
            reply = await limit.acquire(wait=1)
            assert reply.allowed and reply.server_time + reply.waited == pytest.approx(first.server_time + 0.5,
                                                                                        abs=2e-6)
        await async_client.aclose()

    asyncio.run(main())


# -- failover (last: it kills a primary of the module's cluster) ---------------------------------------
def test_primary_failover_lock_operations_resume(cluster):
    from redis.exceptions import RedisError

    client = cluster.client(socket_timeout=0.5, socket_connect_timeout=0.5)
    name = "{failover}:job"  # both names share the hash tag: the same slot, the same primary
    holder = Lock(client, name, timeout=60)
    holder.acquire()
    first_fence = holder.fence
    primary = client.get_node_from_key(name)
    direct = client.get_redis_connection(primary)
    assert direct.execute_command("WAIT", 1, 2000) == 1  # the hold is on the replica too
    victim = next(node for node in cluster.nodes if node.port == primary.port)
    victim.kill()
    killed_at = time.monotonic()
    errors: list[str] = []
    resumed = None
    while time.monotonic() - killed_at < 30:
        attempt = Lock(client, "{failover}:other", timeout=5)
        started = time.monotonic()
        try:
            if attempt.acquire(blocking=False):
                resumed = attempt
                break
        except RedisError as exc:
            errors.append(type(exc).__name__)
        finally:
            assert time.monotonic() - started < 10.0  # every call ends, with an error or a result
        time.sleep(0.1)
    assert resumed is not None, f"lock operations did not resume within 30 s (errors: {errors})"
    assert errors, "the gap should have been visible as errors"
    assert client.get_node_from_key(name).port != primary.port  # a replica took over the slot
    # The acknowledged hold survived; fences keep growing on the promoted replica.
    assert holder.owned()
    assert resumed.fence > first_fence
    holder.release()
    resumed.release()
    again = Lock(client, name, timeout=5)
    assert again.acquire(blocking=False) and again.fence > first_fence
    again.release()
    client.close()
