"""Watchdog renewal, the explicit loss signal and reentrancy."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from redis.exceptions import LockNotOwnedError

from django_redis_coord import Lock, LockLostError
from django_redis_coord.core.watchdog import sync_watchdog


def _wait_for(predicate, timeout: float = 10.0) -> None:
    stop_at = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < stop_at, "condition not reached in time"
        time.sleep(0.01)


def test_watchdog_keeps_a_lock_past_three_times_its_timeout(redis_client):
    lock = Lock(redis_client, "renewed", timeout=0.5, auto_renew=True)
    lock.acquire()
    fence = lock.fence
    time.sleep(1.8)
    assert lock.owned() and lock.valid
    assert redis_client.pttl("renewed") > 0
    assert lock.fence == fence
    lock.ensure_valid()
    lock.release()
    assert not redis_client.exists("renewed")
    assert all(hold.owner is not lock for hold in list(sync_watchdog()._holds.values()))


def test_without_watchdog_the_hold_expires_and_is_reported_invalid(redis_client):
    lock = Lock(redis_client, "plain", timeout=0.3)
    lock.acquire()
    assert lock.valid
    time.sleep(0.4)
    assert not lock.valid
    with pytest.raises(LockLostError):
        lock.ensure_valid()
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_one_watchdog_thread_renews_many_locks(redis_client):
    locks = [Lock(redis_client, f"many:{i}", timeout=0.6, auto_renew=True) for i in range(25)]
    for lock in locks:
        lock.acquire()
    redis_client.config_resetstat()
    time.sleep(1.3)
    renewals = redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    assert all(lock.owned() for lock in locks)
    # Each lock renews every 0.2 s: about 6 renewals each, batched per client in one pipeline.
    assert 25 * 3 <= renewals <= 25 * 10, renewals
    watchdogs = [t for t in threading.enumerate() if t.name == "dcoord-watchdog"]
    assert len(watchdogs) == 1
    for lock in locks:
        lock.release()


def test_loss_is_signalled_when_the_key_is_deleted(redis_client):
    lost = threading.Event()
    lock = Lock(redis_client, "deleted", timeout=0.6, auto_renew=True, on_lost=lambda lk: lost.set())
    lock.acquire()
    redis_client.delete("deleted")  # an operator, a FLUSHDB, an eviction ...
    assert lost.wait(2.0)
    assert not lock.valid
    with pytest.raises(LockLostError):
        lock.ensure_valid()
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_loss_is_signalled_at_the_local_deadline_when_the_server_stops_answering(redis_servers):
    (server,) = redis_servers(1)
    client = server.client(socket_timeout=5)
    lost_at: list[float] = []
    lock = Lock(client, "paused", timeout=1.0, auto_renew=True, on_lost=lambda lk: lost_at.append(time.monotonic()))
    lock.acquire()
    deadline = lock.deadline
    assert deadline is not None
    server.pause()
    try:
        _wait_for(lambda: bool(lost_at), timeout=5)
        # Declared at the deadline (send instant + TTL - drift), not at the next failed call: the
        # renewal sent at timeout / 3 after the grant fails only at its 5 s socket timeout, which
        # is later than deadline - timeout + timeout / 3 + 5.
        assert deadline - 0.05 <= lost_at[0] < deadline - lock.timeout + lock.timeout / 3 + 5
        assert not lock.valid
    finally:
        server.resume()
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_renewal_stops_on_release(redis_client):
    lock = Lock(redis_client, "stops", timeout=0.3, auto_renew=True)
    lock.acquire()
    lock.release()
    redis_client.config_resetstat()
    time.sleep(0.4)
    assert redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) == 0


def test_reentrant_hold_needs_no_round_trip_and_keeps_its_fence(redis_client):
    lock = Lock(redis_client, "again", timeout=5, reentrant=True)
    lock.acquire()
    fence = lock.fence
    redis_client.config_resetstat()
    assert lock.acquire()
    assert lock.acquire(blocking=False)
    stats = redis_client.info("commandstats")
    assert "cmdstat_evalsha" not in stats and "cmdstat_set" not in stats
    assert lock.fence == fence
    lock.release()
    lock.release()
    assert lock.owned()  # outermost hold still open
    lock.release()
    assert not redis_client.exists("again")
    other = Lock(redis_client, "again", timeout=5, reentrant=True)
    assert other.acquire(blocking=False)
    assert other.fence > fence
    other.release()


def test_reentrancy_is_per_thread(redis_client):
    lock = Lock(redis_client, "perthread", timeout=5, reentrant=True)
    lock.acquire()
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(lock.acquire(blocking=False)))
    thread.start()
    thread.join()
    assert result == [False]
    lock.release()


def test_a_reentrant_acquire_does_not_join_a_lost_hold(redis_client):
    lock = Lock(redis_client, "lost-again", timeout=0.2, reentrant=True)
    assert lock.acquire()
    time.sleep(0.3)  # its TTL ran out ...
    other = Lock(redis_client, "lost-again", timeout=5)
    assert other.acquire(blocking=False)  # ... and another client holds the lock now
    with pytest.raises(LockLostError):
        lock.acquire(blocking=False)
    other.release()


def test_a_shared_hold_cannot_be_reentrant():
    from django_redis_coord import InvalidLockArgument

    with pytest.raises(InvalidLockArgument, match="thread_local"):
        Lock(None, "shared-again", timeout=5, reentrant=True, thread_local=False)


def test_a_release_that_finds_the_hold_gone_fires_on_lost_once(redis_client):
    lost: list[Lock] = []
    lock = Lock(redis_client, "gone-on-release", timeout=5, on_lost=lost.append)
    lock.acquire()
    redis_client.delete("gone-on-release")  # before any watchdog could notice
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lost == [lock]
    assert not lock.valid


def _declare_lost_from_three_threads(redis_client, name: str) -> int:
    """How many times on_lost ran when three threads declared one hold lost at the same moment."""
    calls: list[int] = []
    lock = Lock(redis_client, name, timeout=5, thread_local=False, on_lost=lambda _lock: calls.append(1))
    local = lock._state()
    local.token = b"token"
    start = threading.Barrier(3)

    def declare() -> None:
        start.wait()
        lock._mark_lost(local)

    threads = [threading.Thread(target=declare) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return len(calls)


def test_on_lost_fires_once_when_two_threads_find_the_hold_lost_at_once(redis_client):
    """The watchdog's callback thread and a release finding the hold gone may both declare the
    loss: one of them runs on_lost (and sends lock_lost), never both."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows if it exists
    try:
        runs = [_declare_lost_from_three_threads(redis_client, f"lost-at-once-{attempt}") for attempt in range(600)]
    finally:
        sys.setswitchinterval(previous)
    assert runs == [1] * len(runs)


def test_a_server_that_stops_answering_does_not_hold_up_renewals_on_other_servers(redis_servers):
    stuck, healthy = redis_servers(2)
    lost: list[str] = []
    on_stuck = [Lock(stuck.client(socket_timeout=30), f"stuck:{n}", timeout=1.5, auto_renew=True,
                     on_lost=lambda lk: lost.append(lk.name)) for n in range(3)]
    client = healthy.client()
    on_healthy = Lock(client, "healthy", timeout=1.5, auto_renew=True, on_lost=lambda lk: lost.append(lk.name))
    for lock in on_stuck + [on_healthy]:
        assert lock.acquire()
    stuck.pause()
    try:
        time.sleep(3.5)  # more than twice the timeout: the stuck server's renewals hang meanwhile
        assert sorted(lost) == ["stuck:0", "stuck:1", "stuck:2"]
        assert on_healthy.valid and client.pttl("healthy") > 0
        later = Lock(client, "healthy:later", timeout=1.5, auto_renew=True, on_lost=lambda lk: lost.append(lk.name))
        assert later.acquire()
        time.sleep(2.0)
        assert later.valid and client.pttl("healthy:later") > 0 and "healthy:later" not in lost
    finally:
        stuck.resume()
    on_healthy.release()
    later.release()


def test_a_slow_on_lost_callback_delays_no_renewal(redis_client):
    lost: list[str] = []

    def slow(lock):
        lost.append(lock.name)
        time.sleep(2.5)

    steady = Lock(redis_client, "steady", timeout=0.9, auto_renew=True, on_lost=lambda lk: lost.append(lk.name))
    doomed = Lock(redis_client, "doomed", timeout=0.9, auto_renew=True, on_lost=slow)
    assert steady.acquire() and doomed.acquire()
    redis_client.delete("doomed")
    _wait_for(lambda: lost == ["doomed"], timeout=5)
    assert not doomed.valid  # not valid from the moment the loss was found, callback still running
    time.sleep(2.0)  # over twice the timeout while the callback sleeps
    assert lost == ["doomed"] and steady.valid and redis_client.pttl("steady") > 0
    steady.release()


def test_holds_taken_at_different_instants_share_renewal_round_trips(redis_client, monkeypatch):
    dog = sync_watchdog()
    batches: list[int] = []
    renew = dog._renew_batch

    def counted(batch):
        batches.append(len(batch))
        renew(batch)

    monkeypatch.setattr(dog, "_renew_batch", counted)
    locks = [Lock(redis_client, f"spread:{i}", timeout=1.2, auto_renew=True) for i in range(20)]
    for lock in locks:  # taken over 0.2 s: due for renewal (every 0.4 s) at 20 different instants
        lock.acquire()
        time.sleep(0.01)
    time.sleep(1.3)
    assert all(lock.owned() for lock in locks)
    # About three renewals per lock: one round trip each would be ~60 batches.
    assert sum(batches) >= 20 * 2 and len(batches) <= 20, batches
    for lock in locks:
        lock.release()


def test_a_blocked_on_lost_callback_delays_no_other_locks_loss_signal(redis_client, received, caplog):
    from django_redis_coord import lock as signalling_lock

    release_blocked = threading.Event()
    blocked_entered = threading.Event()
    other_lost = threading.Event()

    def blocked(lock):
        blocked_entered.set()
        release_blocked.wait(30)

    stuck = Lock(redis_client, "stuck", timeout=0.6, auto_renew=True, on_lost=blocked)
    other = signalling_lock("other", timeout=0.6, auto_renew=True, on_lost=lambda lk: other_lost.set())
    try:
        assert stuck.acquire() and other.acquire()
        with caplog.at_level("WARNING", logger="django_redis_coord"):
            redis_client.delete("stuck")
            assert blocked_entered.wait(5)
            redis_client.delete("other")
            # The other lock's callback and its lock_lost signal come while the first one still blocks.
            assert other_lost.wait(3)
            _wait_for(lambda: any(label == "lost" and data["name"] == "other" for label, data in received), 3)
            # The callback running long is reported, naming its lock.
            _wait_for(lambda: any("on_lost" in r.getMessage() and "'stuck'" in r.getMessage()
                                  for r in caplog.records if r.levelname == "WARNING"), 5)
    finally:
        release_blocked.set()
