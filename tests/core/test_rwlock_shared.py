"""A read-write lock with ``thread_local=False``: one hold per object, shared by every thread
(task), so that another thread than the acquiring one may release it; no re-entry, one hold at a
time.  Against the session's redis-server; the race for the one hold runs in several processes."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from django_redis_coord.core.exceptions import InvalidLockArgumentType, LockError
from django_redis_coord.core.rwlock.aio import ReadWriteLock as AsyncReadWriteLock
from django_redis_coord.core.rwlock.sync import ReadWriteLock
from django_redis_coord.core.watchdog import sync_watchdog
from tests.support.procs import CTX, run_processes


def in_thread(target):
    box: dict = {}

    def run():
        try:
            box["value"] = target()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def wait_for(predicate, timeout: float = 120.0):
    """Until ``predicate()`` holds; the limit only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


@pytest.mark.parametrize("mode", ["read", "write"])
def test_a_hold_taken_in_one_thread_is_released_in_another(redis_client, mode):
    """The watchdog renews the hold whichever thread took it (its lease end in Redis moves on), and
    forgets it once another thread released it.  The TTL (9 s, renewed every 3 s) is the fixture's:
    a stalled machine loses a short-lived hold by design, which this test is not about."""
    lost = []
    shared = ReadWriteLock(redis_client, "shared", timeout=9, auto_renew=True, thread_local=False,
                           on_lost=lost.append)
    hold = shared.hold(mode)
    assert in_thread(hold.acquire)
    fence = hold.fence
    assert fence and hold.valid and redis_client.zcard("shared") == 1
    [(token, lease_end)] = redis_client.zrange("shared", 0, -1, withscores=True)
    wait_for(lambda: (redis_client.zscore("shared", token) or 0) > lease_end)  # renewed by the watchdog
    assert redis_client.zcard("shared") == 1 and hold.valid and hold.fence == fence
    in_thread(hold.release)
    assert not redis_client.exists("shared") and hold.fence is None and not hold.valid
    # No renewal of the released hold comes later: the watchdog holds it no more.
    assert all(renewed.token != token for renewed in list(sync_watchdog()._holds.values()))
    assert lost == [] and not redis_client.exists("shared")
    assert hold.acquire(blocking=False) and hold.fence > fence  # the object takes a new hold
    hold.release()


def test_one_hold_at_a_time_and_no_reentry(redis_client):
    shared = ReadWriteLock(redis_client, "one", timeout=5, thread_local=False)
    assert shared.read.acquire()
    for side in (shared.read, shared.write):
        with pytest.raises(LockError, match="one hold at a time"):
            side.acquire(blocking=False)
        with pytest.raises(LockError, match="one hold at a time"):
            in_thread(side.acquire)
    assert redis_client.zcard("one") == 1  # nothing was sent for the refused acquires
    shared.read.release()
    with shared.write:
        assert shared.write.fence and shared.read.fence is None  # no read nested in the write
        with pytest.raises(LockError, match="one hold at a time"):
            shared.read.acquire()
    assert not redis_client.exists("one")


def test_an_acquire_that_ends_without_a_hold_frees_the_object(redis_client):
    writer = ReadWriteLock(redis_client, "freed", timeout=5)
    shared = ReadWriteLock(redis_client, "freed", timeout=5, thread_local=False)
    assert writer.write.acquire()
    assert not shared.read.acquire(blocking=False)
    assert 4000 <= shared.read.refused_pttl <= 5000
    assert not shared.read.acquire(blocking_timeout=0.2)  # gave up waiting
    writer.write.release()
    assert shared.read.acquire(blocking=False)
    shared.read.release()
    assert not redis_client.exists("freed")


def test_thread_local_must_be_a_bool(redis_client):
    for value in ("false", 0, None):
        with pytest.raises(InvalidLockArgumentType, match="thread_local"):
            ReadWriteLock(redis_client, "typed", thread_local=value)
    assert not redis_client.keys("*")


def test_a_fresh_copy_has_its_own_hold_and_its_own_sides(redis_client):
    made = ReadWriteLock(None, "copies", timeout=5, thread_local=False)
    first, second = made.fresh(redis_client), made.fresh(redis_client)
    assert first.read.lock is first and second.write.lock is second and made.read.lock is made
    assert first.read.acquire() and second.read.acquire()  # two readers: two objects
    assert first.read.fence != second.read.fence and redis_client.zcard("copies") == 2
    in_thread(first.read.release)
    assert second.read.valid and redis_client.zcard("copies") == 1
    second.read.release()


def _race_for_one_object(barrier, name: str, threads: int):
    """``threads`` threads of this process race to acquire one shared object's read."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    shared = ReadWriteLock(client, name, timeout=10, thread_local=False)
    start = threading.Barrier(threads)
    outcomes: list[str] = []

    def race():
        start.wait(10)
        try:
            outcomes.append("held" if shared.read.acquire(blocking=False) else "refused")
        except LockError:
            outcomes.append("one at a time")

    workers = [threading.Thread(target=race) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    barrier.wait(20)  # every process holds its one read now
    readers = client.zcard(name)
    barrier.wait(20)
    shared.read.release()
    return sorted(outcomes), readers


def test_threads_racing_for_one_shared_object_get_one_hold_per_object(redis_client):
    barrier = CTX.Barrier(3)
    results = run_processes(_race_for_one_object, [(barrier, "race", 6) for _ in range(3)])
    for outcomes, readers in results:
        assert outcomes == ["held"] + ["one at a time"] * 5
        assert readers == 3  # one read per process's object, the three together
    assert not redis_client.exists("race")


def test_async_a_hold_shared_between_tasks(async_redis, caplog):
    async def scenario():
        client = async_redis()
        shared = AsyncReadWriteLock(client, "atasks", timeout=5, thread_local=False)
        plain = AsyncReadWriteLock(client, "atasks", timeout=5)
        assert await asyncio.create_task(shared.write.acquire())  # the acquiring task ends holding
        fence = shared.write.fence
        assert fence and shared.write.valid
        assert not await plain.read.acquire(blocking=False)
        with pytest.raises(LockError, match="one hold at a time"):
            await asyncio.create_task(shared.read.acquire(blocking=False))
        await asyncio.create_task(shared.write.release())  # another task releases it
        assert shared.write.fence is None and await plain.read.acquire(blocking=False)
        await plain.read.release()
        racers = await asyncio.gather(*(shared.read.acquire() for _ in range(4)), return_exceptions=True)
        held = [racer for racer in racers if racer is True]
        refused = [racer for racer in racers if isinstance(racer, LockError)]
        await shared.read.release()
        await client.aclose()
        return len(held), len(refused)

    with caplog.at_level(logging.WARNING, logger="django_redis_coord"):
        assert asyncio.run(scenario()) == (1, 3)
    assert "ended without releasing" not in caplog.text
