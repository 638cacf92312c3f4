"""Waiting for a lock: FIFO handoff across processes, wake on expiry, dead waiters, give-ups."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from django_redis_coord import Lock
from django_redis_coord.core.keys import keys_for
from django_redis_coord.core.waiting.rules import READ_SECONDS
from tests.support.procs import CTX


def _queue_length(client: redis.Redis, name: str) -> int:
    return client.zcard(keys_for(name.encode()).queue)


def _wait_for(predicate, timeout: float = 10.0) -> None:
    stop_at = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < stop_at, "condition not reached in time"
        time.sleep(0.005)


def _acquire_and_report(url: str, name: str, index: int, queue) -> None:
    client = redis.Redis.from_url(url)
    lock = Lock(client, name, timeout=10)
    lock.acquire()
    queue.put((index, time.monotonic_ns(), lock.fence))
    time.sleep(0.005)
    lock.release()


def test_waiters_are_served_in_arrival_order(redis_client, redis_url):
    holder = Lock(redis_client, "fifo", timeout=10)
    holder.acquire()
    results = CTX.Queue()
    procs = []
    for index in range(6):
        proc = CTX.Process(target=_acquire_and_report, args=(redis_url, "fifo", index, results))
        proc.start()
        procs.append(proc)
        _wait_for(lambda expected=index + 1: _queue_length(redis_client, "fifo") == expected)
    holder.release()
    served = sorted((results.get(timeout=20) for _ in procs), key=lambda item: item[1])
    for proc in procs:
        proc.join(10)
    assert [index for index, _, _ in served] == list(range(6))
    fences = [fence for _, _, fence in served]
    assert fences == sorted(fences) and fences[0] > holder.fence if holder.fence else True
    assert _queue_length(redis_client, "fifo") == 0


def _hold_and_crash(url: str, name: str, timeout: float, queue) -> None:
    lock = Lock(redis.Redis.from_url(url), name, timeout=timeout)
    lock.acquire()
    queue.put("held")
    time.sleep(60)  # killed by the test: never releases


def _wait_and_time(url: str, name: str, lease: float, queue) -> None:
    lock = Lock(redis.Redis.from_url(url), name, timeout=30, waiter_lease=lease)
    lock.acquire()
    queue.put(time.monotonic_ns())
    lock.release()


def test_a_waiter_gets_the_lock_when_a_crashed_holders_ttl_ends(redis_client, redis_url):
    ready = CTX.Queue()
    crasher = CTX.Process(target=_hold_and_crash, args=(redis_url, "crash", 2.0, ready))
    crasher.start()
    assert ready.get(timeout=10) == "held"
    os.kill(crasher.pid, signal.SIGKILL)
    crasher.join()
    # The waiter refreshes its place every 7.5 s (a quarter of its timeout): only the wake-up at
    # the dead hold's expiry (within 2 s) can let it in before its first refresh.
    lease = 30.0
    refresh = Lock(redis_client, "crash", timeout=30, waiter_lease=lease).refresh_interval
    assert refresh == 7.5
    results = CTX.Queue()
    spawned = time.monotonic_ns()
    waiter = CTX.Process(target=_wait_and_time, args=(redis_url, "crash", lease, results))
    waiter.start()
    _wait_for(lambda: _queue_length(redis_client, "crash") == 1)  # queued while the dead hold lasts
    pttl = redis_client.pttl("crash")
    expires_at = time.monotonic_ns() + pttl * 1_000_000
    assert pttl > 0
    acquired = results.get(timeout=20)
    waiter.join(10)
    # No release ever happens: the waiter looks again at the holder's expiry by itself (the
    # benchmark measures how soon), not at its first refresh, which comes after it queued.
    assert acquired - expires_at > -50_000_000, (acquired - expires_at) / 1e9
    assert acquired < spawned + refresh * 1e9, (acquired - spawned) / 1e9


def _queue_then_block(url: str, name: str, lease: float) -> None:
    lock = Lock(redis.Redis.from_url(url), name, timeout=30, waiter_lease=lease)
    lock.acquire()
    time.sleep(60)


def test_a_waiter_killed_while_queued_stalls_the_queue_for_a_bounded_time(redis_client, redis_url):
    holder = Lock(redis_client, "deadwaiter", timeout=30)
    holder.acquire()
    doomed = CTX.Process(target=_queue_then_block, args=(redis_url, "deadwaiter", 0.5))
    doomed.start()
    _wait_for(lambda: _queue_length(redis_client, "deadwaiter") == 1)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.join()
    survivor = Lock(redis_client, "deadwaiter", timeout=30)
    holder.release()  # the dead waiter's lease is still running: it is handed the lock
    started = time.monotonic()
    assert survivor.acquire(blocking_timeout=10)
    stalled = time.monotonic() - started
    # The hand-off to the dead waiter was provisional: two of its leases (1 s), not 30 s.
    assert stalled < 2.0, stalled
    _wait_for(lambda: redis_client.pttl("deadwaiter") > 25_000, timeout=3)
    assert survivor.valid and survivor.deadline - time.monotonic() > 25
    survivor.release()


def test_a_long_hold_handed_to_a_waiter_is_claimed_in_the_background(redis_client):
    holder = Lock(redis_client, "claim", timeout=30, thread_local=False)
    holder.acquire()
    waiter = Lock(redis_client, "claim", timeout=30, waiter_lease=0.6)
    import threading

    timer = threading.Timer(0.1, holder.release)
    timer.start()
    assert waiter.acquire(blocking_timeout=5)
    timer.join()
    # Provisional: two waiter leases (1.2 s) ...
    assert redis_client.pttl("claim") <= 1_200
    assert waiter.deadline - time.monotonic() < 1.2
    # ... until the watchdog claims the full 30 s half a lease later.
    _wait_for(lambda: redis_client.pttl("claim") > 25_000, timeout=3)
    _wait_for(lambda: waiter.deadline - time.monotonic() > 25, timeout=1)
    waiter.release()
    assert not redis_client.exists("claim")


def _handed_over(redis_client, name: str, **kwargs) -> Lock:
    """A lock handed over (provisionally: its timeout is over two waiter leases) to a waiter."""
    import threading

    holder = Lock(redis_client, name, timeout=30, thread_local=False)
    holder.acquire()
    waiter = Lock(redis_client, name, timeout=30, thread_local=False, **kwargs)
    timer = threading.Timer(0.1, holder.release)
    timer.start()
    assert waiter.acquire(blocking_timeout=5)
    timer.join()
    return waiter


def _claimed(owner) -> bool:
    """Whether the watchdog is done with ``owner``'s holds (a provisional hand-off's claim went out)."""
    from django_redis_coord.core.watchdog import sync_watchdog

    dog = sync_watchdog()
    return not dog._arriving and all(hold.owner is not owner for hold in list(dog._holds.values()))


def test_the_claim_of_a_provisional_hand_off_keeps_an_extend_made_before_it(redis_client):
    waiter = _handed_over(redis_client, "claim-extended", waiter_lease=0.6)
    assert redis_client.pttl("claim-extended") <= 1_200  # two waiter leases, until claimed
    assert waiter.extend(60)  # a minute on top of them, before the claim (due 0.3 s after the grant)
    _wait_for(lambda: _claimed(waiter), timeout=5)
    assert redis_client.pttl("claim-extended") > 55_000  # not cut back to the 30 s timeout
    assert waiter.valid and waiter.deadline - time.monotonic() > 55
    waiter.release()


def test_the_claim_of_a_provisional_hand_off_keeps_a_ttl_its_holder_replaced(redis_client):
    waiter = _handed_over(redis_client, "claim-replaced", waiter_lease=0.6)
    assert waiter.extend(5, replace_ttl=True)  # shorter than the 30 s timeout: the holder's choice
    _wait_for(lambda: _claimed(waiter), timeout=5)
    assert 3_000 < redis_client.pttl("claim-replaced") <= 5_000
    assert waiter.valid and waiter.deadline - time.monotonic() <= 5
    waiter.release()


def test_a_claim_due_after_the_watchdogs_next_look_is_taken_in_without_waking_it(redis_client):
    from django_redis_coord.core.watchdog import LOOK_EVERY, sync_watchdog

    lost = []
    # The default lease (2 s): the claim is due a lease/2 = LOOK_EVERY after the grant, so the
    # registration is only queued; the loop takes it in at its next look and claims on time.
    waiter = _handed_over(redis_client, "claim-queued", on_lost=lost.append)
    granted = time.monotonic()
    assert waiter.waiter_lease / 2 >= LOOK_EVERY
    assert waiter._state().arriving is not None
    assert redis_client.pttl("claim-queued") <= 4_000
    _wait_for(lambda: redis_client.pttl("claim-queued") > 25_000, timeout=5)
    assert time.monotonic() - granted < 3.0  # claimed before the provisional 4 s ran out
    # The watchdog thread moves the deadline when the claim's reply reaches it, after Redis applied it.
    _wait_for(lambda: waiter.deadline - time.monotonic() > 25, timeout=1)
    assert waiter.valid
    waiter.release()
    assert not lost
    assert all(hold.owner is not waiter for hold in list(sync_watchdog()._holds.values()))


def test_a_queued_claim_of_a_hold_released_before_the_next_look_is_dropped(redis_client):
    from django_redis_coord.core.watchdog import LOOK_EVERY, sync_watchdog

    lost = []
    waiter = _handed_over(redis_client, "claim-dropped", on_lost=lost.append)
    assert waiter._state().arriving is not None
    waiter.release()
    # Re-acquired at once with a new token: the old claim must not come back for the old token.
    assert waiter.acquire(blocking=False)
    time.sleep(LOOK_EVERY + 0.5)  # past the loop's next look
    assert not lost
    assert all(hold.owner is not waiter for hold in list(sync_watchdog()._holds.values()))
    assert waiter.valid and redis_client.pttl("claim-dropped") > 25_000
    waiter.release()
    time.sleep(0.1)
    assert not lost


def test_a_waiter_whose_lease_lapsed_is_skipped(redis_client, redis_url):
    holder = Lock(redis_client, "lapsed", timeout=30)
    holder.acquire()
    doomed = CTX.Process(target=_queue_then_block, args=(redis_url, "lapsed", 0.3))
    doomed.start()
    _wait_for(lambda: _queue_length(redis_client, "lapsed") == 1)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.join()
    time.sleep(0.4)  # its lease lapses
    holder.release()
    assert not redis_client.exists("lapsed")  # nobody alive was queued: the lock is free
    assert Lock(redis_client, "lapsed", timeout=5).acquire(blocking=False)


def test_giving_up_honours_blocking_timeout_and_leaves_nothing_behind(redis_client):
    holder = Lock(redis_client, "giveup", timeout=30)
    holder.acquire()
    before = set(redis_client.keys("*"))
    waiter = Lock(redis_client, "giveup", timeout=30, waiter_lease=3)
    # blocking_timeout is kept on the client's clock: the call gives up once it has passed, not at
    # the next refresh of its place nor at the end of a whole read of the waiting connection, both
    # 1 s away at the earliest here.
    assert waiter.refresh_interval >= 1.0 and READ_SECONDS >= 1.0
    started = time.monotonic()
    assert waiter.acquire(blocking_timeout=0.3) is False
    waited = time.monotonic() - started
    assert 0.3 <= waited < 1.0, waited
    assert set(redis_client.keys("*")) == before
    assert _queue_length(redis_client, "giveup") == 0
    holder.release()
    assert not redis_client.exists("giveup")


def test_a_hold_handed_over_at_the_deadline_is_kept_not_leaked(redis_client):
    # A waiter that gives up exactly when it is handed the lock must either own it or pass it on.
    for _ in range(20):
        holder = Lock(redis_client, "race", timeout=5, thread_local=False)
        holder.acquire()
        waiter = Lock(redis_client, "race", timeout=5)
        import threading

        timer = threading.Timer(0.05, holder.release)
        timer.start()
        got = waiter.acquire(blocking_timeout=0.05)
        timer.join()
        if got:
            waiter.release()
        _wait_for(lambda: not redis_client.exists("race"), timeout=2)


def test_sleep_is_accepted_but_waiting_does_not_poll(redis_client):
    holder = Lock(redis_client, "nopoll", timeout=10)
    holder.acquire()
    waiter = Lock(redis_client, "nopoll", timeout=10, sleep=0.001)
    redis_client.config_resetstat()
    assert waiter.acquire(blocking_timeout=0.5) is False
    stats = redis_client.info("commandstats")
    # Commands run inside scripts are counted too: count what the client sent.
    sent = sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval", "blpop", "set", "get"))
    # A 1 ms polling loop would send ~500 commands; a queued waiter sends a handful.
    assert 2 <= sent < 12, stats
    holder.release()


def _queue_with_token_then_block(url: str, name: str, token: str, lease: float) -> None:
    Lock(redis.Redis.from_url(url), name, timeout=30, waiter_lease=lease).acquire(token=token)
    time.sleep(60)


def test_a_grant_left_for_a_dead_waiter_is_not_taken_by_a_later_caller_with_its_token(redis_client, redis_url):
    """The lock handed (provisionally) to a waiter that died is not taken by a later blocking
    acquire with the same token: that one waits in line (and here gives up), and the grant ends
    with its two waiter leases."""
    holder = Lock(redis_client, "stale-grant", timeout=30)
    holder.acquire()
    doomed = CTX.Process(target=_queue_with_token_then_block, args=(redis_url, "stale-grant", "job-7", 2.0))
    doomed.start()
    _wait_for(lambda: _queue_length(redis_client, "stale-grant") == 1)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.join()
    holder.release()  # handed (provisionally, two leases) to the dead waiter
    assert redis_client.get("stale-grant") == b"job-7"
    again = Lock(redis_client, "stale-grant", timeout=30, waiter_lease=0.2)
    assert not again.acquire(token="job-7", blocking_timeout=0.5)
    assert again.fence is None and _queue_length(redis_client, "stale-grant") == 0
    assert redis_client.get("stale-grant") == b"job-7" and 0 < redis_client.pttl("stale-grant") <= 4000


def test_a_blocking_acquire_with_the_holders_own_token_waits_for_its_release(redis_client):
    first = Lock(redis_client, "same-token", timeout=30)
    assert first.acquire(token="shared")
    second = Lock(redis_client, "same-token", timeout=30)
    assert not second.acquire(token="shared", blocking=False)
    assert not second.acquire(token="shared", blocking_timeout=0.5)  # waits, then gives up
    assert second.fence is None and _queue_length(redis_client, "same-token") == 0
    fence = first.fence
    first.release()
    assert second.acquire(token="shared", blocking_timeout=5) and second.fence > fence
    second.release()


def test_lock_metadata_expires_after_the_release_even_of_a_hold_with_no_timeout(redis_client):
    forever = Lock(redis_client, "no-expiry")
    forever.acquire()
    meta = keys_for(b"no-expiry").meta
    assert redis_client.pttl(meta) == -1  # kept while held
    forever.release()
    assert 0 < redis_client.pttl(meta) <= 24 * 3600 * 1000


def _queue_permit_then_block(url: str, name: str, identity: str) -> None:
    from django_redis_coord import Semaphore

    Semaphore(redis.Redis.from_url(url), name, limit=1, timeout=30, waiter_lease=30).acquire(identity, blocking=True)
    time.sleep(60)


def _kill_once_queued(redis_client: redis.Redis, queue: bytes, target, args: tuple) -> None:
    """Start ``target(*args)`` in a process, wait until it is in ``queue``, SIGKILL it."""
    doomed = CTX.Process(target=target, args=args)
    doomed.start()
    try:
        _wait_for(lambda: redis_client.zcard(queue) == 1)
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.join()


def test_a_token_granted_while_still_queued_leaves_the_queue(redis_client, redis_url):
    """A job retried with the token of a waiter whose process died while queued gets the free lock:
    its old place in the queue goes with the grant (else its own release would hand the lock straight
    back to that place, for two waiter leases), and the queue keeps an expiry."""
    holder = Lock(redis_client, "requeued", timeout=30)
    holder.acquire()
    queue = holder.keys.queue
    _kill_once_queued(redis_client, queue, _queue_with_token_then_block, (redis_url, "requeued", "job-9", 30.0))
    redis_client.delete("requeued")  # what the holder's TTL does, without waiting for it
    retried = Lock(redis_client, "requeued", timeout=30)
    assert retried.acquire(token="job-9", blocking=False)
    assert redis_client.zcard(queue) == 0
    assert redis_client.exists(queue) == 0 or redis_client.pttl(queue) > 0
    retried.release()
    assert redis_client.get("requeued") is None


def test_a_permit_granted_to_an_identity_still_queued_takes_it_off_the_queue(redis_client, redis_url):
    from django_redis_coord import Semaphore

    holder = Semaphore(redis_client, "requeued-permits", limit=1, timeout=30)
    assert holder.acquire("holder")
    queue = holder.keys.queue
    _kill_once_queued(redis_client, queue, _queue_permit_then_block, (redis_url, "requeued-permits", "job-9"))
    redis_client.zrem("requeued-permits", "holder")  # what the holder's lease end does, without waiting
    retried = Semaphore(redis_client, "requeued-permits", limit=1, timeout=30)
    assert retried.acquire("job-9")
    assert redis_client.zcard(queue) == 0
    assert retried.release("job-9")
    assert redis_client.zcard("requeued-permits") == 0  # not handed back to job-9's old place


def test_blocking_timeout_is_kept_on_the_client_even_when_redis_times_blocked_calls_out_late(redis_servers):
    # Redis 6 times a blocked BLPOP out in its cron, every 1/hz s: with hz 1 up to a second late.
    # blocking_timeout is kept on the client's clock instead: a wait of 0.6 s, one refresh of its
    # place (every 0.5 s) in, ends once it has passed, not at the next refresh (1.0 s), nor at the
    # end of a whole read of the waiting connection (READ_SECONDS, 1.0 s at the earliest), nor
    # when the server times something out.
    (server,) = redis_servers(1)
    client = server.client()
    client.config_set("hz", 1)
    holder = Lock(client, "late-timeout", timeout=30)
    assert holder.acquire()
    waiter = Lock(client, "late-timeout", timeout=10, waiter_lease=1.5)
    assert waiter.refresh_interval == 0.5 and READ_SECONDS >= 1.0
    for _ in range(3):
        started = time.monotonic()
        assert not waiter.acquire(blocking_timeout=0.6)
        assert 0.6 <= time.monotonic() - started < 1.0
    assert not client.exists(keys_for(b"late-timeout").queue)
    holder.release()


def _take_then_crash(url: str, name: str, timeout: float) -> None:
    """Queue for ``name``, then die as soon as it is handed over (holding it for ``timeout``)."""
    Lock(redis.Redis.from_url(url), name, timeout=timeout).acquire()
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("ttl", [0.3, 1.0])
def test_the_next_waiter_replaces_a_holder_it_was_handed_to_that_crashed(redis_client, redis_url, ttl):
    # W0 is handed the lock with a short TTL and dies at once; W1, queued behind it, had been told
    # the first holder's 30 s and refreshes only every 7.5 s: it must still replace W0 promptly.
    # With 1.0 s, the TTL is more than a third of W0's own (default, 2 s) waiter lease but less
    # than a third of W1's: whether W1 needs the note depends on W1's lease, not on W0's.
    import threading

    holder = Lock(redis_client, "crash-chain", timeout=30)
    assert holder.acquire()
    doomed = CTX.Process(target=_take_then_crash, args=(redis_url, "crash-chain", ttl))
    doomed.start()
    _wait_for(lambda: _queue_length(redis_client, "crash-chain") == 1)
    waiter = Lock(redis_client, "crash-chain", timeout=30, thread_local=False, waiter_lease=30)
    assert waiter.refresh_interval == 7.5
    got = {}
    asked = time.monotonic()
    thread = threading.Thread(target=lambda: got.update(ok=waiter.acquire(blocking_timeout=10),
                                                        at=time.monotonic()))
    thread.start()
    _wait_for(lambda: _queue_length(redis_client, "crash-chain") == 2)
    released = time.monotonic()
    holder.release()  # handed to W0, which dies holding it
    thread.join(15)
    doomed.join(10)
    assert got["ok"]
    # Not before W0's TTL ends (``ttl`` after the release), and before W1's first refresh (7.5 s
    # after it queued) could have found the lock free: the hand-off's note woke it.
    assert released + ttl <= got["at"] < asked + waiter.refresh_interval, got["at"] - released
    waiter.release()
