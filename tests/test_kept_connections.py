"""A sync lock's hold keeps the pooled connection it was granted on until its release (locks.Link)."""

from __future__ import annotations

import gc
import threading
import time

import pytest
import redis

from django_redis_coord import Lock, Semaphore
from django_redis_coord import locks as locks_module


def in_use(client: redis.Redis) -> int:
    return len(client.connection_pool._in_use_connections)


@pytest.fixture
def client(redis_server):
    """A client with a pool of its own (the counts below are of its connections only)."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


def test_a_hold_keeps_its_connection_and_the_release_gives_it_back(client):
    lock = Lock(client, "kept", timeout=5)
    assert lock.acquire(blocking=False)
    assert in_use(client) == 1
    kept = lock._state().link.conn
    lock.release()
    assert in_use(client) == 0
    assert client.get("kept") is None
    # The release went out on the kept connection: it is back in the pool, still open.
    assert kept in client.connection_pool._available_connections
    assert kept._sock is not None


def test_a_refused_or_timed_out_acquire_keeps_nothing(client):
    holder = Lock(client, "busy", timeout=5)
    assert holder.acquire(blocking=False)
    other = Lock(client, "busy", timeout=5)
    assert not other.acquire(blocking=False)
    assert not other.acquire(blocking_timeout=0.05)
    assert in_use(client) == 1  # the holder's
    holder.release()
    assert in_use(client) == 0


def test_a_handed_over_hold_keeps_the_connection_it_waited_on(client, redis_server):
    other_client = redis_server.client()
    holder = Lock(other_client, "handed", timeout=5)
    assert holder.acquire()
    got = threading.Event()
    waiter = Lock(client, "handed", timeout=5, thread_local=False)

    def wait() -> None:
        assert waiter.acquire(blocking_timeout=10)
        got.set()

    thread = threading.Thread(target=wait)
    thread.start()
    deadline = time.monotonic() + 5
    while not client.zcard(waiter.keys.queue) and time.monotonic() < deadline:
        time.sleep(0.005)
    holder.release()
    thread.join(10)
    assert got.is_set()
    # One connection for the queueing call and the wait, kept by the hold (plus none for the zcard
    # polls above, which came back to the pool).
    assert in_use(client) == 1
    waiter.release()
    assert in_use(client) == 0
    assert client.get("handed") is None
    other_client.close()


def test_a_release_after_the_server_closed_the_kept_connection_goes_through_the_pool(client, redis_server):
    lock = Lock(client, "killed", timeout=5)
    assert lock.acquire(blocking=False)
    admin = redis_server.client()
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
    time.sleep(0.05)  # the close reaches the client's socket
    lock.release()
    assert client.get("killed") is None
    assert in_use(client) == 0
    admin.close()


def test_at_most_so_many_holds_per_pool_keep_their_connection(client, monkeypatch):
    monkeypatch.setattr(locks_module, "PINNED_PER_POOL", 2)
    locks = [Lock(client, f"capped{i}", timeout=5) for i in range(4)]
    for lock in locks:
        assert lock.acquire(blocking=False)
    assert in_use(client) == 2
    assert [getattr(lock._state(), "link", None) is not None for lock in locks] == [True, True, False, False]
    for lock in locks:
        lock.release()
    assert in_use(client) == 0
    assert not client.keys("capped*")
    # A pool of fewer than four connections keeps none.
    small = redis.Redis(connection_pool=redis.ConnectionPool(
        host=client.connection_pool.connection_kwargs["host"],
        port=client.connection_pool.connection_kwargs["port"], max_connections=3))
    lock = Lock(small, "small", timeout=5)
    assert lock.acquire(blocking=False)
    assert in_use(small) == 0
    lock.release()
    small.close()


def test_a_hold_dropped_without_release_gives_its_connection_back_at_the_next_acquire(client):
    lock = Lock(client, "dropped", timeout=5)
    assert lock.acquire(blocking=False)
    del lock
    gc.collect()
    assert in_use(client) == 1  # not given back from the garbage collector
    other = Lock(client, "next", timeout=5)
    assert other.acquire(blocking=False)
    assert in_use(client) == 1  # the dropped hold's connection went back; this hold keeps one
    other.release()
    assert in_use(client) == 0
    assert locks_module._pinned.get(id(client.connection_pool), 0) == 0


def test_semaphores_and_other_clients_keep_no_connection(client, redis_server):
    semaphore = Semaphore(client, "sem", limit=2, timeout=5)
    assert semaphore.acquire(blocking=False)
    assert in_use(client) == 0
    semaphore.release()
    blocking_pool = redis.Redis(connection_pool=redis.BlockingConnectionPool(
        host=redis_server.host, port=redis_server.port))
    lock = Lock(blocking_pool, "blocking-pool", timeout=5)
    assert lock.acquire(blocking=False)
    assert lock._state().__dict__.get("link") is None
    lock.release()
    assert blocking_pool.get("blocking-pool") is None
    blocking_pool.close()
