"""The Lock's promises that hold alike for a thread and an asyncio task, written once: the sync
tests (test_lock_twin_sync.py) are generated from these asyncio ones (docs/twins.md).  What only
one side promises stays in test_lock.py or test_async_lock.py."""

from __future__ import annotations

import time

from django_redis_coord.asyncio import Lock, async_lock_holder
from django_redis_coord.core.side.aio import join, sleep, start
from tests.support.side.aio import run


def test_acquire_extend_reacquire_release_and_the_fence(async_redis):
    async def scenario():
        client = async_redis()
        lock = Lock(client, "basic", timeout=10)
        assert await lock.acquire()
        assert await client.get("basic") == lock.local.token
        first = lock.fence
        assert await lock.extend(10)  # adds to the remaining TTL
        assert 19000 < await client.pttl("basic") <= 20000
        assert await lock.extend(5, replace_ttl=True)
        assert 4000 < await client.pttl("basic") <= 5000
        assert await lock.reacquire()  # back to the lock's timeout
        assert 9000 < await client.pttl("basic") <= 10000
        holder = await async_lock_holder(client, "basic")
        assert holder is not None and holder.fence == first
        await lock.release()
        assert await lock.acquire(blocking=False)
        assert lock.fence > first
        await lock.release()
        await client.aclose()

    run(scenario())


def test_works_as_lock_class_of_the_client(async_redis):
    async def scenario():
        client = async_redis()
        lock = client.lock("via-client", lock_class=Lock, timeout=5, blocking_timeout=0.1)
        assert isinstance(lock, Lock)
        async with lock:
            assert await lock.owned() and await lock.locked()
            assert lock.fence > 0
            other = client.lock("via-client", lock_class=Lock, timeout=5, blocking_timeout=0.1)
            assert await other.acquire() is False
        assert not await lock.locked()
        await client.aclose()

    run(scenario())


def test_a_fresh_copy_shares_the_settings_but_not_the_hold(async_redis):
    async def scenario():
        client = async_redis()
        made = Lock(client, "fresh", timeout=5, thread_local=False, label="made once")
        first, second = made.fresh(), made.fresh()
        assert (first.name, first.timeout, first.label, first.keys) == (made.name, made.timeout, made.label, made.keys)
        assert await first.acquire(blocking=False)
        assert not await second.acquire(blocking=False)
        assert await first.owned() and not await second.owned()
        assert made.local.token is None and second.fence is None
        fence = first.fence
        await first.release()
        assert await second.acquire(blocking=False) and second.fence > fence
        assert first.local.token is None
        await second.release()
        per_worker = Lock(client, "fresh:workers", timeout=5).fresh()  # thread_local: per thread, per task
        assert await per_worker.acquire(blocking=False)
        seen = []

        async def look() -> None:
            seen.append(per_worker.local.token)

        await join(start(look, "look"), 10)
        assert seen == [None] and per_worker.local.token is not None
        await per_worker.release()
        await client.aclose()

    run(scenario())


def test_a_shared_hold_handed_to_another_worker_is_not_wiped_by_the_release(async_redis):
    # thread_local=False: one hold state for every thread (task).  The release hands the lock to a
    # worker waiting on the same object, which writes its hold there; the release, finishing after
    # that, must leave it alone (it cleared it in about half of these rounds before).
    async def scenario():
        client = async_redis()
        lock = Lock(client, "shared-hold", timeout=5, thread_local=False)
        wiped = 0
        for _ in range(60):
            assert await lock.acquire()
            taken: dict = {}

            async def take_next(taken: dict = taken) -> None:
                taken["acquired"] = await lock.acquire(blocking_timeout=5)
                taken["token"] = await client.get("shared-hold")

            worker = start(take_next, "take-next")
            deadline = time.monotonic() + 5
            while not await client.zcard(lock.keys.queue) and time.monotonic() < deadline:
                await sleep(0.0005)
            await lock.release()
            await join(worker, 10)
            assert taken["acquired"]
            if lock.local.token != taken["token"]:
                wiped += 1
                await client.delete("shared-hold")
                lock.local.token = None
            else:
                await lock.release()  # the next holder's hold, released through the shared state
        assert wiped == 0
        assert await client.get("shared-hold") is None
        await client.aclose()

    run(scenario())
