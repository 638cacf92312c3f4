"""A sync lock's hold keeps the pooled connection it was granted on until its release, and the
thread keeps it after the release for its next acquire (locks.Link)."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time

import pytest
import redis

from django_redis_coord import Lock, Semaphore
from django_redis_coord import locks as locks_module


def in_use(client: redis.Redis) -> int:
    return len(client.connection_pool._in_use_connections)


def links_out(client) -> int:
    """How many links of ``client``'s pool are out (sync or asyncio: see locks.count_in)."""
    return locks_module._pinned.get(id(client.connection_pool), 0)


def spare() -> locks_module.Link | None:
    """This thread's spare link: the connection of its last release, for its next acquire."""
    return getattr(locks_module._spare, "link", None)


def drop_spare() -> None:
    link = spare()
    locks_module._spare.link = None
    if link is not None:
        link.give_back()


@pytest.fixture
def client(redis_server):
    """A client with a pool of its own (the counts below are of its connections only)."""
    drop_spare()
    client = redis_server.client()
    client.flushall()
    yield client
    drop_spare()
    client.close()


def test_a_hold_keeps_its_connection_and_the_release_gives_it_back(client):
    lock = Lock(client, "kept", timeout=5)
    assert lock.acquire(blocking=False)
    assert in_use(client) == 1
    kept = lock._state().link.conn
    lock.release()
    assert client.get("kept") is None
    # The release went out on the kept connection, which the thread keeps for its next acquire.
    assert spare() is not None and spare().conn is kept
    assert in_use(client) == 1
    assert lock.acquire(blocking=False)
    assert lock._state().link.conn is kept and spare() is None
    lock.release()
    assert in_use(client) == 1
    drop_spare()
    assert in_use(client) == 0
    assert kept in client.connection_pool._available_connections
    assert kept._sock is not None  # still open


def test_a_refused_or_timed_out_acquire_keeps_nothing(client):
    holder = Lock(client, "busy", timeout=5)
    assert holder.acquire(blocking=False)
    other = Lock(client, "busy", timeout=5)
    assert not other.acquire(blocking=False)
    assert not other.acquire(blocking_timeout=0.05)
    assert in_use(client) == 2  # the holder's, and the thread's spare from the refused acquires
    assert getattr(other._state(), "link", None) is None
    holder.release()
    assert in_use(client) == 1  # the thread keeps one spare; the holder's went back
    assert not client.keys("busy*")


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
    waiter.release()  # from this thread: its spare now
    assert in_use(client) == 1 and spare() is not None
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
    assert in_use(client) == 0  # closed, given back; the release went through the pool
    assert spare() is None
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
    assert in_use(client) == 1  # the spare
    assert links_out(client) == 1
    assert not client.keys("capped*")



def test_a_pool_sized_by_its_user_keeps_no_connections(client):
    # A pool sized to its threads must not run out: holds and threads would each keep one more.
    kwargs = client.connection_pool.connection_kwargs
    sized = redis.Redis(connection_pool=redis.ConnectionPool(host=kwargs["host"], port=kwargs["port"],
                                                             max_connections=8))
    errors = []

    def work() -> None:
        lock = Lock(sized, "sized", timeout=5)
        try:
            for _ in range(30):
                with lock:
                    sized.incr("sized:count")
        except Exception as exc:  # "Too many connections" when connections are kept
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert int(sized.get("sized:count")) == 240
    assert in_use(sized) == 0
    sized.close()


def connections_made(client: redis.Redis) -> int:
    return int(client.info("stats")["total_connections_received"])


def test_a_thread_using_two_clients_in_turn_opens_no_new_connections(client, redis_server):
    other = redis_server.client()
    first, second = Lock(client, "one", timeout=5), Lock(other, "two", timeout=5)
    for lock in (first, second):  # each pool makes its connections once
        assert lock.acquire(blocking=False)
        lock.release()
    before = connections_made(client)
    for _ in range(50):
        for lock in (first, second):
            assert lock.acquire(blocking=False)
            lock.release()
    assert connections_made(client) - before <= 1  # the info call's own, at most
    drop_spare()
    other.close()


def test_kept_connections_on_descriptors_above_select_s_limit_are_reused(client):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.fail(f"the test needs {wanted} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    filler = [open(os.devnull) for _ in range(1100)]
    kwargs = client.connection_pool.connection_kwargs
    high = redis.Redis(host=kwargs["host"], port=kwargs["port"])  # its connections come after the filler
    try:
        lock = Lock(high, "high-fd", timeout=5)
        assert lock.acquire(blocking=False)
        assert lock._state().link.conn._sock.fileno() >= 1024
        lock.release()
        before = connections_made(client)
        for _ in range(50):
            assert lock.acquire(blocking=False)
            assert lock._state().link is not None
            lock.release()
        assert connections_made(client) - before <= 1
    finally:
        drop_spare()
        high.close()
        for handle in filler:
            handle.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


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
    drop_spare()
    assert in_use(client) == 0
    assert links_out(client) == 0


def test_the_spare_of_a_thread_that_ended_goes_back_at_the_next_acquire(client):
    def use_once() -> None:
        lock = Lock(client, "in-thread", timeout=5)
        assert lock.acquire(blocking=False)
        lock.release()
        assert spare() is not None

    thread = threading.Thread(target=use_once)
    thread.start()
    thread.join()
    del thread
    gc.collect()
    assert in_use(client) == 1  # the ended thread's spare, not given back from the collector
    lock = Lock(client, "after", timeout=5)
    assert lock.acquire(blocking=False)
    assert in_use(client) == 1  # this hold's; the old spare went back first
    lock.release()
    drop_spare()
    assert in_use(client) == 0


def test_dropped_links_go_back_also_while_the_thread_acquires_on_its_spare(client):
    lock = Lock(client, "mine", timeout=5)
    assert lock.acquire(blocking=False)
    lock.release()
    assert spare() is not None  # from here on, this thread's acquires take no new link

    def use_once() -> None:
        other = Lock(client, "theirs", timeout=5)
        assert other.acquire(blocking=False)
        other.release()

    thread = threading.Thread(target=use_once)
    thread.start()
    thread.join()
    del thread
    gc.collect()
    assert in_use(client) == 2
    assert lock.acquire(blocking=False)  # on the spare; the ended thread's link goes back
    assert in_use(client) == 1
    lock.release()
    assert in_use(client) == 1


def test_semaphores_and_other_clients_keep_no_connection(client, redis_server):
    semaphore = Semaphore(client, "sem", limit=2, timeout=5)
    assert semaphore.acquire(blocking=False)
    assert in_use(client) == 1 and spare() is not None  # a permit keeps none; the thread its spare
    assert not hasattr(semaphore.permit(), "link")
    semaphore.release()
    drop_spare()
    assert in_use(client) == 0
    blocking_pool = redis.Redis(connection_pool=redis.BlockingConnectionPool(
        host=redis_server.host, port=redis_server.port))
    lock = Lock(blocking_pool, "blocking-pool", timeout=5)
    assert lock.acquire(blocking=False)
    assert lock._state().__dict__.get("link") is None
    lock.release()
    assert blocking_pool.get("blocking-pool") is None
    blocking_pool.close()


# -- asyncio ----------------------------------------------------------------------------------------
def async_in_use(client) -> int:
    return len(client.connection_pool._in_use_connections)


def test_an_asyncio_hold_keeps_its_connection_and_the_pool_keeps_it_as_spare(async_redis):
    from django_redis_coord.asyncio import Lock as AsyncLock
    from django_redis_coord.asyncio import lock as async_locks

    async def scenario() -> None:
        client = async_redis()
        await client.flushall()
        lock = AsyncLock(client, "a:kept", timeout=5)
        assert await lock.acquire(blocking=False)
        kept = lock._state().link.conn
        assert async_in_use(client) == 1
        await lock.release()
        assert await client.get("a:kept") is None
        assert async_locks._async_spares[client.connection_pool]() is kept
        assert await lock.acquire(blocking=False)
        assert lock._state().link.conn is kept  # the spare, checked and reused
        await lock.release()
        assert links_out(client) == 0
        await client.aclose()

    asyncio.run(scenario())


def test_an_asyncio_waiter_keeps_the_connection_it_waited_on_and_a_cancelled_one_keeps_none(async_redis):
    from django_redis_coord.asyncio import Lock as AsyncLock
    from django_redis_coord.asyncio import lock as async_locks

    async def scenario() -> None:
        client, other = async_redis(), async_redis()
        await client.flushall()
        holder = AsyncLock(other, "a:handed", timeout=5, thread_local=False)
        assert await holder.acquire()
        waiter = AsyncLock(client, "a:handed", timeout=5, thread_local=False)
        task = asyncio.create_task(waiter.acquire(blocking_timeout=5))
        while not await client.zcard(waiter.keys.queue):
            await asyncio.sleep(0.005)
        await holder.release()
        assert await task
        link = waiter._state().link
        assert link is not None and link.conn is not None and links_out(client) == 1
        await waiter.release()
        assert await client.get("a:handed") is None
        assert links_out(client) == 0 and async_locks._async_spares[client.connection_pool]() is not None

        # A waiter cancelled while queued leaves the queue and gives its connection back, closed.
        assert await holder.acquire()
        cancelled = AsyncLock(client, "a:handed", timeout=5, thread_local=False)
        pending = asyncio.create_task(cancelled.acquire(blocking_timeout=5))
        while not await client.zcard(cancelled.keys.queue):
            await asyncio.sleep(0.005)
        assert links_out(client) == 1
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert await client.zcard(cancelled.keys.queue) == 0
        assert links_out(client) == 0
        assert getattr(cancelled._state(), "link", None) is None
        await holder.release()
        assert await client.get("a:handed") is None
        await other.aclose()
        await client.aclose()

    asyncio.run(scenario())


def test_an_asyncio_release_after_the_server_closed_the_kept_connection_goes_through_the_pool(
        async_redis, redis_server):
    from django_redis_coord.asyncio import Lock as AsyncLock

    async def scenario() -> None:
        client = async_redis()
        await client.flushall()
        lock = AsyncLock(client, "a:killed", timeout=5)
        assert await lock.acquire(blocking=False)
        admin = redis_server.client()
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        admin.close()
        await asyncio.sleep(0.05)  # the close reaches the client's socket
        await lock.release()
        assert await client.get("a:killed") is None
        await client.aclose()

    asyncio.run(scenario())


def test_the_sync_twin_of_an_asyncio_hold_does_not_take_its_connection(async_redis):
    from django_redis_coord.asyncio import Lock as AsyncLock
    from django_redis_coord.decorators import _sync_twin
    from django_redis_coord.shortcuts import AsyncSignallingLock

    async def scenario() -> None:
        client = async_redis()
        await client.flushall()
        lock = AsyncSignallingLock(client, "a:twin", timeout=5, thread_local=False)  # as @locked makes them
        assert isinstance(lock, AsyncLock)
        assert await lock.acquire(blocking=False)
        assert lock._state().link is not None
        kept = lock._state().link.conn
        twin = await asyncio.to_thread(_sync_twin, lock)  # as when a thread closes the response
        assert "link" not in vars(twin._state()) and "link" not in vars(lock._state())
        assert twin._state().token == lock._state().token
        await asyncio.to_thread(twin.release)  # released from a thread, through the sync pool
        assert await client.get("a:twin") is None
        # The asyncio hold's connection is taken back on its loop at the next checkout, as the
        # pool's spare: that acquire goes out on it, with no give-back and checkout in between.
        pool = client.connection_pool
        pool_calls = []
        for method in ("get_connection", "release"):
            original = getattr(pool, method)

            async def counted(*args, _original=original, _method=method, **kwargs):
                pool_calls.append(_method)
                return await _original(*args, **kwargs)

            setattr(pool, method, counted)
        other = AsyncLock(client, "a:twin-next", timeout=5)
        assert await other.acquire(blocking=False)
        assert other._state().link.conn is kept
        assert pool_calls == []
        assert async_in_use(client) == 1
        await other.release()
        assert links_out(client) == 0
        await client.aclose()

    asyncio.run(scenario())


def test_pools_of_event_loops_that_ended_go_away_with_their_spares(redis_server):
    import weakref

    from django_redis_coord.asyncio import Lock as AsyncLock
    from django_redis_coord.asyncio import lock as async_locks

    pools = []

    async def one_loop() -> None:
        client = redis_server.async_client()  # never closed: dropped with its loop
        pools.append(weakref.ref(client.connection_pool))
        lock = AsyncLock(client, "a:loops", timeout=5)
        assert await lock.acquire(blocking=False)
        await lock.release()
        assert async_locks._async_spares[client.connection_pool]() is not None

    for _ in range(5):
        asyncio.run(one_loop())
    gc.collect()
    assert [ref() for ref in pools] == [None] * 5  # not kept alive by their spares


def test_the_connection_of_a_task_that_ended_holding_goes_back_to_its_pool(async_redis):
    from django_redis_coord.asyncio import Lock as AsyncLock

    async def scenario() -> None:
        client = async_redis()
        await client.flushall()
        lock = AsyncLock(client, "a:ended", timeout=5)  # a hold per task

        async def take_and_leave() -> None:
            assert await lock.acquire(blocking=False)

        for index in range(20):  # more than the pool lends: each must come back
            await asyncio.create_task(take_and_leave())
            assert links_out(client) <= 1, index
            await client.delete("a:ended")  # what its TTL would do
        other = AsyncLock(client, "a:ended-next", timeout=5)
        assert await other.acquire(blocking=False)
        assert other._state().link is not None  # the pool still lends one
        await other.release()
        assert links_out(client) == 0
        await client.aclose()

    asyncio.run(scenario())


def test_a_kept_connection_marked_for_reconnection_is_not_reused(client):
    lock = Lock(client, "marked", timeout=5)
    assert lock.acquire(blocking=False)
    kept = lock._state().link.conn
    if not hasattr(kept, "mark_for_reconnect"):
        pytest.fail("this redis-py has no maintenance notifications (redis-py 8 is installed with the tests)")
    kept.mark_for_reconnect()  # what a maintenance notification does
    old_socket = kept._sock
    lock.release()
    assert client.get("marked") is None
    assert spare() is None or spare().conn is not kept
    assert kept._sock is not old_socket  # closed (as the pool closes such a one), not written on
    assert old_socket.fileno() == -1


def test_a_burst_of_asyncio_holds_gives_its_connections_back_at_the_releases(async_redis):
    from django_redis_coord.asyncio import Lock as AsyncLock

    async def scenario() -> None:
        client = async_redis()
        await client.flushall()
        locks = [AsyncLock(client, f"a:burst{i}", timeout=5) for i in range(6)]
        for lock in locks:
            assert await lock.acquire(blocking=False)
        assert async_in_use(client) == 6
        for lock in locks:
            await lock.release()
        assert async_in_use(client) <= 2  # the spare, and at most the one replaced last
        await client.aclose()

    asyncio.run(scenario())


def test_the_connection_of_a_task_that_ended_holding_goes_back_also_when_its_lock_is_gone(async_redis):
    from django_redis_coord.asyncio import Lock as AsyncLock

    async def scenario() -> None:
        client = async_redis()
        await client.flushall()

        async def take_and_leave(index: int) -> None:
            assert await AsyncLock(client, f"a:gone{index}", timeout=5).acquire(blocking=False)

        for index in range(5):
            await asyncio.create_task(take_and_leave(index))
            await asyncio.sleep(0)  # the task's end callbacks
        next_lock = AsyncLock(client, "a:gone-next", timeout=5)
        assert await next_lock.acquire(blocking=False)
        assert links_out(client) == 1  # the ended tasks' connections went back at this checkout
        await next_lock.release()
        await client.aclose()

    gc.disable()  # no help from the collector
    try:
        asyncio.run(scenario())
    finally:
        gc.enable()
