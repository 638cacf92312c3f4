"""The Semaphore's promises that hold alike for a thread and an asyncio task, written once: the
sync tests (test_semaphore_twin_sync.py) are generated from these asyncio ones (docs/twins.md).
What only one side promises stays in test_semaphore.py or test_async_semaphore.py."""

from __future__ import annotations

import time
import uuid

import pytest
from redis.exceptions import LockError

from django_redis_coord.asyncio import Semaphore
from django_redis_coord.core.holders import async_semaphore_holders
from django_redis_coord.core.side.aio import sleep
from django_redis_coord.core.watchdog import async_watchdog
from django_redis_coord.exceptions import InvalidLockArgument, InvalidLockArgumentType, SemaphoreLimitNotSet
from tests.support.side.aio import run


def test_identity_semaphore_transcript(async_redis):
    async def scenario():
        client = async_redis(decode_responses=True)
        semaphore = Semaphore(client, "test-semaphore")
        with pytest.raises(SemaphoreLimitNotSet):
            await semaphore.acquire("peter")
        assert await client.dbsize() == 0
        assert await semaphore.set_max_size(3) is None
        assert await semaphore.acquire("peter") is True
        assert await semaphore.acquire("jack") is True
        assert await semaphore.acquire("tom") is True
        assert await semaphore.acquire("mary") is False
        assert await semaphore.release("jack") is True
        assert await semaphore.release("jack") is False
        assert await semaphore.get_current_size() == 2
        assert await semaphore.get_max_size() == 3
        # The limit and the holders live in Redis: another client (and object) sees the same state.
        other_client = async_redis()
        other = Semaphore(other_client, "test-semaphore")
        assert await other.get_current_size() == 2 and await other.get_max_size() == 3
        assert await other.acquire("mary") is True
        assert await semaphore.acquire("jack") is False
        holders = await async_semaphore_holders(client, "test-semaphore")
        assert sorted(h.token for h in holders) == [b"mary", b"peter", b"tom"]
        await other_client.aclose()
        await client.aclose()

    run(scenario())


def test_watchdog_keeps_a_permit_past_three_times_its_timeout(async_redis):
    async def scenario():
        client = async_redis()
        semaphore = Semaphore(client, "renewed", limit=1, timeout=0.5, auto_renew=True)
        lost = []
        semaphore.on_lost = lost.append
        assert await semaphore.acquire()
        fence = semaphore.fence
        await sleep(1.8)
        assert semaphore.valid and semaphore.fence == fence and not lost
        assert await semaphore.get_current_size() == 1
        assert not await Semaphore(client, "renewed", limit=1, timeout=0.5).acquire()
        semaphore.ensure_valid()
        assert await semaphore.release()
        assert all(hold.owner is not semaphore for hold in list(async_watchdog()._holds.values()))
        # A permit taken away is reported lost at the next renewal.
        assert await semaphore.acquire("victim")
        await client.zrem("renewed", "victim")
        deadline = time.monotonic() + 10
        while not lost and time.monotonic() < deadline:
            await sleep(0.01)
        assert lost and lost[0].token == b"victim"
        await client.aclose()

    run(scenario())


# -- bad input ------------------------------------------------------------------------------------------
BAD_INPUTS = [
    (dict(name=""), InvalidLockArgument),
    (dict(name=b""), InvalidLockArgument),
    (dict(name=None), InvalidLockArgumentType),
    (dict(name="x:dcoord:y"), InvalidLockArgument),
    (dict(name="ok", limit=0), InvalidLockArgument),
    (dict(name="ok", limit=-1), InvalidLockArgument),
    (dict(name="ok", limit=1.5), InvalidLockArgumentType),
    (dict(name="ok", limit="3"), InvalidLockArgumentType),
    (dict(name="ok", limit=True), InvalidLockArgumentType),
    (dict(name="ok", limit=2, timeout=0), InvalidLockArgument),
    (dict(name="ok", limit=2, timeout=-1), InvalidLockArgument),
    (dict(name="ok", limit=2, timeout="30"), InvalidLockArgumentType),
    (dict(name="ok", limit=2, timeout=float("nan")), InvalidLockArgument),
    (dict(name="ok", limit=2, blocking_timeout=-1), InvalidLockArgument),
    (dict(name="ok", limit=2, auto_renew=True), InvalidLockArgument),
]


@pytest.mark.parametrize("kwargs,error", BAD_INPUTS)
def test_bad_constructor_input_is_a_typed_error_and_writes_nothing(async_redis, kwargs, error):
    async def scenario():
        client = async_redis()
        arguments = dict(kwargs)
        name = arguments.pop("name")
        with pytest.raises(error) as info:
            await Semaphore(client, name, **arguments).acquire("peter")
        assert isinstance(info.value, LockError)
        written = await client.dbsize()
        await client.aclose()
        return written

    assert run(scenario()) == 0


@pytest.mark.parametrize("size,error", [(0, InvalidLockArgument), (-3, InvalidLockArgument),
                                        (2.0, InvalidLockArgumentType), ("3", InvalidLockArgumentType),
                                        (None, InvalidLockArgumentType)])
def test_bad_limit_for_set_max_size_writes_nothing(async_redis, size, error):
    async def scenario():
        client = async_redis()
        with pytest.raises(error):
            await Semaphore(client, "sized").set_max_size(size)
        written = await client.dbsize()
        await client.aclose()
        return written

    assert run(scenario()) == 0


@pytest.mark.parametrize("identity,error", [("", InvalidLockArgument), (b"", InvalidLockArgument),
                                            (42, InvalidLockArgumentType), (uuid.uuid4(), InvalidLockArgumentType)])
def test_bad_identity_writes_nothing(async_redis, identity, error):
    async def scenario():
        client = async_redis()
        semaphore = Semaphore(client, "ids", limit=2)
        with pytest.raises(error):
            await semaphore.acquire(identity)
        with pytest.raises(error):
            await semaphore.release(identity)
        with pytest.raises(InvalidLockArgument):
            await semaphore.acquire("ok", blocking=True, blocking_timeout=-1)
        written = await client.dbsize()
        await client.aclose()
        return written

    assert run(scenario()) == 0
