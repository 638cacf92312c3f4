# Generated from tests/core/test_semaphore_twin_aio.py by `python3 dev.py twins`: edit that file, not this one.
"""The Semaphore's promises that hold alike for a thread and an asyncio task, written once: the
sync tests (test_semaphore_twin_sync.py) are generated from these asyncio ones (docs/twins.md).
What only one side promises stays in test_semaphore.py or test_async_semaphore.py."""

from __future__ import annotations

import time
import uuid

import pytest
from redis.exceptions import LockError

from django_redis_coord import Semaphore
from django_redis_coord.core.holders import semaphore_holders
from django_redis_coord.core.side.sync import sleep
from django_redis_coord.core.watchdog import sync_watchdog
from django_redis_coord.exceptions import InvalidLockArgument, InvalidLockArgumentType, SemaphoreLimitNotSet
from tests.support.side.sync import run


def test_identity_semaphore_transcript(sync_redis):
    def scenario():
        client = sync_redis(decode_responses=True)
        semaphore = Semaphore(client, "test-semaphore")
        with pytest.raises(SemaphoreLimitNotSet):
            semaphore.acquire("peter")
        assert client.dbsize() == 0
        assert semaphore.set_max_size(3) is None
        assert semaphore.acquire("peter") is True
        assert semaphore.acquire("jack") is True
        assert semaphore.acquire("tom") is True
        assert semaphore.acquire("mary") is False
        assert semaphore.release("jack") is True
        assert semaphore.release("jack") is False
        assert semaphore.get_current_size() == 2
        assert semaphore.get_max_size() == 3
        # The limit and the holders live in Redis: another client (and object) sees the same state.
        other_client = sync_redis()
        other = Semaphore(other_client, "test-semaphore")
        assert other.get_current_size() == 2 and other.get_max_size() == 3
        assert other.acquire("mary") is True
        assert semaphore.acquire("jack") is False
        holders = semaphore_holders(client, "test-semaphore")
        assert sorted(h.token for h in holders) == [b"mary", b"peter", b"tom"]
        other_client.close()
        client.close()

    run(scenario())


def test_watchdog_keeps_a_permit_past_three_times_its_timeout(sync_redis):
    def scenario():
        client = sync_redis()
        semaphore = Semaphore(client, "renewed", limit=1, timeout=0.5, auto_renew=True)
        lost = []
        semaphore.on_lost = lost.append
        assert semaphore.acquire()
        fence = semaphore.fence
        sleep(1.8)
        assert semaphore.valid and semaphore.fence == fence and not lost
        assert semaphore.get_current_size() == 1
        assert not Semaphore(client, "renewed", limit=1, timeout=0.5).acquire()
        semaphore.ensure_valid()
        assert semaphore.release()
        assert all(hold.owner is not semaphore for hold in list(sync_watchdog()._holds.values()))
        # A permit taken away is reported lost at the next renewal.
        assert semaphore.acquire("victim")
        client.zrem("renewed", "victim")
        deadline = time.monotonic() + 10
        while not lost and time.monotonic() < deadline:
            sleep(0.01)
        assert lost and lost[0].token == b"victim"
        client.close()

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
def test_bad_constructor_input_is_a_typed_error_and_writes_nothing(sync_redis, kwargs, error):
    def scenario():
        client = sync_redis()
        arguments = dict(kwargs)
        name = arguments.pop("name")
        with pytest.raises(error) as info:
            Semaphore(client, name, **arguments).acquire("peter")
        assert isinstance(info.value, LockError)
        written = client.dbsize()
        client.close()
        return written

    assert run(scenario()) == 0


@pytest.mark.parametrize("size,error", [(0, InvalidLockArgument), (-3, InvalidLockArgument),
                                        (2.0, InvalidLockArgumentType), ("3", InvalidLockArgumentType),
                                        (None, InvalidLockArgumentType)])
def test_bad_limit_for_set_max_size_writes_nothing(sync_redis, size, error):
    def scenario():
        client = sync_redis()
        with pytest.raises(error):
            Semaphore(client, "sized").set_max_size(size)
        written = client.dbsize()
        client.close()
        return written

    assert run(scenario()) == 0


@pytest.mark.parametrize("identity,error", [("", InvalidLockArgument), (b"", InvalidLockArgument),
                                            (42, InvalidLockArgumentType), (uuid.uuid4(), InvalidLockArgumentType)])
def test_bad_identity_writes_nothing(sync_redis, identity, error):
    def scenario():
        client = sync_redis()
        semaphore = Semaphore(client, "ids", limit=2)
        with pytest.raises(error):
            semaphore.acquire(identity)
        with pytest.raises(error):
            semaphore.release(identity)
        with pytest.raises(InvalidLockArgument):
            semaphore.acquire("ok", blocking=True, blocking_timeout=-1)
        written = client.dbsize()
        client.close()
        return written

    assert run(scenario()) == 0
