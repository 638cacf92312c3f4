"""The Semaphore: the identity semaphore's transcript, leases on server time, FIFO, limits, fences, processes."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError

from django_redis_coord import (
    LockAcquireTimeout,
    LockLostError,
    Semaphore,
    SemaphoreLimitNotSet,
)
from django_redis_coord.core.holders import semaphore_holders
from django_redis_coord.core.keys import key_slot, keys_for
from django_redis_coord.core.watchdog import sync_watchdog
from tests.support.fences import assert_each_above_the_last, counter_ahead_of_the_clock
from tests.support.procs import CTX, run_processes


def _wait_for(predicate, timeout: float = 10.0) -> None:
    stop_at = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < stop_at, "condition not reached in time"
        time.sleep(0.005)


def max_concurrent(intervals: list[tuple[int, int]]) -> int:
    """The largest number of ``(start, end)`` intervals that contain one instant."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    current = peak = 0
    for _, step in events:  # at equal instants an end (-1) sorts before a start (+1)
        current += step
        peak = max(peak, current)
    return peak


def test_max_concurrent_counts_overlaps():
    assert max_concurrent([(0, 10), (5, 15), (9, 20), (10, 12)]) == 3
    assert max_concurrent([(0, 1), (1, 2), (2, 3)]) == 1


# -- the identity semaphore ---------------------------------------------------------------------------
def test_unset_limit_is_a_typed_error_and_writes_nothing(redis_client):
    semaphore = Semaphore(redis_client, "no-limit")
    assert semaphore.get_max_size() == 0
    with pytest.raises(SemaphoreLimitNotSet) as info:
        semaphore.acquire("peter")
    assert isinstance(info.value, TypeError) and isinstance(info.value, LockError)
    assert redis_client.dbsize() == 0


def test_release_of_an_unknown_identity_returns_false(redis_client):
    semaphore = Semaphore(redis_client, "who", limit=2)
    assert semaphore.release("nobody") is False
    assert semaphore.acquire("peter")
    assert semaphore.release("tom") is False
    assert semaphore.get_current_size() == 1
    assert semaphore.release("peter") is True
    assert semaphore.release("peter") is False
    with pytest.raises(LockError):
        semaphore.release()  # this thread took no permit without an identity


def test_an_identity_acquiring_again_keeps_its_permit_and_fence(redis_client):
    semaphore = Semaphore(redis_client, "again", limit=1, timeout=5)
    assert semaphore.acquire("peter")
    fence = semaphore.permit("peter").fence
    redis_client.pexpire("again", 100_000)  # unrelated to the lease: the score is what counts
    time.sleep(0.05)
    assert semaphore.acquire("peter")  # renews the lease, like SADD of a member already there
    assert semaphore.permit("peter").fence == fence
    assert semaphore.get_current_size() == 1
    assert 4900 < semaphore_holders(redis_client, "again")[0].ttl_ms <= 5000


# -- the limit --------------------------------------------------------------------------------------
def test_constructor_limit_is_stored_once_and_set_max_size_changes_it_for_everyone(redis_client):
    first = Semaphore(redis_client, "pool", limit=2, timeout=10)
    second = Semaphore(redis_client, "pool", limit=5, timeout=10)
    assert first.acquire()
    assert second.get_max_size() == 2  # the stored limit applies, not this object's default
    assert second.acquire()
    assert not second.acquire()
    second.set_max_size(3)
    assert first.get_max_size() == 3
    assert first.acquire()
    assert first.get_current_size() == 3


def test_shrinking_the_limit_never_evicts_holders(redis_client):
    semaphore = Semaphore(redis_client, "shrink", limit=3, timeout=10)
    for identity in ("a", "b", "c"):
        assert semaphore.acquire(identity)
    semaphore.set_max_size(1)
    assert semaphore.get_current_size() == 3
    assert all(semaphore.permit(i).valid for i in ("a", "b", "c"))
    assert not semaphore.acquire("d")
    assert semaphore.release("a") and semaphore.release("b")
    assert not semaphore.acquire("d")  # still one holder: the new limit is reached
    assert semaphore.release("c")
    assert semaphore.acquire("d")


def test_raising_the_limit_wakes_waiters_at_once(redis_client):
    holder = Semaphore(redis_client, "grow", limit=1, timeout=10)
    assert holder.acquire()
    waiter = Semaphore(redis_client, "grow", limit=1, timeout=10)
    outcome = {}

    def wait():
        started = time.monotonic()
        outcome["ok"] = waiter.acquire(blocking=True, blocking_timeout=5)
        outcome["waited"] = time.monotonic() - started
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    holder.set_max_size(2)
    thread.join(10)
    assert outcome["ok"] and outcome["waited"] < 2.0
    holder.release()


# -- constructor form, context manager, fences, metadata --------------------------------------------
def test_context_manager_waits_and_fences_grow(redis_client):
    counter = counter_ahead_of_the_clock(redis_client, Semaphore(redis_client, "ctx").keys.meta)
    fences = []
    for _ in range(10):
        with Semaphore(redis_client, "ctx", limit=2, timeout=5, label="thumbnails") as semaphore:
            assert semaphore.valid
            fences.append(semaphore.fence)
            holder = semaphore_holders(redis_client, "ctx")[0]
            assert holder.fence == semaphore.fence and holder.label == "thumbnails"
            assert holder.pid == os.getpid() and holder.host == socket.gethostname()
            assert holder.thread == threading.current_thread().name
        assert semaphore.fence is None
    assert_each_above_the_last(counter, fences)
    assert redis_client.zcard("ctx") == 0


def test_context_manager_raises_when_no_permit_comes_in_time(redis_client):
    holder = Semaphore(redis_client, "busy", limit=1, timeout=5)
    assert holder.acquire()
    started = time.monotonic()
    with pytest.raises(LockAcquireTimeout):
        with Semaphore(redis_client, "busy", limit=1, timeout=5, blocking_timeout=0.2):
            pass
    assert 0.2 <= time.monotonic() - started < 1.5
    assert redis_client.zcard(holder.keys.queue) == 0  # the give-up left the queue
    holder.release()


def test_non_blocking_is_the_default_and_blocking_timeout_is_honoured(redis_client):
    holder = Semaphore(redis_client, "nb", limit=1, timeout=5)
    assert holder.acquire()
    other = Semaphore(redis_client, "nb", limit=1, timeout=5)
    started = time.monotonic()
    assert other.acquire() is False
    assert time.monotonic() - started < 0.5
    started = time.monotonic()
    assert other.acquire(blocking=True, blocking_timeout=0.3) is False
    assert 0.3 <= time.monotonic() - started < 1.5
    holder.release()
    assert other.acquire()
    other.release()


def test_every_key_hashes_to_the_slot_of_the_name_and_the_registry_lists_it(redis_client):
    for name in ["jobs", "user:{42}:uploads", "a}b"]:
        semaphore = Semaphore(redis_client, name, limit=2, timeout=30)
        assert semaphore.acquire("x")
        waiter = Semaphore(redis_client, name, limit=1, timeout=30)
        assert semaphore.acquire("y")
        assert not waiter.acquire("z", blocking=True, blocking_timeout=0.01)
        slot = key_slot(name.encode())
        for key in redis_client.keys("*"):
            if not key.endswith(b":dcoord:registry"):
                assert key_slot(key) == slot, (name, key)
        ks = keys_for(name.encode(), b"sem")
        assert {key_slot(key) for key in (ks.meta, ks.queue, ks.waiters)} == {slot}
        server_ms = int(redis_client.time()[0]) * 1000
        score = redis_client.zscore(ks.registry, b"sem:" + name.encode())
        assert score is not None and server_ms + 25_000 < score <= server_ms + 31_000
        assert semaphore.release("x") and semaphore.release("y")
        assert redis_client.zscore(ks.registry, b"sem:" + name.encode()) is None
        redis_client.flushall()


def test_the_registry_score_follows_the_latest_lease_end(redis_client):
    ks = keys_for(b"mixed", b"sem")

    def listed_in() -> float:
        score = redis_client.zscore(ks.registry, b"sem:mixed")
        return score - int(redis_client.time()[0]) * 1000 if score is not None else None

    long = Semaphore(redis_client, "mixed", limit=3, timeout=30)
    short = Semaphore(redis_client, "mixed", limit=3, timeout=5)
    assert short.acquire("s")
    assert 3_000 < listed_in() <= 6_000
    assert long.acquire("l")
    assert 28_000 < listed_in() <= 31_000
    assert short.acquire("s")  # renewing the shorter lease leaves the latest end in place
    assert 28_000 < listed_in() <= 31_000
    assert long.extend(2, replace_ttl=True, identity="l")  # the latest lease got shorter
    assert 3_000 < listed_in() <= 6_000
    assert long.release("l")
    assert 3_000 < listed_in() <= 6_000
    endless = Semaphore(redis_client, "mixed", limit=3)
    assert endless.acquire("e")
    assert listed_in() == float("inf")
    assert endless.release("e") and short.release("s")
    assert listed_in() is None


def test_a_semaphore_without_timeout_hands_off_and_the_waiter_claims_an_endless_permit(redis_client):
    holder = Semaphore(redis_client, "endless", limit=1)
    assert holder.acquire("peter")
    waiter = Semaphore(redis_client, "endless", limit=1)
    outcome = {}

    def wait():
        outcome["ok"] = waiter.acquire(blocking=True, blocking_timeout=5)
        outcome["deadline"] = waiter.deadline

    thread = threading.Thread(target=wait)
    thread.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    assert holder.release("peter")
    thread.join(10)
    # Handed over for two waiter leases; the watchdog claims the endless permit in the background.
    assert outcome["ok"] and outcome["deadline"] is not None
    _wait_for(lambda: redis_client.zrange("endless", 0, -1, withscores=True)[0][1] == float("inf"))
    _wait_for(lambda: waiter.permit(redis_client.zrange("endless", 0, -1)[0]).deadline is None)


def test_a_provisional_hand_off_is_claimed_in_the_background(redis_client):
    holder = Semaphore(redis_client, "claim", limit=1, timeout=5)
    assert holder.acquire("first")
    waiter = Semaphore(redis_client, "claim", limit=1, timeout=5, waiter_lease=0.3)
    outcome = {}

    def wait():
        outcome["ok"] = waiter.acquire("second", blocking=True, blocking_timeout=5)

    thread = threading.Thread(target=wait)
    thread.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    assert holder.release("first")
    thread.join(10)
    assert outcome["ok"]
    permit = waiter.permit("second")
    assert permit.deadline - time.monotonic() <= 0.6  # two waiter leases, until claimed
    time.sleep(1.0)  # past the provisional lease: the claim must have happened
    assert permit.valid and 3.5 < permit.deadline - time.monotonic() <= 5
    assert 3500 < semaphore_holders(redis_client, "claim")[0].ttl_ms <= 5000
    assert waiter.release("second")


def test_the_claim_of_a_provisional_hand_off_keeps_an_extend_made_before_it(redis_client):
    holder = Semaphore(redis_client, "claim-extended", limit=1, timeout=5)
    assert holder.acquire("first")
    waiter = Semaphore(redis_client, "claim-extended", limit=1, timeout=5, waiter_lease=0.6)
    thread = threading.Thread(target=lambda: waiter.acquire("second", blocking=True, blocking_timeout=5))
    thread.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    assert holder.release("first")
    thread.join(10)
    permit = waiter.permit("second")
    assert permit.deadline - time.monotonic() <= 1.2  # two waiter leases, until claimed
    assert waiter.extend(60, identity="second")  # before the claim, due 0.3 s after the grant
    dog = sync_watchdog()
    _wait_for(lambda: not dog._arriving and all(hold.owner is not waiter for hold in list(dog._holds.values())))
    assert permit.valid and permit.deadline - time.monotonic() > 55  # not cut back to the 5 s timeout
    assert semaphore_holders(redis_client, "claim-extended")[0].ttl_ms > 55_000
    assert waiter.release("second")


def test_a_claim_coming_due_while_a_permit_is_released_does_not_declare_it_lost(redis_client, monkeypatch):
    lost = []
    holder = Semaphore(redis_client, "claim-race", limit=1, timeout=5)
    assert holder.acquire("first")
    waiter = Semaphore(redis_client, "claim-race", limit=1, timeout=5, waiter_lease=0.4, on_lost=lost.append)
    thread = threading.Thread(target=lambda: waiter.acquire("second", blocking=True, blocking_timeout=5))
    thread.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    assert holder.release("first")
    thread.join(10)
    assert waiter.permit("second") is not None  # handed over provisionally: claimed 0.2 s later
    released_in_redis = Semaphore.do_release

    def slow_after_redis(self, token):
        released = released_in_redis(self, token)
        time.sleep(0.5)  # the released permit is still known locally while its claim comes due
        return released

    monkeypatch.setattr(Semaphore, "do_release", slow_after_redis)
    assert waiter.release("second")
    time.sleep(0.2)
    assert lost == []
    assert all(hold.owner is not waiter for hold in list(sync_watchdog()._holds.values()))


# -- leases on server time ----------------------------------------------------------------------------
def test_an_expired_permit_is_reclaimed_and_cannot_be_released_or_extended(redis_client):
    short = Semaphore(redis_client, "lease", limit=1, timeout=0.2)
    assert short.acquire("peter")
    assert short.extend(0.1, identity="peter")
    time.sleep(0.35)
    assert not short.permit("peter").valid
    assert short.get_current_size() == 0
    with pytest.raises(LockNotOwnedError):
        short.extend(1, identity="peter")
    assert short.permit("peter").lost
    assert short.acquire("tom")
    assert short.release("peter") is False
    assert short.release("tom") is True


def _hold_then_die(url: str, name: str, lease: float) -> None:
    semaphore = Semaphore(redis.Redis.from_url(url), name, limit=1, timeout=lease)
    assert semaphore.acquire("doomed")
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_dead_holders_permit_is_reclaimed_after_its_lease(redis_client, redis_url):
    child = CTX.Process(target=_hold_then_die, args=(redis_url, "crash", 1.0))
    child.start()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    # The waiter refreshes its place every 7.5 s (a quarter of its timeout): only the wake-up at
    # the earliest lease end (within the dead holder's 1 s lease) can let it in before that.
    semaphore = Semaphore(redis_client, "crash", limit=1, timeout=30, waiter_lease=30)
    assert semaphore.refresh_interval == 7.5
    holder = semaphore_holders(redis_client, "crash")
    assert [h.token for h in holder] == [b"doomed"] and holder[0].pid == child.pid
    assert not semaphore.acquire()
    started = time.monotonic()
    assert semaphore.acquire(blocking=True, blocking_timeout=10)
    waited = time.monotonic() - started
    # Promptly after the lease end: the waiter looks again then instead of polling.
    assert waited < semaphore.refresh_interval, waited
    assert [h.token for h in semaphore_holders(redis_client, "crash")] == [semaphore.permit().token]
    semaphore.release()


def _skewed_acquire(url: str, name: str, skew: float, identity: str) -> tuple[bool, float, float]:
    real = time.time
    time.time = lambda: real() + skew  # this process's wall clock is off by `skew` seconds
    try:
        semaphore = Semaphore(redis.Redis.from_url(url), name, limit=2, timeout=5)
        return semaphore.acquire(identity), time.time() - real(), semaphore.get_current_size()
    finally:
        time.time = real


def _client_clock_acquire(url: str, name: str, skew: float, identity: str) -> tuple[bool, float, float]:
    """A counting semaphore scored by the client's time.time() (a ZSET), for comparison."""
    real = time.time
    time.time = lambda: real() + skew
    try:
        client = redis.Redis.from_url(url)
        now = time.time()
        pipe = client.pipeline(transaction=True)
        pipe.zremrangebyscore(name, "-inf", now - 5)
        pipe.zadd(name, {identity: now})
        pipe.zrank(name, identity)
        if pipe.execute()[-1] < 2:
            return True, time.time() - real(), client.zcard(name)
        client.zrem(name, identity)
        return False, time.time() - real(), client.zcard(name)
    finally:
        time.time = real


@pytest.mark.parametrize("skew", [-3600.0, -4.0, 4.0, 3600.0])
def test_a_client_with_a_skewed_clock_can_neither_over_issue_nor_evict(redis_client, redis_url, skew):
    semaphore = Semaphore(redis_client, "skew", limit=2, timeout=5)
    assert semaphore.acquire("peter") and semaphore.acquire("tom")
    [(acquired, seen_skew, size)] = run_processes(_skewed_acquire, [(redis_url, "skew", skew, "mallory")])
    assert seen_skew == pytest.approx(skew, abs=1)  # the child really ran with a skewed clock
    assert acquired is False and size == 2
    assert {h.token for h in semaphore_holders(redis_client, "skew")} == {b"peter", b"tom"}
    assert semaphore.release("tom")
    [(acquired, _, size)] = run_processes(_skewed_acquire, [(redis_url, "skew", skew, "mallory")])
    assert acquired is True and size == 2
    # Its lease is measured on the server's clock, whatever the client's clock says.
    mallory = [h for h in semaphore_holders(redis_client, "skew") if h.token == b"mallory"][0]
    assert 4000 < mallory.ttl_ms <= 5000
    assert semaphore.permit("peter").valid and semaphore.release("peter")


def test_a_client_clock_semaphore_over_issues_under_the_same_skew(redis_client, redis_url):
    """The hazard the server-time leases remove: the check above would catch it."""
    assert run_processes(_client_clock_acquire, [(redis_url, "naive", 0.0, "peter")])[0][0]
    assert run_processes(_client_clock_acquire, [(redis_url, "naive", 0.0, "tom")])[0][0]
    # A client whose clock runs 10 s ahead finds both live permits "expired" and evicts them.
    [(acquired, _, size)] = run_processes(_client_clock_acquire, [(redis_url, "naive", 10.0, "mallory")])
    assert acquired is True and size == 1
    assert redis_client.zscore("naive", "peter") is None


# -- several processes ------------------------------------------------------------------------------
def _use_permits(url: str, name: str, rounds: int, hold: float) -> list[tuple[int, int, int]]:
    client = redis.Redis.from_url(url)
    semaphore = Semaphore(client, name, limit=3, timeout=10)
    spans = []
    for _ in range(rounds):
        assert semaphore.acquire(blocking=True, blocking_timeout=30)
        start = time.monotonic_ns()
        time.sleep(hold)
        end = time.monotonic_ns()
        spans.append((start, end, semaphore.fence))
        assert semaphore.release()
    return spans


def test_eight_processes_never_hold_more_than_three_permits(redis_client, redis_url):
    results = run_processes(_use_permits, [(redis_url, "limit3", 15, 0.004)] * 8, timeout=120)
    spans = [span for result in results for span in result]
    assert len(spans) == 8 * 15
    peak = max_concurrent([(start, end) for start, end, _ in spans])
    assert peak <= 3, f"{peak} processes held a permit at the same instant"
    assert peak == 3, "the workload never used all three permits: it checks nothing"
    fences = [fence for _, _, fence in spans]
    assert len(set(fences)) == len(fences)
    assert redis_client.zcard("limit3") == 0


def _queue_up(url: str, name: str, index: int) -> tuple[int, int]:
    semaphore = Semaphore(redis.Redis.from_url(url), name, limit=2, timeout=10)
    assert semaphore.acquire(blocking=True, blocking_timeout=30)
    fence = semaphore.fence
    time.sleep(0.02)
    assert semaphore.release()
    return index, fence


def test_waiters_are_served_in_fifo_order_across_processes(redis_client, redis_url):
    holder = Semaphore(redis_client, "fifo", limit=2, timeout=30)
    assert holder.acquire("a") and holder.acquire("b")
    queue = CTX.Queue()
    procs = []
    for index in range(6):
        proc = CTX.Process(target=lambda i=index: queue.put(_queue_up(redis_url, "fifo", i)))
        proc.start()
        procs.append(proc)
        _wait_for(lambda n=index + 1: redis_client.zcard(holder.keys.queue) == n)
    assert holder.release("a") and holder.release("b")
    served = [queue.get(timeout=30) for _ in procs]
    for proc in procs:
        proc.join(10)
    by_fence = [index for index, _ in sorted(served, key=lambda item: item[1])]
    assert by_fence == list(range(6))


# -- watchdog and loss signal ------------------------------------------------------------------------
def test_a_permit_taken_away_is_reported_lost(redis_client):
    lost = []
    semaphore = Semaphore(redis_client, "taken", limit=2, timeout=0.6, auto_renew=True, on_lost=lost.append)
    assert semaphore.acquire("peter")
    redis_client.zrem("taken", "peter")  # an operator removed it
    _wait_for(lambda: lost, timeout=5)
    assert lost[0].token == b"peter" and not semaphore.permit("peter").valid
    assert semaphore.release("peter") is False


def test_context_manager_raises_when_the_permit_was_lost(redis_client):
    with pytest.raises(LockLostError):
        with Semaphore(redis_client, "lost-cm", limit=1, timeout=0.1):
            time.sleep(0.25)
    quiet = Semaphore(redis_client, "lost-cm", limit=1, timeout=0.1, raise_on_release_error=False)
    with quiet:
        time.sleep(0.25)


def _permit_then_crash(url: str, name: str, timeout: float, lease: float = 2.0) -> None:
    """Queue for a permit of ``name``, then die as soon as one is handed over (leased ``timeout``)."""
    semaphore = Semaphore(redis.Redis.from_url(url), name, limit=1, timeout=timeout, waiter_lease=lease)
    semaphore.acquire("doomed", blocking=True)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("ttl", [0.3, 1.0])
def test_the_next_waiter_reuses_a_permit_handed_to_a_waiter_that_crashed(redis_client, redis_url, ttl):
    # W0 is handed the permit with a short lease and dies at once; W1, queued behind it, was told
    # the first holder's 30 s and refreshes only every 7.5 s: it must still get the permit promptly.
    # With 1.0 s, the permit's TTL is more than a third of W0's own waiter lease (2 s) but less
    # than a third of W1's: whether W1 needs the note depends on W1's lease, not on W0's.
    holder = Semaphore(redis_client, "sem-crash-chain", limit=1, timeout=30)
    assert holder.acquire("first")
    doomed = CTX.Process(target=_permit_then_crash, args=(redis_url, "sem-crash-chain", ttl))
    doomed.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    waiter = Semaphore(redis_client, "sem-crash-chain", limit=1, timeout=30, waiter_lease=30)
    assert waiter.refresh_interval == 7.5
    got = {}
    asked = time.monotonic()
    thread = threading.Thread(target=lambda: got.update(ok=waiter.acquire("second", True, 10),
                                                        at=time.monotonic()))
    thread.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 2)
    released = time.monotonic()
    assert holder.release("first")  # handed to W0, which dies holding it
    thread.join(15)
    doomed.join(10)
    assert got["ok"]
    # Not before W0's lease ends (0.3 s after the release), and before W1's first refresh could
    # have found the permit free: the hand-off's note woke it.
    assert released + ttl <= got["at"] < asked + waiter.refresh_interval, got["at"] - released
    assert waiter.release("second")


def test_the_note_to_the_next_waiter_gives_the_earliest_lease_end(redis_client, redis_url):
    # A permit handed to W0 for 2 s comes with a note to W1 (sent as both wait in line with 30 s
    # leases: W1 refreshes every 7.5 s); another permit ends sooner (0.25 s): W1 must look again
    # then, not when W0's lease ends (2 s after the release) nor at its own refresh.
    holder = Semaphore(redis_client, "sem-earliest", limit=2, timeout=30)
    assert holder.acquire("a") and holder.acquire("b")
    doomed = CTX.Process(target=_permit_then_crash, args=(redis_url, "sem-earliest", 2.0, 30.0))
    doomed.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 1)
    waiter = Semaphore(redis_client, "sem-earliest", limit=2, timeout=30, waiter_lease=30)
    assert waiter.refresh_interval == 7.5
    got = {}
    thread = threading.Thread(target=lambda: got.update(ok=waiter.acquire("second", True, 10), at=time.monotonic()))
    thread.start()
    _wait_for(lambda: redis_client.zcard(holder.keys.queue) == 2)
    released = time.monotonic()  # before the extend: "a" ends 0.25 s after it ran, not after it returned
    assert holder.extend(0.25, replace_ttl=True, identity="a")  # "a" ends in 0.25 s, never released
    assert holder.release("b")  # handed to W0 (0.5 s), which dies holding it
    thread.join(15)
    doomed.join(10)
    assert got["ok"]
    assert 0.25 <= got["at"] - released < 2.0, got["at"] - released
    assert waiter.release("second")
