# Generated from tests/core/test_lock_twin_aio.py by `python3 dev.py twins`: edit that file, not this one.
"""The Lock's promises that hold alike for a thread and an asyncio task, written once: the sync
tests (test_lock_twin_sync.py) are generated from these asyncio ones (docs/twins.md).  What only
one side promises stays in test_lock.py or test_async_lock.py."""

from __future__ import annotations

import time

from django_redis_coord import Lock, lock_holder
from django_redis_coord.core.side.sync import join, sleep, start
from tests.support.side.sync import run


def test_acquire_extend_reacquire_release_and_the_fence(sync_redis):
    def scenario():
        client = sync_redis()
        lock = Lock(client, "basic", timeout=10)
        assert lock.acquire()
        assert client.get("basic") == lock.local.token
        first = lock.fence
        assert lock.extend(10)  # adds to the remaining TTL
        assert 19000 < client.pttl("basic") <= 20000
        assert lock.extend(5, replace_ttl=True)
        assert 4000 < client.pttl("basic") <= 5000
        assert lock.reacquire()  # back to the lock's timeout
        assert 9000 < client.pttl("basic") <= 10000
        holder = lock_holder(client, "basic")
        assert holder is not None and holder.fence == first
        lock.release()
        assert lock.acquire(blocking=False)
        assert lock.fence > first
        lock.release()
        client.close()

    run(scenario())


def test_works_as_lock_class_of_the_client(sync_redis):
    def scenario():
        client = sync_redis()
        lock = client.lock("via-client", lock_class=Lock, timeout=5, blocking_timeout=0.1)
        assert isinstance(lock, Lock)
        with lock:
            assert lock.owned() and lock.locked()
            assert lock.fence > 0
            other = client.lock("via-client", lock_class=Lock, timeout=5, blocking_timeout=0.1)
            assert other.acquire() is False
        assert not lock.locked()
        client.close()

    run(scenario())


def test_a_fresh_copy_shares_the_settings_but_not_the_hold(sync_redis):
    def scenario():
        client = sync_redis()
        made = Lock(client, "fresh", timeout=5, thread_local=False, label="made once")
        first, second = made.fresh(), made.fresh()
        assert (first.name, first.timeout, first.label, first.keys) == (made.name, made.timeout, made.label, made.keys)
        assert first.acquire(blocking=False)
        assert not second.acquire(blocking=False)
        assert first.owned() and not second.owned()
        assert made.local.token is None and second.fence is None
        fence = first.fence
        first.release()
        assert second.acquire(blocking=False) and second.fence > fence
        assert first.local.token is None
        second.release()
        per_worker = Lock(client, "fresh:workers", timeout=5).fresh()  # thread_local: per thread, per task
        assert per_worker.acquire(blocking=False)
        seen = []

        def look() -> None:
            seen.append(per_worker.local.token)

        join(start(look, "look"), 10)
        assert seen == [None] and per_worker.local.token is not None
        per_worker.release()
        client.close()

    run(scenario())


def test_a_shared_hold_handed_to_another_worker_is_not_wiped_by_the_release(sync_redis):
    # thread_local=False: one hold state for every thread (task).  The release hands the lock to a
    # worker waiting on the same object, which writes its hold there; the release, finishing after
    # that, must leave it alone (it cleared it in about half of these rounds before).
    def scenario():
        client = sync_redis()
        lock = Lock(client, "shared-hold", timeout=5, thread_local=False)
        wiped = 0
        for _ in range(60):
            assert lock.acquire()
            taken: dict = {}

            def take_next(taken: dict = taken) -> None:
                taken["acquired"] = lock.acquire(blocking_timeout=5)
                taken["token"] = client.get("shared-hold")

            worker = start(take_next, "take-next")
            deadline = time.monotonic() + 5
            while not client.zcard(lock.keys.queue) and time.monotonic() < deadline:
                sleep(0.0005)
            lock.release()
            join(worker, 10)
            assert taken["acquired"]
            if lock.local.token != taken["token"]:
                wiped += 1
                client.delete("shared-hold")
                lock.local.token = None
            else:
                lock.release()  # the next holder's hold, released through the shared state
        assert wiped == 0
        assert client.get("shared-hold") is None
        client.close()

    run(scenario())
