"""The end of a hold as its holder sees it: the local deadline falls before the end in Redis by the
drift allowance, and a release that comes after the lease ended says so (an error or ``False``,
and the loss signal), for locks, semaphores and read-write locks, sync and asyncio."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from django_redis_coord import Events, Lock, LockNotOwnedError, ReadWriteLock, Semaphore
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.asyncio import Semaphore as AsyncSemaphore
from django_redis_coord.core.arguments import drift
from django_redis_coord.core.rwlock.aio import ReadWriteLock as AsyncReadWriteLock

#: A long TTL: its drift allowance (2 ms + 1 %, about a second) dwarfs the round trips below.
LONG = 100.0
#: A short lease, and a sleep that surely outlasts it (a sleep lasts at least what it is asked).
SHORT, PAST_IT = 0.1, 0.3


class Told(Events):
    """What the ``events`` hook heard: ``(kind, fence)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]

    def acquired(self, primitive, *, fence, wait_time):
        self.calls.append(("acquired", fence))

    def released(self, primitive, *, fence, held_time):
        self.calls.append(("released", fence))

    def lost(self, primitive, *, fence, held_time):
        self.calls.append(("lost", fence))


# -- the local deadline keeps the drift allowance -----------------------------------------------------
def end_in_redis_at_most(read_pttl_ms) -> float:
    """The latest monotonic instant the hold can end in Redis, from one read of its remaining time:
    the read ran before it returned (``after``), and PTTL rounds down to the millisecond."""
    left = read_pttl_ms()
    after = time.monotonic()
    assert left > 0
    return after + (left + 1) / 1000


def deadline_keeps_the_margin(deadline: float, read_pttl_ms) -> None:
    """The promise: the holder's local deadline comes at least ``drift(TTL)`` before the hold ends
    in Redis (the acquire was sent before Redis ran it, and the margin is taken off)."""
    end = end_in_redis_at_most(read_pttl_ms)
    assert deadline <= end - drift(LONG), (
        f"the local deadline is {end - deadline:.3f}s before the end in Redis; the margin is {drift(LONG):.3f}s")


def test_a_locks_local_deadline_keeps_the_drift_margin(redis_client):
    lock = Lock(redis_client, "margin:lock", timeout=LONG)
    assert lock.acquire()
    deadline_keeps_the_margin(lock.deadline, lambda: redis_client.pttl("margin:lock"))
    lock.release()


def test_a_permits_and_a_read_write_holds_local_deadlines_keep_the_drift_margin(redis_client):
    semaphore = Semaphore(redis_client, "margin:sem", limit=1, timeout=LONG)
    assert semaphore.acquire("one")
    deadline_keeps_the_margin(semaphore.permit("one").deadline,
                              lambda: semaphore.holders()[0].ttl_ms)
    semaphore.release("one")
    rw = ReadWriteLock(redis_client, "margin:rw", timeout=LONG)
    assert rw.write.acquire()
    deadline_keeps_the_margin(rw.write.deadline, lambda: rw.holders()[0].ttl_ms)
    rw.write.release()


def test_an_asyncio_locks_local_deadline_keeps_the_drift_margin(redis_server, redis_client):
    async def scenario() -> None:
        client = redis_server.async_client()
        try:
            lock = AsyncLock(client, "margin:alock", timeout=LONG)
            assert await lock.acquire()
            deadline_keeps_the_margin(lock.deadline, lambda: redis_client.pttl("margin:alock"))
            await lock.release()
        finally:
            await client.aclose()

    asyncio.run(scenario())


# -- a release after the lease ended ---------------------------------------------------------------
# A permit or a read hold whose lease ended stays in the name's sorted set, unreclaimed, until a
# script passes by, as long as another hold keeps that set alive (alone, the set expires with the
# lease and the release finds nothing): each case below has such a companion, a hold of its own
# on a long lease, so that the release meets the ended lease itself.  The companion is released
# normally afterwards.


@pytest.mark.parametrize("companion", [False, True])
def test_a_read_hold_released_after_its_lease_ended_is_not_owned_and_lost(redis_client, companion):
    other = ReadWriteLock(redis_client, "ended:rw", timeout=30)
    if companion:
        assert other.read.acquire()
    lost: list = []
    told = Told()
    rw = ReadWriteLock(redis_client, "ended:rw", timeout=SHORT, on_lost=lost.append, events=told)
    assert rw.read.acquire()
    fence = rw.read.fence
    time.sleep(PAST_IT)
    with pytest.raises(LockNotOwnedError):
        rw.read.release()
    assert lost == [rw.read]  # the loss signal, once
    assert told.calls == [("acquired", fence), ("lost", fence)]  # lost, never released
    if companion:
        other.read.release()


def test_a_write_hold_released_after_its_lease_ended_is_not_owned_and_lost(redis_client):
    lost: list = []
    told = Told()
    rw = ReadWriteLock(redis_client, "ended:rw-write", timeout=SHORT, on_lost=lost.append, events=told)
    assert rw.write.acquire()
    fence = rw.write.fence
    time.sleep(PAST_IT)
    with pytest.raises(LockNotOwnedError):
        rw.write.release()
    assert lost == [rw.write] and told.calls == [("acquired", fence), ("lost", fence)]


@pytest.mark.parametrize("companion", [False, True])
def test_a_permit_released_after_its_lease_ended_is_not_released_and_lost(redis_client, companion):
    other = Semaphore(redis_client, "ended:sem", limit=2, timeout=30)
    if companion:
        assert other.acquire("long")
    told = Told()
    pool = Semaphore(redis_client, "ended:sem", limit=2, timeout=SHORT, events=told)
    assert pool.acquire("a")
    fence = pool.permit("a").fence
    time.sleep(PAST_IT)
    assert pool.release("a") is False  # documented: False when its lease ended
    assert told.calls == [("acquired", fence), ("lost", fence)]
    # A with block whose permit ended meanwhile raises (LockLostError, a LockNotOwnedError).
    with pytest.raises(LockNotOwnedError):
        with Semaphore(redis_client, "ended:sem", limit=2, timeout=SHORT, events=told):
            time.sleep(PAST_IT)
    assert told.kinds()[2:] == ["acquired", "lost"]
    if companion:
        assert other.release("long") is True


def test_asyncio_holds_released_after_their_lease_ended_are_not_owned_and_lost(async_redis):
    async def scenario() -> None:
        client = async_redis()
        try:
            other = AsyncReadWriteLock(client, "ended:arw", timeout=30)
            assert await other.read.acquire()
            lost: list = []
            told = Told()
            rw = AsyncReadWriteLock(client, "ended:arw", timeout=SHORT, on_lost=lost.append, events=told)
            assert await rw.read.acquire()
            await asyncio.sleep(PAST_IT)
            with pytest.raises(LockNotOwnedError):
                await rw.read.release()
            assert lost == [rw.read] and told.kinds() == ["acquired", "lost"]
            await other.read.release()

            companion = AsyncSemaphore(client, "ended:asem", limit=2, timeout=30)
            assert await companion.acquire("long")
            told = Told()
            pool = AsyncSemaphore(client, "ended:asem", limit=2, timeout=SHORT, events=told)
            assert await pool.acquire("a")
            await asyncio.sleep(PAST_IT)
            assert await pool.release("a") is False
            assert told.kinds() == ["acquired", "lost"]
            with pytest.raises(LockNotOwnedError):
                async with AsyncSemaphore(client, "ended:asem", limit=2, timeout=SHORT, events=told):
                    await asyncio.sleep(PAST_IT)
            assert told.kinds()[2:] == ["acquired", "lost"]
            assert await companion.release("long") is True
        finally:
            await client.aclose()

    asyncio.run(scenario())
