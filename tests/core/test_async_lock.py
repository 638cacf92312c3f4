"""The asyncio Lock: same behaviour as the sync one, and task-safe."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from redis.exceptions import LockError, LockNotOwnedError

from django_redis_coord import InvalidLockArgument, LockLostError
from django_redis_coord.asyncio import Lock
from django_redis_coord.core.keys import keys_for
from django_redis_coord.core.waiting.rules import READ_SECONDS


def run(coro):
    return asyncio.run(coro)


def test_two_tasks_sharing_an_instance_never_release_each_others_hold(async_redis):
    async def scenario():
        client = async_redis()
        lock = Lock(client, "a:shared", timeout=10)
        acquired = asyncio.Event()
        done = asyncio.Event()

        async def holder():
            assert await lock.acquire()
            acquired.set()
            await done.wait()
            await lock.release()

        async def intruder():
            await acquired.wait()
            assert lock.local.token is None  # this task holds nothing
            with pytest.raises(LockError):
                await lock.release()
            with pytest.raises(LockError):
                await lock.extend(5)
            assert not await lock.owned()
            assert await lock.acquire(blocking=False) is False  # the other task holds it
            done.set()

        await asyncio.gather(holder(), intruder())
        assert not await client.exists("a:shared")
        await client.aclose()

    run(scenario())


def test_tasks_are_served_in_arrival_order(async_redis):
    async def scenario():
        client = async_redis()
        holder = Lock(client, "a:fifo", timeout=10)
        await holder.acquire()
        order: list[int] = []

        async def waiter(index: int):
            lock = Lock(client, "a:fifo", timeout=10)
            await lock.acquire()
            order.append(index)
            await asyncio.sleep(0.002)
            await lock.release()

        tasks = []
        for index in range(5):
            tasks.append(asyncio.ensure_future(waiter(index)))
            while await client.zcard(keys_for(b"a:fifo").queue) < index + 1:
                await asyncio.sleep(0.005)
        await holder.release()
        await asyncio.gather(*tasks)
        assert order == list(range(5))
        await client.aclose()

    run(scenario())


def test_expiry_wake_and_blocking_timeout(async_redis):
    async def scenario():
        client = async_redis()
        crashed = Lock(client, "a:expiry", timeout=0.5)
        await crashed.acquire()
        # A queued waiter without a timeout refreshes its place every waiter_lease / 3 (10 s
        # here): within its 5 s, only the wake-up at the holder's expiry can let it in.
        waiter = Lock(client, "a:expiry", waiter_lease=30)
        assert await waiter.acquire(blocking_timeout=5)
        before = set(await client.keys("*"))
        started = time.monotonic()
        assert await Lock(client, "a:expiry").acquire(blocking_timeout=0.2) is False
        # It gave up at its own blocking_timeout: the hold has no expiry, nothing else ends the wait.
        assert 0.2 <= time.monotonic() - started < 5
        assert set(await client.keys("*")) == before
        await waiter.release()
        await client.aclose()

    run(scenario())


def test_a_cancelled_waiter_leaves_the_queue(async_redis):
    async def scenario():
        client = async_redis()
        holder = Lock(client, "a:cancel", timeout=10)
        await holder.acquire()
        task = asyncio.ensure_future(Lock(client, "a:cancel", timeout=10).acquire())
        while await client.zcard(keys_for(b"a:cancel").queue) < 1:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await client.zcard(keys_for(b"a:cancel").queue) == 0
        await holder.release()
        assert not await client.exists("a:cancel")
        await client.aclose()

    run(scenario())


def test_watchdog_renews_and_signals_loss(async_redis):
    async def scenario():
        client = async_redis()
        lock = Lock(client, "a:renew", timeout=0.4, auto_renew=True)
        await lock.acquire()
        await asyncio.sleep(1.3)
        assert await lock.owned() and lock.valid
        await lock.release()
        lost = asyncio.Event()
        doomed = Lock(client, "a:lost", timeout=0.4, auto_renew=True, on_lost=lambda lk: lost.set())
        await doomed.acquire()
        await client.delete("a:lost")
        await asyncio.wait_for(lost.wait(), 2)
        assert not doomed.valid
        with pytest.raises(LockLostError):
            doomed.ensure_valid()
        with pytest.raises(LockNotOwnedError):
            await doomed.release()
        await client.aclose()

    run(scenario())


def test_reentrant_and_bad_input(async_redis):
    async def scenario():
        client = async_redis()
        lock = Lock(client, "a:re", timeout=5, reentrant=True)
        await lock.acquire()
        fence = lock.fence
        await lock.acquire()
        assert lock.fence == fence
        await lock.release()
        assert await lock.owned()
        await lock.release()
        assert not await client.exists("a:re")
        before = await client.dbsize()
        with pytest.raises(InvalidLockArgument):
            Lock(client, "", timeout=5)
        with pytest.raises(InvalidLockArgument):
            await Lock(client, "ok", timeout=5).acquire(blocking_timeout=-1)
        assert await client.dbsize() == before
        await client.aclose()

    run(scenario())


def test_a_first_attempt_cancelled_before_its_reply_leaves_no_hold(redis_server):
    """The acquire script ran and granted, but the task was cancelled before it read the reply
    (here the reply is held back on the client): the hold is given back, not left to its TTL
    (none here: it would stay forever)."""
    import redis.asyncio
    from redis.asyncio.connection import Connection

    delay = {"seconds": 0.0}

    class SlowReplies(Connection):
        async def read_response(self, *args, **kwargs):
            await asyncio.sleep(delay["seconds"])
            return await super().read_response(*args, **kwargs)

    async def scenario():
        url = redis_server.url
        client = redis.asyncio.Redis.from_url(url, connection_class=SlowReplies)
        observer = redis.asyncio.Redis.from_url(url)
        await observer.delete("cancelled-first")
        lock = Lock(client, "cancelled-first", timeout=None)
        assert await lock.acquire(blocking=False)  # a pooled connection and the script loaded
        await lock.release()
        delay["seconds"] = 0.25
        task = asyncio.ensure_future(lock.acquire(blocking=False))
        for _ in range(200):  # until the script has run on the server and granted the lock
            if await observer.exists("cancelled-first"):
                break
            await asyncio.sleep(0.005)
        held_while_reading = await observer.exists("cancelled-first")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = await observer.exists("cancelled-first")
        await client.aclose()
        await observer.aclose()
        return held_while_reading, left

    held_while_reading, left = asyncio.run(scenario())
    assert held_while_reading == 1
    assert left == 0


def test_a_release_cancelled_on_its_way_still_releases(async_redis):
    """A task cancelled while its release is under way (a client going away under ASGI) must not
    leave the lock held: the release completes in the background."""
    from django_redis_coord.asyncio import Semaphore

    async def main():
        client = async_redis()
        lock = Lock(client, "a:cancelled-release", timeout=None, thread_local=False)  # released by another task
        permits = Semaphore(client, "a:cancelled-permit", limit=1)
        assert await lock.acquire() and await permits.acquire("job")
        for release in (lock.release(), permits.release("job")):
            task = asyncio.ensure_future(release)
            await asyncio.sleep(0)  # the release has started: its script is being sent
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        for _ in range(200):
            if not await client.exists("a:cancelled-release") and await permits.get_current_size() == 0:
                break
            await asyncio.sleep(0.01)
        assert not await client.exists("a:cancelled-release") and lock.local.token is None
        assert await permits.get_current_size() == 0
        assert await Lock(client, "a:cancelled-release", timeout=5).acquire(blocking=False)
        await client.aclose()

    run(main())


def test_event_loops_that_ended_are_let_go(redis_client, redis_url):
    """Run per call in a new event loop (as async views under WSGI): the watchdog tasks and the
    Redlock links of loops that ended must not keep those loops (and their sockets) alive."""
    import gc

    import redis.asyncio

    from django_redis_coord.asyncio import Redlock
    from django_redis_coord.core import watchdog
    from django_redis_coord.core.redlock.masters import aio as async_masters

    async def once():
        client = redis.asyncio.Redis.from_url(redis_url)
        async with Lock(client, "a:loops", timeout=5, auto_renew=True):
            pass
        # A generous node timeout: each loop connects anew, and this test is about what is kept.
        async with Redlock([client], "a:loops:redlock", timeout=5, node_timeout=1):
            pass
        await client.aclose()

    for _ in range(20):
        asyncio.run(once())
    gc.collect()
    assert len(watchdog._async_watchdogs) <= 1
    assert len(async_masters._clients) <= 1


def test_a_task_that_ends_holding_its_own_lock_is_reported_and_no_longer_renewed(async_redis, caplog):
    import logging

    async def main():
        client = async_redis()
        lock = Lock(client, "a:orphaned", timeout=1, auto_renew=True)
        with caplog.at_level(logging.WARNING, logger="django_redis_coord"):
            assert await asyncio.create_task(lock.acquire())  # acquired in a task of its own
            await asyncio.sleep(0)  # that task's done callbacks
        assert any("ended without releasing" in r.getMessage() and "a:orphaned" in r.getMessage()
                   for r in caplog.records)
        with pytest.raises(LockError):
            await lock.release()  # this task holds nothing
        for _ in range(300):
            if not await client.exists("a:orphaned"):
                break
            await asyncio.sleep(0.01)
        assert not await client.exists("a:orphaned")  # not renewed: its TTL ended it
        caplog.clear()
        for _ in range(50):  # a task acquiring and releasing many times keeps no callbacks behind
            assert await lock.acquire()
            await lock.release()
            assert lock._state().task_end is None  # its end-of-task callback was taken off again
        assert not [r for r in caplog.records if "ended without releasing" in r.getMessage()]
        await client.aclose()

    run(main())


if sys.version_info >= (3, 11):  # Task.cancelling(): the cancellation is still counted

    def test_a_cancellation_swallowed_by_a_redis_call_still_stops_a_waiter(async_redis, monkeypatch):
        """Python 3.11's asyncio.wait_for, which redis-py sends and reads through, swallows a
        cancellation that comes as its call completes; the waiter must not go on waiting."""
        import redis.asyncio.connection

        sent = redis.asyncio.connection.AbstractConnection.send_command
        armed = {"once": True}

        async def send_then_swallow_a_cancel(self, *args, **kwargs):
            await sent(self, *args, **kwargs)
            if args and args[0] == "EVALSHA" and armed["once"]:  # the waiter's queueing call
                armed["once"] = False
                asyncio.current_task().cancel()
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:  # what wait_for does when its call is done
                    pass

        async def scenario():
            client = async_redis()
            holder = Lock(client, "a:swallowed", timeout=10)
            assert await holder.acquire()
            monkeypatch.setattr(redis.asyncio.connection.AbstractConnection, "send_command",
                                send_then_swallow_a_cancel)
            waiter = asyncio.ensure_future(Lock(client, "a:swallowed", timeout=10).acquire())
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(waiter, 3)  # not the holder's 10 s TTL
            monkeypatch.undo()
            assert await client.zcard(keys_for(b"a:swallowed").queue) == 0
            await holder.release()
            assert not await client.exists("a:swallowed")
            await client.aclose()

        run(scenario())


def test_the_claim_of_a_provisional_hand_off_keeps_an_extend_made_before_it(async_redis):
    from django_redis_coord.core.watchdog import async_watchdog

    async def waiter_task(client):
        waiter = Lock(client, "a:claim-extended", timeout=30, waiter_lease=0.6)
        assert await waiter.acquire(blocking_timeout=5)
        assert await client.pttl("a:claim-extended") <= 1_200  # two waiter leases, until claimed
        assert await waiter.extend(60)  # before the claim, due 0.3 s after the grant
        dog = async_watchdog()
        stop_at = time.monotonic() + 5
        while any(hold.owner is waiter for hold in list(dog._holds.values())):
            assert time.monotonic() < stop_at, "the claim never went out"
            await asyncio.sleep(0.01)
        assert await client.pttl("a:claim-extended") > 55_000  # not cut back to the 30 s timeout
        assert waiter.valid and waiter.deadline - time.monotonic() > 55
        await waiter.release()

    async def scenario():
        client = async_redis()
        holder = Lock(client, "a:claim-extended", timeout=30)
        assert await holder.acquire()
        waiting = asyncio.create_task(waiter_task(client))
        while not await client.zcard(keys_for(b"a:claim-extended").queue):
            await asyncio.sleep(0.005)
        await holder.release()
        await waiting
        await client.aclose()

    run(scenario())


def test_blocking_timeout_is_kept_on_the_client_even_when_redis_times_blocked_calls_out_late(redis_servers):
    (server,) = redis_servers(1)
    server.client().config_set("hz", 1)  # blocked calls time out up to a second late (Redis 6)

    async def scenario():
        client = server.async_client()
        holder = Lock(client, "a:late-timeout", timeout=30)
        assert await holder.acquire()
        # blocking_timeout is kept on the client's clock: a wait of 0.6 s, one refresh of its place
        # (every 0.5 s) in, ends once it has passed, not at the next refresh (1.0 s), nor at the end
        # of a whole read of the waiting connection (READ_SECONDS, 1.0 s at the earliest), nor when
        # the server times something out.
        waiter = Lock(client, "a:late-timeout", timeout=10, waiter_lease=1.5)
        assert waiter.refresh_interval == 0.5 and READ_SECONDS >= 1.0
        for _ in range(3):
            started = time.monotonic()
            assert not await waiter.acquire(blocking_timeout=0.6)
            assert 0.6 <= time.monotonic() - started < 1.0
        await holder.release()
        await client.aclose()

    run(scenario())


def test_a_reentrant_acquire_does_not_join_a_lost_hold(async_redis):
    async def scenario():
        client = async_redis()
        lock = Lock(client, "a:lost-again", timeout=0.2, reentrant=True)
        assert await lock.acquire()
        await asyncio.sleep(0.3)
        other = Lock(client, "a:lost-again", timeout=5)
        assert await other.acquire(blocking=False)
        with pytest.raises(LockLostError):
            await lock.acquire(blocking=False)
        await other.release()
        await client.aclose()

    run(scenario())


def test_the_next_waiter_replaces_a_holder_it_was_handed_to_that_crashed(async_redis, redis_url):
    from tests.core.test_waiting import _take_then_crash
    from tests.support.procs import CTX

    async def queued(client, name: str, count: int) -> None:
        while await client.zcard(keys_for(name.encode()).queue) != count:
            await asyncio.sleep(0.005)

    async def scenario():
        client = async_redis()
        holder = Lock(client, "a:crash-chain", timeout=30)
        assert await holder.acquire()
        doomed = CTX.Process(target=_take_then_crash, args=(redis_url, "a:crash-chain", 0.3))
        doomed.start()
        await asyncio.wait_for(queued(client, "a:crash-chain", 1), 10)
        # The waiter refreshes its place every 7.5 s: only the hand-off's note can wake it in time.
        waiter = Lock(client, "a:crash-chain", timeout=30, waiter_lease=30)
        assert waiter.refresh_interval == 7.5
        asked = time.monotonic()

        async def wait():
            assert await waiter.acquire(blocking_timeout=10)
            got = time.monotonic()
            await waiter.release()
            return got

        task = asyncio.create_task(wait())
        await asyncio.wait_for(queued(client, "a:crash-chain", 2), 10)
        released = time.monotonic()
        await holder.release()  # handed to the other process, which dies holding it for 0.3 s
        got = await asyncio.wait_for(task, 15)
        doomed.join(10)
        # Not before the dead holder's TTL ends (0.3 s after the release), and before the waiter's
        # first refresh could have found the lock free.
        assert released + 0.3 <= got < asked + waiter.refresh_interval, got - released
        await client.aclose()

    run(scenario())
