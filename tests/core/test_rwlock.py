"""The ReadWriteLock: readers together, a writer alone, FIFO across modes, fences, re-entry, dead
holders and waiters, keys, and a writer's wait behind many looping readers (across processes)."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import threading
import time

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError

from django_redis_coord import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    Lock,
    LockAcquireTimeout,
    LockLostError,
    NameKindConflict,
    Semaphore,
)
from django_redis_coord.core.exceptions import LockUpgradeError
from django_redis_coord.core.holders import rwlock_holders
from django_redis_coord.core.keys import key_slot
from django_redis_coord.core.queue.rules import META_RETENTION_MS
from django_redis_coord.core.rwlock.aio import ReadWriteLock as AsyncReadWriteLock
from django_redis_coord.core.rwlock.sync import ReadWriteLock
from django_redis_coord.core.watchdog import sync_watchdog
from tests.core.test_semaphore import max_concurrent
from tests.support.expiry import keys_without_expiry, longest_ttl
from tests.support.fences import assert_each_above_the_last, counter_ahead_of_the_clock
from tests.support.procs import CTX


def _wait_for(predicate, timeout: float = 10.0) -> None:
    stop_at = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < stop_at, "condition not reached in time"
        time.sleep(0.005)


def _commands(client) -> int:
    return int(client.info("stats")["total_commands_processed"])


# -- modes ---------------------------------------------------------------------------------------------
def test_readers_share_the_lock_and_a_writer_holds_it_alone(redis_client):
    first, second, writer = (ReadWriteLock(redis_client, "doc", timeout=10) for _ in range(3))
    assert first.read.acquire(blocking=False) and second.read.acquire(blocking=False)
    assert first.read.locked() and not first.write.locked() and first.locked()
    assert not writer.write.acquire(blocking=False)
    first.read.release()
    assert not writer.write.acquire(blocking=False)  # one reader still holds
    second.read.release()
    assert not writer.locked()
    assert writer.write.acquire(blocking=False)
    assert writer.write.locked() and not writer.read.locked()
    assert not first.read.acquire(blocking=False) and not second.write.acquire(blocking=False)
    writer.write.release()
    assert first.write.acquire(blocking=False)
    first.write.release()
    assert redis_client.exists("doc") == 0


def test_every_grant_has_a_fence_and_a_write_fence_exceeds_every_earlier_one(redis_client, spawn):
    rw = [ReadWriteLock(redis_client, "fences", timeout=10) for _ in range(4)]
    counter = counter_ahead_of_the_clock(redis_client, rw[0].keys.meta)
    fences = []
    assert rw[0].read.acquire() and rw[1].read.acquire()
    fences += [rw[0].read.fence, rw[1].read.fence]
    rw[0].read.release()
    rw[1].read.release()
    assert rw[2].write.acquire()
    fences.append(rw[2].write.fence)
    writer = spawn("fences", timeout=10, mode="write", wait=False)
    _wait_for(lambda: redis_client.zcard(rw[0].keys.queue) == 1)
    rw[2].write.release()  # a hand-off to the queued writer
    fences.append(writer.wait_held())
    assert writer.finish() == "RELEASED"
    assert rw[3].read.acquire()
    fences.append(rw[3].read.fence)
    rw[3].read.release()
    assert_each_above_the_last(counter, fences)


def test_holders_show_the_mode_and_how_many_hold(redis_client):
    readers = [ReadWriteLock(redis_client, "shown", timeout=10, label=f"r{i}") for i in range(3)]
    for rw in readers:
        assert rw.read.acquire()
    holders = rwlock_holders(redis_client, "shown")
    assert [h.extra for h in holders] == [{"mode": "read"}] * 3
    assert {h.used for h in holders} == {3} and [h.label for h in holders] == ["r0", "r1", "r2"]
    assert [h.fence for h in holders] == sorted(rw.read.fence for rw in readers)
    assert all(h.kind == "rw" and h.id.endswith(f".{h.fence}") for h in holders)
    assert holders[0].pid == os.getpid() and holders[0].thread == threading.current_thread().name
    for rw in readers:
        rw.read.release()
    writer = ReadWriteLock(redis_client, "shown", timeout=10)
    with writer.write:
        [only] = writer.holders()
        assert only.extra == {"mode": "write"} and only.used == 1 and only.fence == writer.write.fence
    assert writer.holders() == []


def test_the_registry_lists_the_lock_while_it_is_held(redis_client):
    rw = ReadWriteLock(redis_client, "listed", timeout=10)
    registry = rw.keys.registry
    assert rw.read.acquire()
    expiry = redis_client.zscore(registry, b"rw:listed")
    now_ms = redis_client.time()[0] * 1000
    assert now_ms + 8_000 < expiry <= now_ms + 11_000  # the latest lease end
    other = ReadWriteLock(redis_client, "listed", timeout=30)
    assert other.read.acquire()
    assert redis_client.zscore(registry, b"rw:listed") > expiry + 15_000
    other.read.release()
    assert redis_client.zscore(registry, b"rw:listed") == expiry  # back to the latest remaining
    rw.read.release()
    assert redis_client.zscore(registry, b"rw:listed") is None


def test_every_key_hashes_to_the_slot_of_the_name(redis_client):
    for name in ("plain", "user:{42}:profile", "}{odd"):
        holder = ReadWriteLock(redis_client, name, timeout=5)
        assert holder.write.acquire()
        waiter = ReadWriteLock(redis_client, name, timeout=5)
        thread = threading.Thread(target=lambda w=waiter: (w.read.acquire(blocking_timeout=5), w.read.release()))
        thread.start()
        _wait_for(lambda h=holder: redis_client.zcard(h.keys.queue) == 1)
        keys = set(redis_client.keys("*"))
        assert keys == {holder.keys.name, holder.keys.meta, holder.keys.queue, holder.keys.waiters,
                        holder.keys.registry}
        assert {key_slot(k) for k in keys} == {key_slot(holder.keys.name)}
        holder.write.release()
        thread.join()
        redis_client.flushdb()


# -- FIFO across modes ------------------------------------------------------------------------------------
def _queued_hold(url: str, name: str, mode: str, hold_for: float, out) -> None:
    rw = ReadWriteLock(redis.Redis.from_url(url), name, timeout=10)
    hold = rw.hold(mode)
    assert hold.acquire(blocking_timeout=30)
    granted = time.monotonic_ns()
    fence = hold.fence
    time.sleep(hold_for)
    released = time.monotonic_ns()
    hold.release()
    out.put((mode, fence, granted, released))


def _queue_in_order(client, rw, url: str, modes: list[str], hold_for: float) -> tuple[list, list]:
    """One process per mode, each queued after the one before; returns the processes and the queue."""
    queue = CTX.Queue()
    procs = []
    for index, mode in enumerate(modes):
        proc = CTX.Process(target=_queued_hold, args=(url, rw.keys.name.decode(), mode, hold_for, queue))
        proc.start()
        procs.append(proc)
        _wait_for(lambda n=index + 1: client.zcard(rw.keys.queue) == n)
    return procs, queue


def test_fifo_across_modes_readers_at_the_head_together_writers_alone(redis_client, redis_url):
    first = ReadWriteLock(redis_client, "fifo", timeout=10)
    assert first.read.acquire()
    first_fence = first.read.fence
    modes = ["write", "read", "read", "write", "read"]
    procs, queue = _queue_in_order(redis_client, first, redis_url, modes, hold_for=0.3)
    # A reader that arrives while only readers hold, but behind a queued writer, waits for it.
    assert [m[:1] for m in map(bytes.decode, redis_client.zrange(first.keys.queue, 0, -1))] == list("wrrwr")
    released_at = time.monotonic_ns()
    first.read.release()
    served = [queue.get(timeout=30) for _ in procs]
    for proc in procs:
        proc.join(10)
    by_fence = sorted(served, key=lambda item: item[1])
    assert [item[0] for item in by_fence] == modes  # granted in queue order, whatever the mode
    assert by_fence[0][1] > first_fence
    w1, r2, r3, w4, r5 = by_fence
    assert w1[2] >= released_at
    # The two readers at the head were granted together (their holds overlap) after the writer ...
    assert min(r2[2], r3[2]) > w1[3] and max(r2[2], r3[2]) < min(r2[3], r3[3])
    # ... and the next writer only once both had released; the last reader waited for it.
    assert w4[2] > max(r2[3], r3[3]) and r5[2] > w4[3]


def test_a_writer_that_gives_up_lets_the_readers_queued_behind_it_in_at_once(redis_client):
    holder = ReadWriteLock(redis_client, "giveup", timeout=10)
    assert holder.read.acquire()
    writer = ReadWriteLock(redis_client, "giveup", timeout=10)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("write", writer.write.acquire(blocking_timeout=0.6)))
    writer_started = time.monotonic()
    thread.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    # A waiter without a timeout refreshes its place every waiter_lease / 3 (10 s here): within
    # its 5 s, only the writer's give-up can let this reader in.
    reader = ReadWriteLock(redis_client, "giveup", waiter_lease=30)
    assert reader.read.acquire(blocking_timeout=5)
    granted_at = time.monotonic()
    thread.join()
    assert outcome == {"write": False}
    assert granted_at - writer_started >= 0.6  # behind the writer, which waited its blocking_timeout
    assert len(reader.holders()) == 2
    reader.read.release()
    holder.read.release()


# -- re-entry --------------------------------------------------------------------------------------------
def test_a_read_inside_a_read_joins_the_hold_without_a_round_trip(redis_client):
    rw = ReadWriteLock(redis_client, "reenter", timeout=10)
    with rw.read:
        fence = rw.read.fence
        before = _commands(redis_client)
        with rw.read:
            assert _commands(redis_client) == before + 1  # the INFO call itself: nothing was sent
            assert rw.read.fence == fence and len(rw.holders()) == 1
        assert rw.read.owned() and rw.read.fence == fence
    assert not rw.read.owned() and rw.read.fence is None and not rw.locked()


def test_a_read_inside_a_write_joins_the_write_and_a_write_inside_a_read_is_refused(redis_client):
    rw = ReadWriteLock(redis_client, "nested", timeout=10)
    other = ReadWriteLock(redis_client, "nested", timeout=10)
    with rw.write:
        fence = rw.write.fence
        with rw.read:
            assert rw.read.fence == fence and rw.read.owned() and rw.write.owned()
            assert not other.read.acquire(blocking=False)  # still held alone
        assert rw.read.fence is None and not rw.read.owned()
        with rw.write:  # a write inside a write joins it too
            assert rw.write.fence == fence and len(rw.holders()) == 1
    assert not rw.locked()
    with rw.read:
        before = _commands(redis_client)
        with pytest.raises(LockUpgradeError) as info:
            rw.write.acquire(blocking=False)
        assert isinstance(info.value, LockError)
        assert _commands(redis_client) == before + 1  # refused before anything was sent
        assert rw.read.valid and not rw.write.valid
    # A write released before the read nested in it: the thread holds the write until the read ends.
    assert rw.write.acquire() and rw.read.acquire()
    rw.write.release()
    assert not other.read.acquire(blocking=False) and rw.read.valid
    rw.read.release()
    assert other.read.acquire(blocking=False)
    other.read.release()


def test_releasing_a_mode_not_held_is_refused(redis_client):
    rw = ReadWriteLock(redis_client, "unheld", timeout=10)
    with pytest.raises(LockError):
        rw.read.release()
    with rw.write:
        with pytest.raises(LockError):
            rw.read.release()
    with rw.read:
        with pytest.raises(LockError):
            rw.write.release()
    with pytest.raises(LockError):
        rw.read.extend(1)


def test_another_thread_using_the_same_object_is_another_holder(redis_client):
    rw = ReadWriteLock(redis_client, "threads", timeout=10)
    assert rw.write.acquire()
    got = []
    thread = threading.Thread(target=lambda: got.append(rw.read.acquire(blocking_timeout=0.2)))
    thread.start()
    thread.join()
    assert got == [False]
    rw.write.release()


# -- dead holders, dead waiters ---------------------------------------------------------------------------
def _hold_then_die(url: str, name: str, mode: str, ttl: float, ready) -> None:
    rw = ReadWriteLock(redis.Redis.from_url(url), name, timeout=ttl)
    assert rw.hold(mode).acquire()
    ready.send(rw.hold(mode).fence)  # a pipe: sent before the kill (a queue's feeder thread may not be)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("dead, waiting", [("read", "write"), ("write", "read")])
def test_a_dead_holders_hold_ends_with_its_ttl(redis_client, redis_url, dead, waiting):
    ready, sender = CTX.Pipe(duplex=False)
    child = CTX.Process(target=_hold_then_die, args=(redis_url, "crashed", dead, 0.8, sender))
    child.start()
    assert ready.poll(10)
    dead_fence = ready.recv()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    # A waiter without a timeout refreshes its place every waiter_lease / 3 (10 s here): within its
    # 5 s, only the wake-up at the dead hold's lease end can let it in (not polling).
    rw = ReadWriteLock(redis_client, "crashed", waiter_lease=30)
    assert rw.hold(waiting).acquire(blocking_timeout=5)
    assert rw.hold(waiting).fence > dead_fence
    assert [h.extra["mode"] for h in rw.holders()] == [waiting]
    rw.hold(waiting).release()


def _queue_for_ever(url: str, name: str, lease: float) -> None:
    rw = ReadWriteLock(redis.Redis.from_url(url), name, timeout=10, waiter_lease=lease)
    rw.write.acquire(blocking_timeout=30)  # killed by the test while it waits


def test_a_dead_writer_waiter_is_skipped_after_its_lease(redis_client, redis_url):
    lease = 1.5  # refreshed every 0.5 s
    holder = ReadWriteLock(redis_client, "dead-waiter", timeout=10)
    assert holder.read.acquire()
    child = CTX.Process(target=_queue_for_ever, args=(redis_url, "dead-waiter", lease))
    child.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    killed = []

    def kill():
        killed.append(time.monotonic())
        os.kill(child.pid, signal.SIGKILL)

    timer = threading.Timer(0.3, kill)
    timer.start()
    reader = ReadWriteLock(redis_client, "dead-waiter", timeout=10, waiter_lease=lease)
    assert reader.refresh_interval == lease / 3
    assert reader.read.acquire(blocking_timeout=10)  # behind the writer until its lease lapsed
    granted = time.monotonic()
    timer.join()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    # Not let in past the live writer; let in once its lease, counted from its last refresh before
    # it died, lapsed and the reader's next refresh (lease / 3 later) found that: before a second
    # lease ran out.
    assert killed and killed[0] < granted < killed[0] + 2 * lease, (killed, granted)
    assert len(holder.holders()) == 2
    reader.read.release()
    holder.read.release()


# -- renewal and loss --------------------------------------------------------------------------------
def test_the_watchdog_renews_a_read_past_three_timeouts(redis_client):
    rw = ReadWriteLock(redis_client, "renewed", timeout=0.5, auto_renew=True)
    assert rw.read.acquire()
    fence = rw.read.fence
    time.sleep(1.8)
    assert rw.read.valid and rw.read.fence == fence
    assert not ReadWriteLock(redis_client, "renewed", timeout=0.5).write.acquire(blocking=False)
    rw.read.ensure_valid()
    rw.read.release()
    assert all(hold.owner is not rw for hold in list(sync_watchdog()._holds.values()))


def test_a_hold_taken_away_is_reported_lost_with_its_hold_object(redis_client):
    lost = []
    rw = ReadWriteLock(redis_client, "taken", timeout=0.6, auto_renew=True, on_lost=lost.append)
    assert rw.write.acquire()
    redis_client.zrem("taken", *redis_client.zrange("taken", 0, -1))  # an operator removed it
    _wait_for(lambda: lost, timeout=5)
    assert lost == [rw.write] and not rw.write.valid
    with pytest.raises(LockLostError):
        rw.write.ensure_valid()
    with pytest.raises(LockNotOwnedError):
        rw.write.release()
    assert lost == [rw.write]  # once


def test_extend_and_reacquire_change_the_lease_in_redis(redis_client):
    rw = ReadWriteLock(redis_client, "ext", timeout=2)
    with rw.read:
        assert rw.read.extend(10)
        assert 10_000 < redis_client.pttl("ext") <= 12_000  # 10 s added to what was left of 2 s
        assert rw.read.extend(3, replace_ttl=True)
        assert 0 < redis_client.pttl("ext") <= 3_000  # replaced, and still there
        assert rw.read.extend(30, replace_ttl=True) and rw.read.reacquire()
        assert 0 < redis_client.pttl("ext") <= 2_000  # back to the timeout
    endless = ReadWriteLock(redis_client, "endless")
    with endless.write:
        with pytest.raises(LockError):
            endless.write.extend(1)


def test_a_with_block_that_cannot_acquire_in_time_raises(redis_client):
    holder = ReadWriteLock(redis_client, "cm", timeout=10)
    assert holder.write.acquire()
    with pytest.raises(LockAcquireTimeout):
        with ReadWriteLock(redis_client, "cm", timeout=10, blocking_timeout=0.1).read:
            pass
    holder.write.release()
    with pytest.raises(LockNotOwnedError):  # as redis-py's Lock: its TTL ended it before the release
        with ReadWriteLock(redis_client, "cm", timeout=0.1).read:
            time.sleep(0.25)


# -- keys --------------------------------------------------------------------------------------------------
def test_names_used_once_leave_only_keys_that_expire(redis_client):
    for index in range(100):
        rw = ReadWriteLock(redis_client, f"rw:{index}", timeout=5)
        with rw.read:
            pass
        with rw.write:
            pass
        # Never released; a lease longer than the loop takes on a loaded machine.
        assert ReadWriteLock(redis_client, f"dropped:{index}", timeout=30).read.acquire()
    assert keys_without_expiry(redis_client) == []
    assert longest_ttl(redis_client) <= 30_000 + META_RETENTION_MS
    assert 0 < redis_client.pttl("dropped:0") <= 30_000  # the holders go when the last lease ends


def test_waiters_and_endless_holds_leave_only_keys_that_expire(redis_client):
    holder = ReadWriteLock(redis_client, "busy")  # no timeout: kept while held
    assert holder.write.acquire()
    results = []
    threads = [threading.Thread(target=lambda m=mode: results.append(
        ReadWriteLock(redis_client, "busy", timeout=5).hold(m).acquire(blocking_timeout=0.2)))
        for mode in ("read", "write", "read")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [False] * 3
    assert set(keys_without_expiry(redis_client)) == {b"busy", holder.keys.meta, holder.keys.registry}
    holder.write.release()
    assert keys_without_expiry(redis_client) == []
    assert longest_ttl(redis_client) <= META_RETENTION_MS


# -- bad input -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error", [
    ({"timeout": 0}, InvalidLockArgument),
    ({"timeout": "1"}, InvalidLockArgumentType),
    ({"blocking": "yes"}, InvalidLockArgumentType),
    ({"blocking_timeout": -1}, InvalidLockArgument),
    ({"auto_renew": True}, InvalidLockArgument),
    ({"waiter_lease": 0}, InvalidLockArgument),
    ({"on_lost": 3}, InvalidLockArgumentType),
])
def test_bad_arguments_are_typed_errors_and_write_nothing(redis_client, kwargs, error):
    with pytest.raises(error):
        ReadWriteLock(redis_client, "bad", **kwargs)
    assert redis_client.dbsize() == 0


def test_bad_modes_and_names_used_by_other_kinds_are_refused(redis_client):
    rw = ReadWriteLock(redis_client, "shared-name", timeout=5)
    with pytest.raises(InvalidLockArgument):
        rw.hold("append")
    with pytest.raises(InvalidLockArgumentType):
        rw.hold(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidLockArgument):
        ReadWriteLock(redis_client, "", timeout=5)
    lock = Lock(redis_client, "shared-name", timeout=5)
    assert lock.acquire()
    with pytest.raises(NameKindConflict):
        rw.read.acquire()
    lock.release()
    semaphore = Semaphore(redis_client, "shared-name", limit=2, timeout=5)
    assert semaphore.acquire("peter")
    with pytest.raises(NameKindConflict):
        rw.write.acquire(blocking=False)
    assert not rw.read.locked() and not rw.write.locked()  # a permit is neither
    assert semaphore.release("peter")


# -- a writer behind many looping readers (across processes) ---------------------------------------------
READERS = 16
READER_HOLD = (0.05, 0.2)


def _looping_reader(url: str, name: str, seed: int, stop, out) -> None:
    rw = ReadWriteLock(redis.Redis.from_url(url), name, timeout=10)
    rng = random.Random(seed)
    holds = []
    while not stop.is_set():
        assert rw.read.acquire(blocking_timeout=30)
        start = time.monotonic_ns()
        time.sleep(rng.uniform(*READER_HOLD))
        holds.append((start, time.monotonic_ns()))
        rw.read.release()
    out.put(holds)


def _first_queued(client, queue: bytes, done: threading.Event, seen: list) -> None:
    """Note the instant the queue is first seen not empty (the writer queued), until ``done``."""
    while not done.is_set():
        if client.zcard(queue):
            seen.append(time.monotonic_ns())
            return
        time.sleep(0.001)


def test_a_writer_behind_sixteen_looping_readers_is_served_before_any_later_reader(redis_client, redis_url):
    out, stop = CTX.Queue(), CTX.Event()
    procs = [CTX.Process(target=_looping_reader, args=(redis_url, "busy-readers", seed, stop, out))
             for seed in range(READERS)]
    for proc in procs:
        proc.start()
    writer = ReadWriteLock(redis_client, "busy-readers", timeout=10)
    try:
        _wait_for(lambda: len(writer.holders()) >= READERS // 2, timeout=30)
        writes = []
        for _ in range(5):
            time.sleep(random.uniform(0.1, 0.3))
            readers_now = len(writer.holders())
            assert redis_client.zcard(writer.keys.queue) == 0  # readers queue only behind a writer
            done, seen = threading.Event(), []
            watcher = threading.Thread(target=_first_queued, args=(redis_client, writer.keys.queue, done, seen))
            watcher.start()
            assert writer.write.acquire(blocking_timeout=10)
            granted = time.monotonic_ns()
            done.set()
            watcher.join()
            time.sleep(0.02)
            writes.append((seen[0] if seen else granted, granted, time.monotonic_ns(), readers_now))
            writer.write.release()
    finally:
        stop.set()
    holds_by_reader = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(10)
    reader_holds = [hold for holds in holds_by_reader for hold in holds]
    assert max_concurrent(reader_holds) >= READERS // 2  # the readers did overlap: a read lock is never free
    for queued, granted, released, readers_now in writes:
        assert readers_now >= 2
        # Once the writer is queued, no reader gets in before it: a reader's hold that starts between
        # the queueing and the grant can only be one it asked for before the writer queued, so at
        # most one per reader (a reader-preferring lock lets them loop on and the writer starve).
        for holds in holds_by_reader:
            assert sum(queued < start < granted for start, _ in holds) <= 1, (queued, granted, holds)
        # The write was held alone: no reader hold overlaps it.
        assert all(end <= granted or start >= released for start, end in reader_holds)


# -- asyncio ----------------------------------------------------------------------------------------------
def test_async_readers_share_and_waiting_tasks_are_served_fifo_across_modes(async_redis):
    async def scenario():
        client = async_redis()
        first = AsyncReadWriteLock(client, "a:fifo", timeout=10)
        assert await first.read.acquire()
        spans: dict[int, tuple] = {}

        async def queued(index, mode):
            rw = AsyncReadWriteLock(client, "a:fifo", timeout=10)
            async with rw.hold(mode) as hold:
                start = time.monotonic_ns()
                fence = hold.fence
                await asyncio.sleep(0.1)
                spans[index] = (mode, fence, start, time.monotonic_ns())

        modes = ["write", "read", "read", "write"]
        tasks = []
        for index, mode in enumerate(modes):
            tasks.append(asyncio.create_task(queued(index, mode)))
            while await client.zcard(first.keys.queue) < index + 1:
                await asyncio.sleep(0.005)
        assert await first.read.locked() and not await first.write.locked()
        await first.read.release()
        await asyncio.gather(*tasks)
        await client.aclose()
        return [spans[index] for index in range(len(modes))]

    w1, r2, r3, w4 = asyncio.run(scenario())
    assert w1[1] < r2[1] and w1[1] < r3[1] and max(r2[1], r3[1]) < w4[1]
    assert min(r2[2], r3[2]) > w1[3] and max(r2[2], r3[2]) < min(r2[3], r3[3])  # the readers together
    assert w4[2] > max(r2[3], r3[3])


def test_async_holds_are_per_task_and_reenter_per_task(async_redis):
    async def scenario():
        client = async_redis()
        rw = AsyncReadWriteLock(client, "a:tasks", timeout=10)
        both_in, both_counted = asyncio.Event(), asyncio.Event()
        fences, counted = [], []

        async def reader():
            async with rw.read:
                fence = rw.read.fence
                async with rw.read:  # a read inside a read of the same task joins it
                    assert rw.read.fence == fence
                fences.append(fence)
                if len(fences) == 2:
                    both_in.set()
                await both_in.wait()
                assert len(await rw.holders()) == 2  # one hold per task, not per object
                counted.append(fence)
                if len(counted) == 2:
                    both_counted.set()
                await both_counted.wait()  # neither leaves before both have counted
                with pytest.raises(LockUpgradeError):
                    await rw.write.acquire()

        await asyncio.gather(reader(), reader())
        assert fences[0] != fences[1] and not await rw.locked()
        with pytest.raises(LockError):
            await rw.read.release()  # this task holds nothing
        await client.aclose()

    asyncio.run(scenario())


def test_async_a_cancelled_writer_lets_the_readers_behind_it_in(async_redis):
    async def scenario():
        client = async_redis()
        holder = AsyncReadWriteLock(client, "a:cancel", timeout=10)
        assert await holder.read.acquire()
        writer = asyncio.create_task(AsyncReadWriteLock(client, "a:cancel", timeout=10).write.acquire())
        while await client.zcard(holder.keys.queue) < 1:
            await asyncio.sleep(0.005)
        reader_rw = AsyncReadWriteLock(client, "a:cancel", timeout=10)
        reader = asyncio.create_task(reader_rw.read.acquire(blocking_timeout=5))
        while await client.zcard(holder.keys.queue) < 2:
            await asyncio.sleep(0.005)
        assert not reader.done()  # behind the writer
        writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writer
        assert await asyncio.wait_for(reader, 2)
        assert [h.extra["mode"] for h in await holder.holders()] == ["read", "read"]
        assert await client.zcard(holder.keys.queue) == 0
        await holder.read.release()
        await client.aclose()

    asyncio.run(scenario())


def test_async_renewal_and_a_task_that_ends_holding(async_redis, caplog):
    async def scenario():
        client = async_redis()
        rw = AsyncReadWriteLock(client, "a:renewed", timeout=0.5, auto_renew=True)
        async with rw.write:
            await asyncio.sleep(1.6)
            assert rw.write.valid and await rw.write.owned()
        with caplog.at_level(logging.WARNING, logger="django_redis_coord"):
            assert await asyncio.create_task(rw.read.acquire())  # acquired in a task of its own
            await asyncio.sleep(0)
        assert any("ended without releasing" in r.getMessage() for r in caplog.records)
        for _ in range(300):  # no longer renewed: its TTL ends it
            if not await client.exists("a:renewed"):
                break
            await asyncio.sleep(0.01)
        assert not await client.exists("a:renewed")
        await client.aclose()

    asyncio.run(scenario())


# -- what the listing reads ------------------------------------------------------------------------------
def test_the_listing_finds_the_registry_entry_and_reads_the_readers_with_one_script(redis_client):
    from django_redis_coord.core.listing import HolderListing
    from django_redis_coord.core.scripts import sync_scripts

    readers = [ReadWriteLock(redis_client, "report:{7}", timeout=30, label=f"r{i}") for i in range(3)]
    for rw in readers:
        assert rw.read.acquire()
    plain = Lock(redis_client, "plain", timeout=30)
    assert plain.acquire()
    listing = HolderListing(redis_client)
    entries = {(entry.kind, entry.raw_name) for entry in listing.entries()}
    assert entries == {("rw", b"report:{7}"), ("lock", b"plain")}
    assert [(h.name, h.kind, h.mode, h.used) for h in listing.holders()] == [
        ("plain", "lock", None, None), *[("report:{7}", "rw", "read", 3)] * 3]
    # What it reads them with: the semaphore's many-holders script, given the lock's keys.
    keys = readers[0].keys
    reply = sync_scripts.get(redis_client, "sem_inspect_many")((keys.name, keys.meta, keys.queue), (),
                                                               client=redis_client)
    record = reply.split(b":", 2)[2] if isinstance(reply, bytes) else reply.encode().split(b":", 2)[2]
    _limit, used, waiting = record.split(b" ", 3)[:3]
    assert (used, waiting) == (b"3", b"0") and record.count(b'"mode": "read"') == 3
    for rw in readers:
        rw.read.release()
    plain.release()
