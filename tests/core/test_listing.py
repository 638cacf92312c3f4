"""The live-holder listing service: what it shows, what it never shows, and force release."""

from __future__ import annotations

import json
import threading
import time

import pytest

from django_redis_coord import Lock, Semaphore
from django_redis_coord.core.exceptions import InvalidLockArgument, LockNotOwnedError
from django_redis_coord.core.keys import keys_for
from django_redis_coord.core.listing import HolderListing, holder_id, parse_holder_id
from tests.support.expiry import sleep_out_ttl


@pytest.fixture
def listing(redis_client):
    return HolderListing(redis_client)


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.02):
    stop_at = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > stop_at:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def test_lists_the_holder_of_another_process_with_its_metadata(listing, spawn):
    holder = spawn("reports:nightly", timeout=60, label="nightly report")
    [found] = listing.holders()
    assert found.name == "reports:nightly"
    assert found.kind == "lock"
    assert found.fence == holder.fence
    assert found.pid == holder.pid
    assert found.host
    assert found.thread == "MainThread"
    assert found.label == "nightly report"
    assert 0 < found.ttl_ms <= 60000
    assert found.acquired_at_ms is not None and found.acquired_at_ms <= found.server_now_ms
    assert found.waiters == 0
    assert found.used is None and found.usage is None
    assert holder.finish() == "RELEASED"
    assert listing.holders() == []


def test_a_lock_without_expiry_is_listed_with_no_ttl(listing, redis_client):
    lock = Lock(redis_client, "forever")
    lock.acquire()
    [found] = listing.holders()
    assert found.ttl_ms is None
    assert found.as_dict()["ttl_ms"] is None
    [entry] = listing.entries()
    assert entry.expires_at_ms is None


def test_an_expired_holder_is_never_listed(listing, redis_client):
    # Listed while it lives (2 s: a loaded machine read a 0.2 s one after its end), then not once
    # its TTL ran out on Redis's clock.
    lock = Lock(redis_client, "short", timeout=2)
    lock.acquire()
    assert [h.name for h in listing.holders()] == ["short"]
    sleep_out_ttl(redis_client, lock.name, 2000)
    # Nobody reaped its registry entry: the listing must judge expiry by itself.
    assert redis_client.zscore(lock.keys.registry, b"lock:short") is not None
    assert listing.entries() == []
    assert listing.holders() == []


def test_a_hold_that_ended_between_the_two_reads_is_left_out(listing, redis_client):
    lock = Lock(redis_client, "brief", timeout=30)
    lock.acquire()
    entries = listing.entries()
    assert [e.name for e in entries] == ["brief"]
    lock.release()
    assert listing.details(entries) == []


def test_search_is_a_literal_case_insensitive_substring(listing, redis_client):
    names = ["a*b", "axb", "Report[1]", "report1", "other?", "otherX"]
    for name in names:
        Lock(redis_client, name, timeout=30).acquire()
    assert [h.name for h in listing.holders(search="a*b")] == ["a*b"]
    assert [h.name for h in listing.holders(search="REPORT[")] == ["Report[1]"]
    assert [h.name for h in listing.holders(search="report")] == ["Report[1]", "report1"]
    assert [h.name for h in listing.holders(search="?")] == ["other?"]
    assert listing.holders(search="missing") == []
    assert len(listing.holders(search="")) == len(names)


def test_kind_filter_and_unknown_kind(listing, redis_client):
    Lock(redis_client, "k1", timeout=30).acquire()
    assert [h.kind for h in listing.holders(kind="lock")] == ["lock"]
    assert listing.holders(kind="sem") == []
    with pytest.raises(InvalidLockArgument):
        listing.holders(kind="mutex")


def test_prefix_restricts_the_listing(redis_client):
    Lock(redis_client, "site-a:job", timeout=30).acquire()
    Lock(redis_client, "site-b:job", timeout=30).acquire()
    assert [h.name for h in HolderListing(redis_client, prefix="site-a:").holders()] == ["site-a:job"]
    assert len(HolderListing(redis_client).holders()) == 2


def test_sorted_by_name_and_sliced_before_details(listing, redis_client):
    for i in (3, 1, 4, 0, 2):
        Lock(redis_client, f"job:{i}", timeout=30).acquire()
    assert [h.name for h in listing.holders()] == [f"job:{i}" for i in range(5)]
    assert [h.name for h in listing.holders(offset=1, limit=2)] == ["job:1", "job:2"]
    redis_client.config_resetstat()
    listing.holders(offset=4, limit=10)
    stats = redis_client.info("commandstats")
    # One inspect script call, reading only the single entry on the page.
    assert stats["cmdstat_evalsha"]["calls"] == 1
    assert stats["cmdstat_get"]["calls"] == 1


def test_reads_the_registries_without_scanning_the_keyspace(listing, redis_client):
    redis_client.execute_command("DEBUG", "POPULATE", 20000, "cache")
    for i in range(7):
        Lock(redis_client, f"busy:{i}", timeout=30).acquire()
    listing.holders()  # loads the scripts
    redis_client.config_resetstat()
    holders = listing.holders()
    assert len(holders) == 7
    stats = redis_client.info("commandstats")
    assert not {"cmdstat_scan", "cmdstat_keys", "cmdstat_randomkey"} & set(stats)
    # 16384 registries read by one ZUNION (with TIME, in MULTI/EXEC), not one command per
    # registry; then one script call for the details of all seven locks.
    assert stats["cmdstat_zunion"]["calls"] == 1
    assert stats["cmdstat_evalsha"]["calls"] == 1
    assert "cmdstat_zrangebyscore" not in stats


def test_servers_without_zunion_get_the_script(listing, redis_client, monkeypatch):
    monkeypatch.setattr(HolderListing, "_union_missing", True)
    Lock(redis_client, "old-server", timeout=30).acquire()
    Lock(redis_client, "gone", timeout=0.1).acquire()
    time.sleep(0.25)
    redis_client.config_resetstat()
    assert [h.name for h in listing.holders()] == ["old-server"]
    stats = redis_client.info("commandstats")
    assert "cmdstat_zunion" not in stats
    assert stats["cmdstat_zrangebyscore"]["calls"] == 16384


def test_force_release_fences_out_the_holder_and_hands_off_to_the_next_waiter(listing, spawn):
    first = spawn("orders:sync", timeout=60)
    second = spawn("orders:sync", timeout=60, wait=False)
    waiters = wait_for(lambda: listing.waiters("orders:sync"))
    assert [w.pid for w in waiters] == [second.pid]
    [held] = listing.holders()
    assert held.waiters == 1 and held.pid == first.pid

    result = listing.force_release("orders:sync", expected_fence=first.fence)

    assert result.released and not result.was_free and not result.fence_mismatch
    assert result.fence == first.fence
    assert result.fence_after > first.fence
    assert result.handed_off
    new_fence = second.wait_held()
    assert new_fence > result.fence_after
    [now] = listing.holders()
    assert now.pid == second.pid and now.fence == new_fence
    # The old holder finds out: its release is refused.
    assert first.finish() == "LOST"
    assert second.finish() == "RELEASED"
    assert listing.holders() == []


def test_force_release_bumps_the_fence_above_the_old_holder(listing, redis_client):
    old = Lock(redis_client, "fenced", timeout=30)
    old.acquire()
    old_fence = old.fence
    result = listing.force_release("fenced")
    assert result.released and not result.handed_off
    assert int(redis_client.hget(old.keys.meta, "fence")) == result.fence_after > old_fence
    assert redis_client.exists("fenced") == 0
    assert redis_client.zscore(old.keys.registry, b"lock:fenced") is None
    with pytest.raises(LockNotOwnedError):
        old.extend(10)
    newcomer = Lock(redis_client, "fenced", timeout=30)
    newcomer.acquire()
    assert newcomer.fence > result.fence_after


def test_force_release_with_a_stale_fence_changes_nothing(listing, redis_client):
    lock = Lock(redis_client, "guarded", timeout=30)
    lock.acquire()
    before = redis_client.hgetall(lock.keys.meta)
    result = listing.force_release("guarded", expected_fence=lock.fence - 1)
    assert result.fence_mismatch and not result.released
    assert result.fence == lock.fence
    assert redis_client.hgetall(lock.keys.meta) == before
    assert lock.owned()


def test_force_release_of_a_free_lock(listing, redis_client):
    result = listing.force_release("nobody")
    assert result.was_free and not result.released
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize("name", ["", "a:dcoord:b", 42])
def test_bad_names_are_refused_before_anything_is_written(listing, redis_client, name):
    with pytest.raises(InvalidLockArgument):
        listing.force_release(name)
    with pytest.raises(InvalidLockArgument):
        listing.holder(name)
    assert redis_client.dbsize() == 0


def test_force_release_arguments_are_checked(listing, redis_client):
    with pytest.raises(InvalidLockArgument):
        listing.force_release("x", kind="sem")  # a permit is named by its fence
    with pytest.raises(InvalidLockArgument):
        listing.force_release("x", expected_fence="12")
    with pytest.raises(InvalidLockArgument):
        listing.force_release("x", kind="mutex")
    assert redis_client.dbsize() == 0


def test_waiters_in_queue_order_with_metadata(listing, spawn):
    holder = spawn("queue:demo", timeout=60)
    one = spawn("queue:demo", timeout=60, wait=False)
    wait_for(lambda: len(listing.waiters("queue:demo")) == 1)
    two = spawn("queue:demo", timeout=60, wait=False)
    waiters = wait_for(lambda: (w := listing.waiters("queue:demo")) and len(w) == 2 and w)
    assert [w.pid for w in waiters] == [one.pid, two.pid]
    assert [w.position for w in waiters] == [0, 1]
    assert all(w.host and w.thread == "MainThread" for w in waiters)
    server_now = listing.server_time_ms()
    assert all(w.as_dict(server_now)["lease_ms"] > 0 for w in waiters)
    assert all("…" in w.masked_token for w in waiters)
    [held] = listing.holders()
    assert held.waiters == 2
    for proc in (holder, one, two):
        if proc is not holder:
            proc.wait_held()
        assert proc.finish() == "RELEASED"
    assert listing.waiters("queue:demo") == []


def test_tokens_are_masked_everywhere_operators_look(listing, redis_client):
    lock = Lock(redis_client, "secret", timeout=30)
    lock.acquire()
    token = redis_client.get("secret").decode()
    [found] = listing.holders()
    assert found.token.decode() == token
    assert token not in found.masked_token and token not in repr(found)
    dumped = json.dumps(found.as_dict())
    assert token not in dumped
    assert found.as_dict()["token"] == token[:4] + "…"


@pytest.mark.parametrize("name", [b"plain", "unicodé".encode(), b"\xff\xfe raw bytes", b"with/slash?&"])
def test_holder_ids_round_trip(name):
    assert parse_holder_id(holder_id("lock", name)) == ("lock", name)


@pytest.mark.parametrize("value", ["", "!!!", holder_id("mutex", b"x"), "bG9jaw"])
def test_bad_holder_ids_are_refused(value):
    with pytest.raises(InvalidLockArgument):
        parse_holder_id(value)


def test_names_in_other_slots_and_hash_tags(listing, redis_client):
    names = ["{user:1}:profile", "{user:1}:avatar", "plain}{", "ü-ñ"]
    for name in names:
        Lock(redis_client, name, timeout=30).acquire()
    assert sorted(h.name for h in listing.holders()) == sorted(names)
    slots = {keys_for(n.encode()).slot for n in names}
    assert len(slots) >= 2


def test_semaphore_permits_are_listed_with_usage(listing, redis_client):
    pool = Semaphore(redis_client, "exports", limit=3, timeout=60, label="export")
    assert pool.acquire() and pool.acquire()
    Lock(redis_client, "exports-lock", timeout=60).acquire()
    permits = listing.holders(kind="sem")
    assert [p.name for p in permits] == ["exports", "exports"]
    assert all(p.kind == "sem" and p.used == 2 and p.limit == 3 and p.usage == "2/3" for p in permits)
    assert all(p.label == "export" and 0 < p.ttl_ms <= 60000 for p in permits)
    assert permits[0].fence < permits[1].fence
    assert {p.fence for p in permits} == {h.fence for h in pool.holders()}
    assert [h.kind for h in listing.holders()] == ["sem", "sem", "lock"]
    assert [h.name for h in listing.holders(kind="lock")] == ["exports-lock"]


def test_expired_permits_are_never_listed(listing, redis_client):
    pool = Semaphore(redis_client, "short-permits", limit=2, timeout=0.2)
    pool.acquire()
    keeper = Semaphore(redis_client, "short-permits", limit=2, timeout=60)
    keeper.acquire()
    [entry] = listing.entries()
    time.sleep(0.4)
    [left] = listing.holders()
    assert left.fence == keeper.fence and left.used == 1
    assert len(listing.details([entry])) == 1


def test_force_release_of_a_permit_by_its_fence(listing, redis_client):
    pool = Semaphore(redis_client, "uploads", limit=1, timeout=60)
    assert pool.acquire()
    fence = pool.fence
    result = listing.force_release("uploads", kind="sem", expected_fence=fence)
    assert result.released and result.fence == fence and result.fence_after > fence
    assert listing.holders() == []
    assert pool.release() is False  # the old holder no longer has it
    other = Semaphore(redis_client, "uploads", limit=1, timeout=60)
    assert other.acquire()
    assert other.fence > result.fence_after
    assert listing.force_release("uploads", kind="sem", expected_fence=fence).was_free


def test_force_release_of_a_permit_serves_the_queue(listing, redis_client, redis_url):
    pool = Semaphore(redis_client, "slots", limit=1, timeout=60)
    assert pool.acquire()
    from tests.support.procs import CTX

    ready = CTX.Queue()
    child = CTX.Process(target=_take_permit, args=(redis_url, ready))
    child.start()
    try:
        waiters = wait_for(lambda: listing.waiters("slots", kind="sem"))
        assert [w.pid for w in waiters] == [child.pid]
        result = listing.force_release("slots", kind="sem", expected_fence=pool.fence)
        assert result.released and result.handed_off
        fence = ready.get(timeout=30)
        assert fence > result.fence_after
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()


def _take_permit(url, ready):
    import redis

    client = redis.Redis.from_url(url)
    pool = Semaphore(client, "slots", limit=1, timeout=60)
    assert pool.acquire(blocking=True, blocking_timeout=30)
    ready.put(pool.fence)
    pool.release()


@pytest.fixture(scope="module")
def cluster():
    from tests.support.cluster import LocalCluster

    local = LocalCluster(primaries=3, replicas_per_primary=0).start()
    yield local
    local.stop()


def test_on_a_redis_cluster_every_primary_is_read(cluster):
    client = cluster.client()
    cluster.flushall()
    names = [f"cluster-job:{i}" for i in range(40)]
    locks = [Lock(client, name, timeout=60, label="c") for name in names]
    for lock in locks:
        assert lock.acquire()
    pool = Semaphore(client, "cluster-pool", limit=2, timeout=60)
    assert pool.acquire()
    gone = Lock(client, "cluster-short", timeout=0.1)
    gone.acquire()
    time.sleep(0.3)
    nodes = {client.get_node_from_key(name).name for name in names}
    assert len(nodes) == 3  # the names really are spread over the primaries

    listing = HolderListing(client)
    found = listing.holders()
    assert [h.name for h in found if h.kind == "lock"] == sorted(names)
    assert {h.fence for h in found if h.kind == "lock"} == {lock.fence for lock in locks}
    [permit] = [h for h in found if h.kind == "sem"]
    assert permit.usage == "1/2" and permit.fence == pool.fence
    assert [h.name for h in listing.holders(search="JOB:1")] == sorted(n for n in names if "job:1" in n)

    result = listing.force_release(names[5], expected_fence=locks[5].fence)
    assert result.released and result.fence_after > locks[5].fence
    assert names[5] not in {h.name for h in listing.holders()}
    assert listing.waiters(names[6]) == []
    client.close()


def test_registry_entries_of_holds_that_ended_without_a_release_dropped_when_its_expiry_is_set(redis_client, listing):
    """Holds that simply expire leave their registry entries (the listing leaves them out by their
    score) until a grant in the same slot next sets the registry's expiry, at least once a minute
    while grants come: the registry grows with the holds of a minute or two, not with history."""
    from django_redis_coord import Lock, Semaphore
    from django_redis_coord.core.keys import key_slot, registry_key

    registry = registry_key(key_slot(b"{tenant-9}"))
    for number in range(40):
        assert Lock(redis_client, f"{{tenant-9}}:job:{number}", timeout=0.1).acquire(blocking=False)
    assert Semaphore(redis_client, "{tenant-9}:pool", limit=2, timeout=0.1).acquire()
    assert redis_client.zcard(registry) == 41
    time.sleep(0.3)
    assert listing.holders() == []
    fresh = Lock(redis_client, "{tenant-9}:job:new", timeout=5)
    assert fresh.acquire(blocking=False)
    assert redis_client.zcard(registry) == 42  # not on every grant: the registry's expiry still covers this one
    fresh.release()
    redis_client.pexpire(registry, 30_000)  # as a minute later: the next grant pushes the expiry back
    permits = Semaphore(redis_client, "{tenant-9}:pool", limit=2, timeout=0.1)
    assert permits.acquire() and redis_client.zcard(registry) == 1
    assert 60_000 < redis_client.pttl(registry) <= 120_100


# -- what a hold is for: leaders, the masking rule ----------------------------------------------
def _lead(url: str, name: str, label: str, out, stop) -> None:
    import os

    import redis

    from django_redis_coord import Leader

    leader = Leader(redis.Redis.from_url(url), name, 5, label=label)
    leader.campaign()
    out.put((os.getpid(), leader.term))
    stop.wait(30)
    leader.resign()


def test_a_leader_in_another_process_is_listed_with_its_role_and_term(listing, redis_url, redis_client):
    from tests.support.procs import CTX

    out, stop = CTX.Queue(), CTX.Event()
    proc = CTX.Process(target=_lead, args=(redis_url, "scheduler", "beat", out, stop))
    proc.start()
    try:
        pid, term = out.get(timeout=20)
        Lock(redis_client, "plain", timeout=30).acquire()
        plain, leader = listing.holders()
        assert (leader.name, leader.pid, leader.label) == ("scheduler", pid, "leader: beat")
        assert (leader.role, leader.term, leader.fence) == ("leader", term, term)
        assert leader.role_summary == "leader" and leader.role_details == [("role", "leader"), ("term", term)]
        assert leader.as_dict()["role"] == "leader" and leader.as_dict()["term"] == term
        assert (plain.role, plain.term, plain.role_summary, plain.as_dict()["term"]) == (None, None, "", None)
    finally:
        stop.set()
        proc.join(20)
    assert [h.name for h in listing.holders()] == ["plain"]  # the leader resigned


def test_the_token_is_masked_wherever_a_holder_record_repeats_it(listing, redis_client):
    """One rule: a label or an extra field that contains the holder's token shows its mask."""
    token = "job-7f3a9c1e5b2d4068"
    lock = Lock(redis_client, "leaky", timeout=30, label=f"run {token} of the import")
    lock.holder_fields = {"role": "task", "state": "running", "reservation": token, "nested": [{"t": token}]}
    lock.acquire(token=token)
    waiting = "waiter-0123456789"
    waiter = Lock(redis_client, "leaky", timeout=30, label=f"waits as {waiting}", thread_local=False)
    waiter.holder_fields = {"again": waiting}
    queued = threading.Thread(target=waiter.acquire, kwargs={"blocking_timeout": 10, "token": waiting})
    queued.start()
    try:
        [found] = listing.holders()
        assert found.label == "run job-… of the import"
        assert found.extra == {"role": "task", "state": "running", "reservation": "job-…",
                               "nested": [{"t": "job-…"}]}
        assert token not in json.dumps(found.as_dict())
        assert found.role_summary == "task running"
        [queued_info] = wait_for(lambda: listing.waiters("leaky"))
        assert queued_info.label == "waits as wait…" and queued_info.extra == {"again": "wait…"}
    finally:
        lock.release()
        queued.join(10)
    assert waiter.owned()
    # A token that JSON writes with escapes (a quote, a non-ASCII letter) is found as well.
    for name, odd in (("quoted", 'say "hi" 0123456789'), ("accented", "jobé-0123456789")):
        marked = Lock(redis_client, name, timeout=30, label=f"[{odd}]")
        marked.acquire(token=odd)
        [found] = listing.holder(name)
        assert found.label == f"[{odd[:4]}…]", name
        assert odd not in json.dumps(found.as_dict(), ensure_ascii=False)
    # A short token is masked only where it is a whole value (it could be part of any text).
    short = Lock(redis_client, "short-token", timeout=30, label="abc abc")
    short.holder_fields = {"same": "abc"}
    short.acquire(token="abc")
    [found] = listing.holder("short-token")
    assert found.label == "abc abc" and found.extra == {"same": "…"}


# -- choosing holds, and releasing several ----------------------------------------------------
@pytest.mark.parametrize("text, ms", [("90", 90_000), ("90s", 90_000), ("500ms", 500), ("5m", 300_000),
                                      ("2h", 7_200_000), ("1d", 86_400_000), ("1h30m", 5_400_000),
                                      ("1.5h", 5_400_000), (" 2H ", 7_200_000), ("0", 0)])
def test_durations(text, ms):
    from django_redis_coord.core.listing import parse_duration

    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "-5m", "+5m", "1e3", "inf", "nan", "5 m", "m", "5x", "1h-30m", "1.h",
                                  "99999999999d", "9" * 65, "١٢"])
def test_bad_durations_are_refused(text):
    from django_redis_coord.core.listing import parse_duration

    with pytest.raises(InvalidLockArgument):
        parse_duration(text)


def test_selection_filters_combine_and_are_checked(listing, redis_client):
    from django_redis_coord.core.listing import HoldSelection

    Lock(redis_client, "a", timeout=30, label="nightly a").acquire()
    Lock(redis_client, "b", timeout=30, label="weekly b").acquire()
    Semaphore(redis_client, "c", limit=2, timeout=30, label="nightly c").acquire()
    names = lambda **f: [h.name for h in listing.select(HoldSelection(**f))]  # noqa: E731
    import os
    import socket

    assert names(label_prefix="nightly") == ["a", "c"]
    assert names(label_prefix="nightly", kind="lock") == ["a"]
    assert names(label_prefix="nightly", pid=os.getpid(), host=socket.gethostname()) == ["a", "c"]
    assert names(label_prefix="nightly", host="elsewhere") == []
    assert names(older_than_ms=60_000) == []
    time.sleep(0.05)
    assert names(older_than_ms=10, label_prefix="weekly") == ["b"]
    for bad in ({"pid": 0}, {"pid": True}, {"pid": "12"}, {"older_than_ms": -1}, {"older_than_ms": 1.5},
                {"kind": "mutex"}, {"host": "h" * 1001}, {"label_prefix": 3}):
        with pytest.raises(InvalidLockArgument):
            HoldSelection(**bad)
    assert not HoldSelection(kind="lock").filters_holders and HoldSelection(older_than_ms=0).filters_holders


def test_force_release_holds_leaves_a_hold_that_changed_alone(listing, redis_client):
    from django_redis_coord.core.listing import HoldSelection

    first = Lock(redis_client, "moving", timeout=30, label="batch")
    first.acquire()
    stays = Lock(redis_client, "staying", timeout=30, label="batch")
    stays.acquire()
    chosen = listing.select(HoldSelection(label_prefix="batch"))
    first.release()  # between the listing and the release, the hold ended and another began
    second = Lock(redis_client, "moving", timeout=30, label="batch")
    second.acquire()
    results = {holder.name: result for holder, result in listing.force_release_holds(chosen)}
    assert results["moving"].fence_mismatch and not results["moving"].released and second.owned()
    assert results["staying"].released and results["staying"].fence_after > stays.fence and not stays.owned()


# -- grant times come from the server's clock ---------------------------------------------------------
def _hold_with_a_clock_an_hour_behind(url: str, ready, done) -> None:
    """A child process whose wall clock (``time.time`` and friends) runs an hour behind takes a
    lock, a permit and a read hold, and keeps them until told; Redis itself stays right."""
    import redis

    from django_redis_coord import ReadWriteLock

    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() - 3600  # type: ignore[assignment]
    time.time_ns = lambda: real_time_ns() - 3600 * 10**9  # type: ignore[assignment]
    client = redis.Redis.from_url(url)
    lock = Lock(client, "behind:lock", timeout=60)
    semaphore = Semaphore(client, "behind:sem", limit=2, timeout=60)
    rw = ReadWriteLock(client, "behind:rw", timeout=60)
    assert lock.acquire(blocking=False) and semaphore.acquire("job") and rw.read.acquire(blocking=False)
    ready.set()
    done.wait(60)
    lock.release()
    semaphore.release("job")
    rw.read.release()


def test_holds_taken_by_a_client_whose_clock_is_an_hour_behind_are_listed_while_held(redis_client, redis_url):
    from tests.support.procs import CTX

    def server_ms() -> int:
        seconds, micros = redis_client.time()
        return seconds * 1000 + micros // 1000

    ready, done = CTX.Event(), CTX.Event()
    before = server_ms()
    child = CTX.Process(target=_hold_with_a_clock_an_hour_behind, args=(redis_url, ready, done), daemon=True)
    child.start()
    try:
        assert ready.wait(30), "the child did not take its holds"
        after = server_ms()
        listed = {holder.name: holder for holder in HolderListing(redis_client).holders()}
        # Listed while held, granted at the server's time (not the client's, an hour earlier).
        assert set(listed) == {"behind:lock", "behind:sem", "behind:rw"}
        for holder in listed.values():
            assert before <= holder.acquired_at_ms <= after, holder
            assert holder.ttl_ms is not None and 0 < holder.ttl_ms <= 60_000
    finally:
        done.set()
        child.join(30)
    assert child.exitcode == 0
    assert HolderListing(redis_client).holders() == []
