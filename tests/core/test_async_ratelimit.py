"""The asyncio rate limits: the same decisions as the sync ones, and a cancelled wait gives its slot back."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from benchmarks.common import CommandMonitor
from django_redis_coord.asyncio import RateLimit, SlidingWindowLimit
from django_redis_coord.core.ratelimit import sync
from tests.test_twins import public_api


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("synchronous, asynchronous", [
    (sync.RateLimit, RateLimit), (sync.SlidingWindowLimit, SlidingWindowLimit),
], ids=["RateLimit", "SlidingWindowLimit"])
def test_the_asyncio_twins_have_the_same_public_methods_awaited(synchronous, asynchronous):
    assert public_api(synchronous) == public_api(asynchronous)
    for method in ("hit", "peek", "reset", "do_decide"):
        assert inspect.iscoroutinefunction(getattr(asynchronous, method))
        assert not inspect.iscoroutinefunction(getattr(synchronous, method))


def test_waiting_tasks_are_admitted_in_arrival_order_one_script_call_each(async_redis, redis_server):
    async def scenario():
        client = async_redis()
        limit = RateLimit(client, "line", "20/s", burst=1)
        await limit.peek()  # the script is loaded

        async def call(i):
            reply = await limit.acquire(wait=5)
            return i, reply, time.monotonic()

        started = time.monotonic()
        with CommandMonitor(redis_server) as monitor:
            results = await asyncio.gather(*(call(i) for i in range(20)))
        assert all(reply.allowed for _, reply, _ in results)
        ordered = sorted((reply for _, reply, _ in results), key=lambda reply: reply.server_time)
        slots = [reply.server_time + reply.waited for reply in ordered]
        # GCRA with burst 1: each slot one interval after the one before, or the decision itself when
        # that one had passed (a task a loaded machine let ask late has nothing to wait for).
        for reply, slot, before in zip(ordered[1:], slots[1:], slots):
            assert slot == pytest.approx(max(reply.server_time, before + 0.05), abs=2e-6)
        # Each task slept for its slot: the last one woke 19 intervals after the first decision.
        assert max(woke for _, _, woke in results) - started >= 19 * 0.05
        assert monitor.counts == {"EVALSHA": 20}
        await client.aclose()

    run(scenario())


def test_a_cancelled_wait_gives_the_slot_back(async_redis):
    async def scenario():
        client = async_redis()
        limit = RateLimit(client, "cancelled", "1/10s", burst=1)
        await limit.hit()
        held = await client.get(limit.key)
        waiting = asyncio.ensure_future(limit.acquire(wait=30))  # its slot opens in 10 s
        await asyncio.sleep(0.1)
        assert await client.get(limit.key) != held  # reserved
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await client.get(limit.key) == held
        await client.aclose()

    run(scenario())


def test_a_cancelled_wait_under_a_later_reservation_leaves_its_slot_unused(async_redis):
    async def scenario():
        client = async_redis()
        limit = RateLimit(client, "stacked", "1/s", burst=1)
        admitted = await limit.hit()
        first = asyncio.ensure_future(limit.acquire(wait=5))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(limit.acquire(wait=5))
        await asyncio.sleep(0.05)
        on_top = await client.get(limit.key)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await client.get(limit.key) == on_top
        reply = await second  # its slot kept its place: after the first's
        assert reply.allowed and reply.server_time + reply.waited == pytest.approx(admitted.server_time + 2, abs=2e-6)
        await client.aclose()

    run(scenario())


def test_a_task_cancelled_while_its_reservation_is_decided_gives_the_slot_back(redis_server):
    """The reserving script ran, but the task was cancelled before it read the reply (held back
    on the client here): the call goes on, reads the reservation and gives the slot back, rather
    than leave a slot nobody will use."""
    import redis.asyncio
    from redis.asyncio.connection import Connection

    held_back = {"seconds": 0.0}

    class SlowReplies(Connection):
        async def read_response(self, *args, **kwargs):
            await asyncio.sleep(held_back["seconds"])
            return await super().read_response(*args, **kwargs)

    async def scenario():
        client = redis.asyncio.Redis.from_url(redis_server.url, connection_class=SlowReplies)
        observer = redis.asyncio.Redis.from_url(redis_server.url)
        await observer.flushall()
        limit = RateLimit(client, "cancelled-deciding", "1/10s", burst=1)
        await limit.acquire(wait=30)  # admitted now (and the script loaded)
        held = await observer.get(limit.key)
        held_back["seconds"] = 1.0
        task = asyncio.ensure_future(limit.acquire(wait=30))  # its slot opens in 10 s
        for _ in range(400):  # until the script has run on the server and reserved the slot
            if await observer.get(limit.key) != held:
                break
            await asyncio.sleep(0.005)
        reserved = await observer.get(limit.key)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        held_back["seconds"] = 0.0
        for _ in range(1000):  # the call reads its reply in the background, then gives the slot back
            if await observer.get(limit.key) == held:
                break
            await asyncio.sleep(0.01)
        left = await observer.get(limit.key)
        await client.aclose()
        await observer.aclose()
        return held, reserved, left

    held, reserved, left = asyncio.run(scenario())
    assert reserved != held  # the slot was reserved while the reply was held back
    assert left == held  # and given back


def test_reset_forgets_the_counted_calls_not_a_caller_asleep_for_its_slot(async_redis):
    """docs/ratelimits.md, "What a limit forgets": a reservation made before ``reset`` was an
    admission; its caller still runs at its slot, on top of what the reset limit admits."""
    async def scenario():
        client = async_redis()
        limit = RateLimit(client, "reset-under", "1/2s", burst=1)
        await limit.hit()
        held = await client.get(limit.key)
        waiting = asyncio.ensure_future(limit.acquire(wait=5))  # its slot opens 2 s later
        for _ in range(400):  # until it has reserved its slot
            if await client.get(limit.key) != held:
                break
            await asyncio.sleep(0.005)
        assert not waiting.done()
        assert await limit.reset() is True
        fresh = await limit.hit()
        reply = await waiting
        assert fresh.allowed and reply.allowed and reply.waited > 0
        await client.aclose()

    run(scenario())
