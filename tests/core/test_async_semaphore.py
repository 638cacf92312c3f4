"""The asyncio Semaphore: the same behaviour as the sync one, with permits per task."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.exceptions import LockError

from django_redis_coord import LockAcquireTimeout
from django_redis_coord.asyncio import Semaphore
from tests.core.test_semaphore import max_concurrent


def run(coro):
    return asyncio.run(coro)


def test_tasks_sharing_an_instance_each_release_their_own_permit(async_redis):
    async def scenario():
        client = async_redis()
        semaphore = Semaphore(client, "a:shared", limit=2, timeout=10)
        fences = {}
        both_in = asyncio.Event()
        entered = []

        async def user(name):
            async with semaphore:
                entered.append(name)
                if len(entered) == 2:
                    both_in.set()
                await both_in.wait()
                fences[name] = semaphore.fence
                assert semaphore.valid
                assert semaphore.permit().token != b""
            assert semaphore.fence is None

        await asyncio.gather(user("a"), user("b"))
        assert fences["a"] != fences["b"]
        assert await semaphore.get_current_size() == 0
        with pytest.raises(LockError):
            await semaphore.release()  # this task holds nothing
        await client.aclose()

    run(scenario())


def test_many_tasks_never_exceed_the_limit_and_all_permits_get_used(async_redis):
    async def scenario():
        spans = []

        async def worker(index):
            client = async_redis()
            semaphore = Semaphore(client, "a:limit3", limit=3, timeout=10)
            for _ in range(6):
                async with semaphore:
                    start = time.monotonic_ns()
                    await asyncio.sleep(0.005)
                    spans.append((start, time.monotonic_ns()))
            await client.aclose()

        await asyncio.gather(*(worker(i) for i in range(8)))
        return spans

    spans = run(scenario())
    assert len(spans) == 48
    assert max_concurrent(spans) == 3


def test_waiting_tasks_are_served_in_fifo_order(async_redis):
    async def scenario():
        client = async_redis()
        holder = Semaphore(client, "a:fifo", limit=1, timeout=10)
        assert await holder.acquire("boss")
        order = []

        async def waiter(index):
            own = async_redis()
            semaphore = Semaphore(own, "a:fifo", limit=1, timeout=10)
            assert await semaphore.acquire(blocking=True, blocking_timeout=10)
            order.append(index)
            await semaphore.release()
            await own.aclose()

        tasks = []
        for index in range(5):
            tasks.append(asyncio.create_task(waiter(index)))
            while await client.zcard(holder.keys.queue) < index + 1:
                await asyncio.sleep(0.005)
        assert await holder.release("boss")
        await asyncio.gather(*tasks)
        await client.aclose()
        return order

    assert run(scenario()) == [0, 1, 2, 3, 4]


def test_blocking_timeout_and_cancellation_leave_the_queue(async_redis):
    async def scenario():
        client = async_redis()
        holder = Semaphore(client, "a:busy", limit=1, timeout=10)
        assert await holder.acquire()
        other = Semaphore(client, "a:busy", limit=1, timeout=10)
        started = time.monotonic()
        assert await other.acquire(blocking=True, blocking_timeout=0.2) is False
        assert 0.2 <= time.monotonic() - started < 1.5
        with pytest.raises(LockAcquireTimeout):
            async with Semaphore(client, "a:busy", limit=1, timeout=10, blocking_timeout=0.05):
                pass
        task = asyncio.create_task(other.acquire(blocking=True))
        while await client.zcard(holder.keys.queue) == 0:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await client.zcard(holder.keys.queue) == 0
        await holder.release()
        assert await other.get_current_size() == 0  # the cancelled waiter kept nothing
        await client.aclose()

    run(scenario())


def test_an_expired_permit_is_handed_to_a_waiter(async_redis):
    async def scenario():
        client = async_redis()
        crashed = Semaphore(client, "a:lease", limit=1, timeout=0.5)
        assert await crashed.acquire("gone")  # never released
        waiter = Semaphore(client, "a:lease", limit=1, timeout=5)
        started = time.monotonic()
        assert await waiter.acquire(blocking=True, blocking_timeout=5)
        waited = time.monotonic() - started
        assert await waiter.release()
        assert await crashed.release("gone") is False
        await client.aclose()
        return waited

    assert 0.3 < run(scenario()) < 1.5


