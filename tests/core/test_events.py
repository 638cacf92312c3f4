"""The ``events`` hook of the core primitives (no Django): what each lock, semaphore and Redlock,
sync and asyncio, tells of its holds, against real redis-servers."""

from __future__ import annotations

import asyncio
import time

import pytest

from django_redis_coord import Events, InvalidLockArgumentType, Lock, LockNotOwnedError, Redlock, Semaphore
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.asyncio import Redlock as AsyncRedlock
from django_redis_coord.asyncio import Semaphore as AsyncSemaphore


class Recorder(Events):
    """Every call, as ``(kind, primitive, arguments)``; only the sync methods are overridden, so
    an asyncio primitive reaches them through the default ``a``-methods."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, dict]] = []

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.calls]

    def acquired(self, primitive, *, fence, wait_time):
        self.calls.append(("acquired", primitive, {"fence": fence, "wait_time": wait_time}))

    def contended(self, primitive, *, wait_time, pttl, limit):
        self.calls.append(("contended", primitive, {"wait_time": wait_time, "pttl": pttl, "limit": limit}))

    def released(self, primitive, *, fence, held_time):
        self.calls.append(("released", primitive, {"fence": fence, "held_time": held_time}))

    def lost(self, primitive, *, fence, held_time):
        self.calls.append(("lost", primitive, {"fence": fence, "held_time": held_time}))


class Refusing(Recorder):
    def acquired(self, primitive, *, fence, wait_time):
        super().acquired(primitive, fence=fence, wait_time=wait_time)
        raise ValueError("receiver failed")


def wait_for(predicate, timeout: float = 5.0) -> bool:
    stop_at = time.monotonic() + timeout
    while time.monotonic() < stop_at:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


def test_a_lock_tells_acquired_contended_and_released_once_per_hold(redis_client):
    events = Recorder()
    held = Lock(redis_client, "ev:lock", timeout=10, reentrant=True, events=events)
    other = Lock(redis_client, "ev:lock", timeout=10, events=events)
    assert held.acquire()
    assert held.acquire()  # re-entered: no new hold, nothing told
    assert not other.acquire(blocking=False)
    time.sleep(0.05)
    held.release()  # the inner hold
    held.release()
    assert events.kinds() == ["acquired", "contended", "released"]
    (_, first, acquired), (_, second, contended), (_, third, released) = events.calls
    assert first is held and second is other and third is held
    assert acquired["fence"] == released["fence"] > 0 and acquired["wait_time"] >= 0
    assert 9000 < contended["pttl"] <= 10000 and contended["limit"] is None
    assert other.refused_pttl == contended["pttl"]
    assert released["held_time"] >= 0.05


def test_a_lock_found_lost_at_release_tells_lost_once_and_not_released(redis_client):
    events = Recorder()
    lock = Lock(redis_client, "ev:expired", timeout=0.1, events=events)
    assert lock.acquire()
    time.sleep(0.2)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert events.kinds() == ["acquired", "lost"]
    assert events.calls[1][2]["fence"] == events.calls[0][2]["fence"] and events.calls[1][2]["held_time"] >= 0.2


def test_the_watchdog_tells_a_loss_once_and_the_release_after_it_adds_nothing(redis_client):
    events = Recorder()
    lost_calls = []
    lock = Lock(redis_client, "ev:renewed", timeout=0.6, auto_renew=True, events=events, on_lost=lost_calls.append)
    assert lock.acquire()
    redis_client.delete("ev:renewed")  # the next renewal finds the hold gone
    assert wait_for(lambda: "lost" in events.kinds())
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert events.kinds() == ["acquired", "lost"] and lost_calls == [lock]


def test_an_acquired_receiver_that_raises_gives_the_hold_back(redis_client):
    lock = Lock(redis_client, "ev:refusing", timeout=10, events=Refusing())
    with pytest.raises(ValueError, match="receiver failed"):
        lock.acquire()
    assert redis_client.exists("ev:refusing") == 0 and lock.fence is None
    assert Lock(redis_client, "ev:refusing", timeout=10).acquire(blocking=False)


def test_a_semaphore_tells_the_limit_in_force_and_each_permit(redis_client):
    events = Recorder()
    pool = Semaphore(redis_client, "ev:pool", limit=1, timeout=10, events=events)
    assert pool.acquire("a")
    assert not pool.acquire("b", blocking=False)
    assert pool.release("a")
    assert not pool.release("a")  # nothing held: nothing told
    assert events.kinds() == ["acquired", "contended", "released"]
    assert events.calls[1][2]["limit"] == 1 and 9000 < events.calls[1][2]["pttl"] <= 10000
    assert events.calls[0][2]["fence"] == events.calls[2][2]["fence"]


def test_a_semaphore_permit_that_expired_is_told_lost_at_release(redis_client):
    events = Recorder()
    pool = Semaphore(redis_client, "ev:pool-expired", limit=2, timeout=0.1, events=events)
    assert pool.acquire("a")
    time.sleep(0.2)
    assert not pool.release("a")
    assert events.kinds() == ["acquired", "lost"]


def test_asyncio_lock_and_semaphore_reach_the_sync_methods_by_default(redis_server):
    events = Recorder()

    async def scenario():
        client = redis_server.async_client()
        try:
            lock = AsyncLock(client, "ev:alock", timeout=10, events=events)
            async with lock:
                assert not await AsyncLock(client, "ev:alock", timeout=10, events=events).acquire(blocking=False)
            pool = AsyncSemaphore(client, "ev:apool", limit=1, timeout=10, events=events)
            assert await pool.acquire()
            assert not await AsyncSemaphore(client, "ev:apool", limit=1, events=events).acquire(blocking=False)
            assert await pool.release()
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert events.kinds() == ["acquired", "contended", "released"] * 2


@pytest.mark.parametrize("kind", ["lock", "rwlock write", "rwlock read"])
def test_an_asyncio_acquire_cancelled_in_its_receiver_gives_the_hold_back(redis_server, kind):
    from django_redis_coord.asyncio import ReadWriteLock as AsyncReadWriteLock

    async def scenario():
        entered = asyncio.Event()

        class Slow(Events):
            async def aacquired(self, primitive, *, fence, wait_time):
                entered.set()
                await asyncio.sleep(10)

        client = redis_server.async_client()
        name = f"ev:cancelled:{kind}"
        try:
            if kind == "lock":
                lock = AsyncLock(client, name, timeout=None, events=Slow())
                hold, again = lock, AsyncLock(client, name, timeout=5)
            else:
                lock = AsyncReadWriteLock(client, name, timeout=None, events=Slow())
                hold = lock.hold(kind.split()[1])
                again = AsyncReadWriteLock(client, name, timeout=5).write
            task = asyncio.ensure_future(hold.acquire())
            await entered.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Given back (no expiry: only the release could end it), and this task holds nothing.
            taken = await again.acquire(blocking=False)
            if taken:
                await again.release()
            return taken, hold.fence
        finally:
            await client.aclose()

    acquired, fence = asyncio.run(scenario())
    assert acquired and fence is None


def test_a_redlock_tells_its_holds_and_how_long_the_other_quorum_lasts(redis_servers):
    servers = redis_servers(3)
    clients = [server.client() for server in servers]
    events = Recorder()
    first = Redlock(clients, "ev:redlock", timeout=5, events=events)
    second = Redlock(clients, "ev:redlock", timeout=5, events=events)
    assert first.acquire()
    assert not second.acquire(blocking=False)
    first.release()
    assert events.kinds() == ["acquired", "contended", "released"]
    assert 4000 < events.calls[1][2]["pttl"] <= 5000 and second.refused_pttl == events.calls[1][2]["pttl"]

    async def scenario():
        aclients = [server.async_client() for server in servers]
        try:
            lock = AsyncRedlock(aclients, "ev:aredlock", timeout=5, events=events)
            async with lock:
                assert not await AsyncRedlock(aclients, "ev:aredlock", timeout=5, events=events).acquire(blocking=False)
        finally:
            for client in aclients:
                await client.aclose()

    asyncio.run(scenario())
    assert events.kinds()[3:] == ["acquired", "contended", "released"]


def test_events_must_have_the_methods_of_events(redis_client):
    with pytest.raises(InvalidLockArgumentType, match="events must be"):
        Lock(redis_client, "ev:bad", events=object())
    with pytest.raises(InvalidLockArgumentType, match="events must be"):
        Semaphore(redis_client, "ev:bad", limit=1, events=print)


def test_a_read_write_lock_tells_of_each_side(redis_client):
    from django_redis_coord.core.rwlock.sync import ReadWriteLock

    events = Recorder()
    lock = ReadWriteLock(redis_client, "ev:rw", timeout=10, events=events)
    other = ReadWriteLock(redis_client, "ev:rw", timeout=10, events=events)
    with lock.read:
        with lock.read:  # re-entered: nothing told
            assert not other.write.acquire(blocking=False)
    with lock.write:
        pass
    assert events.kinds() == ["acquired", "contended", "released", "acquired", "released"]
    subjects = [subject for _, subject, _ in events.calls]
    assert subjects == [lock.read, other.write, lock.read, lock.write, lock.write]
    assert 9000 < events.calls[1][2]["pttl"] <= 10000 and other.write.refused_pttl == events.calls[1][2]["pttl"]
    assert events.calls[3][2]["fence"] > events.calls[0][2]["fence"]


class RaisingLoss(Recorder):
    def lost(self, primitive, *, fence, held_time):
        super().lost(primitive, fence=fence, held_time=held_time)
        raise RuntimeError("receiver of lost failed")


def test_on_lost_runs_and_the_release_says_not_owned_when_the_events_lost_raises(redis_client):
    lost_calls = []
    lock = Lock(redis_client, "ev:raising-lost", timeout=0.1, events=RaisingLoss(), on_lost=lost_calls.append)
    assert lock.acquire()
    time.sleep(0.2)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lost_calls == [lock]


def test_a_read_write_lock_is_usable_after_its_events_lost_raised(redis_client):
    from django_redis_coord.core.rwlock.sync import ReadWriteLock

    events = RaisingLoss()
    lock = ReadWriteLock(redis_client, "ev:rw-raising-lost", timeout=0.1, events=events)
    assert lock.read.acquire()
    time.sleep(0.2)
    with pytest.raises(LockNotOwnedError):
        lock.read.release()
    assert lock.write.acquire(blocking=False)  # the thread's state was cleared: a new hold, not a re-entry
    lock.write.release()
    assert events.kinds() == ["acquired", "lost", "acquired", "released"]


def test_a_semaphore_identity_renewing_its_permit_is_no_new_hold(redis_client):
    events = Recorder()
    pool = Semaphore(redis_client, "ev:renewing", limit=2, timeout=10, events=events)
    assert pool.acquire("worker-1")
    started = pool.permit("worker-1").started
    time.sleep(0.02)
    assert pool.acquire("worker-1")  # renews the live permit: same fence, same start
    assert pool.permit("worker-1").started == started
    assert pool.release("worker-1")
    assert events.kinds() == ["acquired", "released"] and events.calls[1][2]["held_time"] >= 0.02


def test_an_asyncio_release_cancelled_midway_is_still_told(redis_server):
    events = Recorder()

    async def scenario():
        client = redis_server.async_client()
        try:
            lock = AsyncLock(client, "ev:cancelled-release", timeout=10, events=events, thread_local=False)
            assert await lock.acquire()
            task = asyncio.ensure_future(lock.release())
            await asyncio.sleep(0)  # the release is under way
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(100):
                if "released" in events.kinds():
                    break
                await asyncio.sleep(0.01)
            return await client.exists("ev:cancelled-release")
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == 0
    assert events.kinds() == ["acquired", "released"]


def test_a_late_loss_of_an_ended_hold_leaves_the_next_hold_alone(redis_client):
    from django_redis_coord.core.watchdog import Hold, Watchdog

    lost_calls = []
    lock = Lock(redis_client, "ev:late-loss", timeout=5, on_lost=lost_calls.append)
    assert lock.acquire()
    first = lock._state().token
    lock.release()
    assert lock.acquire()  # the same thread's state now describes the next hold
    Watchdog._lose(Hold(owner=lock, local=lock._state(), token=first, interval=1.0))
    assert lost_calls == [] and lock.valid
    lock.release()
