"""Renewals under a full Redis: ``maxmemory`` reached with ``noeviction`` (what ``check --deploy``
recommends).  Redis then refuses a script's first command that may need more memory (SET, HSET,
ZADD, ...) unless the script already wrote; a renewal needs no new memory and must not fail for
want of it, and a release must still free what it held.  Each test runs on a private server."""

from __future__ import annotations

import time

import pytest
import redis

from django_redis_coord import Leader, Lock, ReadWriteLock, Semaphore

# Each test fills a server while its holds live on 5 s TTLs (the renewals check what a 5 s hold
# becomes): filling must not be slowed by other tests, so these run alone (tests/README.md).
pytestmark = pytest.mark.serial


def fill_up(client: redis.Redis) -> None:
    """Write 2 MB, then set ``maxmemory`` below what the server uses: every write that may need
    memory is refused from then on."""
    blob = b"x" * 1024
    for number in range(2048):
        client.set(f"filler:{number}", blob)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 256 * 1024)
    with pytest.raises(redis.exceptions.OutOfMemoryError):  # full: a plain write is refused
        client.set("one-more", b"y")


@pytest.fixture
def full_client(redis_servers):
    server = redis_servers(1)[0]
    client = server.client()
    yield client
    client.close()


def test_a_lock_renews_and_releases_on_a_full_redis(full_client):
    lock = Lock(full_client, "full-lock", timeout=5)
    forever = Lock(full_client, "full-forever", timeout=5)
    assert lock.acquire(blocking=False) and forever.acquire(blocking=False)
    fill_up(full_client)
    renewals = [(lambda: lock.extend(10), 10_000, 15_000), (lambda: lock.extend(3, replace_ttl=True), 2_000, 3_000),
                (lock.reacquire, 4_000, 5_000)]
    for renew, low, high in renewals:  # add, replace, reset: each one renews
        assert renew()
        assert low < full_client.pttl("full-lock") <= high
    lock.release()
    forever.release()
    assert full_client.exists("full-lock", "full-forever") == 0


def test_a_semaphore_permit_renews_and_releases_on_a_full_redis(full_client):
    semaphore = Semaphore(full_client, "full-sem", limit=3, timeout=5)
    assert semaphore.acquire(blocking=False)
    fill_up(full_client)
    assert semaphore.extend(10)
    token = full_client.zrange("full-sem", 0, -1)[0]
    assert 10_000 < full_client.zscore("full-sem", token) - 1000 * full_client.time()[0] <= 16_000
    assert semaphore.reacquire()
    semaphore.release()
    assert full_client.zcard("full-sem") == 0


@pytest.mark.parametrize("mode", ["read", "write"])
def test_a_read_write_lock_renews_and_releases_on_a_full_redis(full_client, mode):
    rw = ReadWriteLock(full_client, "full-rw", timeout=5)
    side = getattr(rw, mode)
    assert side.acquire(blocking=False)
    fill_up(full_client)
    assert side.extend(10)
    token = full_client.zrange("full-rw", 0, -1)[0]
    assert 10_000 < full_client.zscore("full-rw", token) - 1000 * full_client.time()[0] <= 16_000
    side.release()
    assert full_client.zcard("full-rw") == 0


def test_auto_renewed_holds_and_a_leader_keep_their_holds_on_a_full_redis(full_client):
    """The watchdog renews at a third of the TTL: a hold it renews outlives its TTL many times over."""
    lost = []
    lock = Lock(full_client, "full-auto", timeout=1.5, auto_renew=True, on_lost=lost.append)
    semaphore = Semaphore(full_client, "full-auto-sem", limit=2, timeout=1.5, auto_renew=True, on_lost=lost.append)
    rw = ReadWriteLock(full_client, "full-auto-rw", timeout=1.5, auto_renew=True, on_lost=lost.append)
    leader = Leader(full_client, "full-leader", lease=1.5)
    try:
        assert lock.acquire(blocking=False) and semaphore.acquire(blocking=False) and rw.read.acquire(blocking=False)
        assert leader.campaign(blocking_timeout=5) and leader.is_leader
        fill_up(full_client)
        time.sleep(4.5)  # three TTLs: a hold not renewed in that time is gone
        assert lost == []
        assert lock.owned() and lock.valid
        assert semaphore.valid and rw.read.valid
        assert leader.is_leader
    finally:
        leader.resign()
    lock.release()
    semaphore.release()
    rw.read.release()
    assert full_client.exists("full-auto", "full-auto-sem", "full-auto-rw", "full-leader") == 0
