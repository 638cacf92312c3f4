"""The core Lock: redis-py compatibility, fencing, metadata, mutual exclusion across processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import LockError, LockNotOwnedError
from redis.retry import Retry

from django_redis_coord import (
    IdentityLock,
    InvalidLockArgument,
    InvalidLockArgumentType,
    Lock,
    LockAcquireTimeout,
    lock_holder,
)
from django_redis_coord.core.keys import key_slot, keys_for
from django_redis_coord.core.listing import HolderListing
from django_redis_coord.core.waiting.rules import READ_SECONDS
from tests.support.cluster import wait_until
from tests.support.fences import assert_each_above_the_last, counter_ahead_of_the_clock
from tests.support.procs import run_processes


def test_raw_token_is_stored_at_exactly_the_name(redis_client):
    lock = Lock(redis_client, "orders")
    assert lock.acquire(blocking=False)
    assert redis_client.get("orders") == lock.local.token
    assert redis_client.pttl("orders") == -1  # timeout=None: no expiry, as in redis-py
    lock.release()
    assert redis_client.get("orders") is None


def test_every_key_hashes_to_the_slot_of_the_name(redis_client):
    for name in ["orders", "user:{42}:cart", "a}b", "x{}y", "{}", "é{ü}"]:
        lock = Lock(redis_client, name, timeout=5)
        assert lock.acquire(blocking=False)
        slot = key_slot(name.encode())
        touched = redis_client.keys("*")
        assert touched, name
        for key in touched:
            assert key_slot(key) == slot, (name, key)
        ks = keys_for(name.encode())
        assert {key_slot(key) for key in (ks.meta, ks.queue, ks.waiters)} == {slot}
        lock.release()
        redis_client.flushall()


def test_slot_tags_are_the_lowest_hex_number_of_their_slot_and_made_on_demand():
    from django_redis_coord.core import keys

    for slot in (0, 1, 9999, 16383):
        tag = keys.slot_tag(slot)
        assert key_slot(b"{" + tag + b"}") == slot
        assert all(key_slot(b"{%x}" % number) != slot for number in range(int(tag, 16)))
    # A fresh process pays for the tags it asks for, not for the whole table (314,737 numbers).
    tried = subprocess.run(
        [sys.executable, "-c",
         "from django_redis_coord.core import keys; keys.slot_tag(5); print(keys._next_tag_number)"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    assert 0 < int(tried) < 100_000


def test_the_slot_tag_search_computes_redis_cluster_slots():
    """slot_tag() hashes its candidates with binascii's CRC-CCITT: the slot redis-py computes."""
    from binascii import crc_hqx

    for number in range(0, 320_000, 3):  # past the last number any slot needs (314,736)
        candidate = b"%x" % number
        assert crc_hqx(candidate, 0) & 16383 == key_slot(candidate), candidate


def test_a_fork_while_slot_tags_are_being_found_does_not_hang_the_child(monkeypatch):
    from django_redis_coord.core import keys

    monkeypatch.setattr(keys, "_slot_tags", {})  # as in a process that has found no tag yet
    monkeypatch.setattr(keys, "_next_tag_number", 0)
    slot = 10780  # the slot found last: the child has the most to do
    with keys._slot_tags_lock:  # held, as by another thread finding tags at the moment of a fork
        pid = os.fork()
        if pid == 0:  # the child: would wait for ever on the lock inherited held
            os._exit(0 if key_slot(b"{" + keys.slot_tag(slot) + b"}") == slot else 1)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung on the slot tags' lock")
        time.sleep(0.02)
    assert os.waitstatus_to_exitcode(status) == 0


def test_extend_and_reacquire_errors_match_redis_py(redis_client):
    no_ttl = Lock(redis_client, "nottl")
    with pytest.raises(LockError):
        no_ttl.extend(1)
    no_ttl.acquire()
    with pytest.raises(LockError):
        no_ttl.extend(1)
    with pytest.raises(LockError):
        no_ttl.reacquire()
    no_ttl.release()
    lock = Lock(redis_client, "gone", timeout=10)
    lock.acquire()
    redis_client.delete("gone")
    with pytest.raises(LockNotOwnedError):
        lock.extend(1)
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_release_by_a_non_holder_is_refused(redis_client):
    holder = Lock(redis_client, "mine", timeout=10)
    holder.acquire()
    intruder = Lock(redis_client, "mine", timeout=10)
    intruder.local.token = b"not-the-token"
    with pytest.raises(LockNotOwnedError):
        intruder.release()
    assert holder.owned()
    with pytest.raises(LockError):
        Lock(redis_client, "mine").release()  # never acquired at all
    holder.release()


def test_context_manager_raises_when_it_cannot_acquire(redis_client):
    first = Lock(redis_client, "cm", timeout=5)
    first.acquire()
    with pytest.raises(LockAcquireTimeout) as info:
        with Lock(redis_client, "cm", timeout=5, blocking_timeout=0.05):
            pass
    assert isinstance(info.value, LockError)
    first.release()


def test_non_blocking_and_blocking_timeout(redis_client):
    first = Lock(redis_client, "bt", timeout=5)
    first.acquire()
    second = Lock(redis_client, "bt", timeout=5, waiter_lease=3)
    assert second.acquire(blocking=False) is False
    # blocking_timeout is kept on the client's clock: the call gives up once it has passed, not at
    # the next refresh of its place nor at the end of a whole read of the waiting connection, both
    # 1 s away at the earliest here.
    assert second.refresh_interval >= 1.0 and READ_SECONDS >= 1.0
    started = time.monotonic()
    assert second.acquire(blocking_timeout=0.2) is False
    assert 0.2 <= time.monotonic() - started < 1.0
    first.release()
    assert second.acquire(blocking=False)
    second.release()


def test_without_auto_renew_a_loss_shows_in_valid_and_on_lost_fires_at_the_release(redis_client):
    """No timer watches a hold without ``auto_renew``: ``valid`` turns False at the local deadline
    (it is computed when read) and ``on_lost`` fires when a call finds the hold gone, the release."""
    lost: list[Lock] = []
    lock = Lock(redis_client, "unwatched", timeout=0.2, on_lost=lost.append)
    assert lock.acquire(blocking=False) and lock.valid
    deadline = time.monotonic() + 30
    while redis_client.exists("unwatched"):  # the key expires after the local deadline, never before
        assert time.monotonic() < deadline, "the key never expired"
        time.sleep(0.02)
    assert not lock.valid
    with pytest.raises(LockNotOwnedError):
        lock.ensure_valid()
    assert lost == []  # found by nobody yet
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lost == [lock]


def test_fence_grows_with_every_grant(redis_client):
    fences = []
    for _ in range(20):
        lock = Lock(redis_client, "fenced", timeout=5)
        lock.acquire()
        fences.append(lock.fence)
        lock.release()
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    assert Lock(redis_client, "fenced").fence is None


def test_every_grant_takes_a_fence_above_the_counter_even_ahead_of_the_clock(redis_client, spawn):
    first = Lock(redis_client, "fenced-ahead", timeout=30)
    counter = counter_ahead_of_the_clock(redis_client, first.keys.meta)
    assert first.acquire(blocking=False)  # a grant at once
    fences = [first.fence]
    waiter = spawn("fenced-ahead", timeout=30, wait=False)
    wait_until(lambda: redis_client.zcard(first.keys.queue) == 1, 30, what="the waiter queued")
    first.release()  # a hand-off to the queued waiter
    fences.append(waiter.wait_held())
    released = HolderListing(redis_client).force_release("fenced-ahead", expected_fence=fences[-1])
    assert released.released  # a force release moves the counter too
    fences.append(released.fence_after)
    again = Lock(redis_client, "fenced-ahead", timeout=30)
    assert again.acquire(blocking=False)
    fences.append(again.fence)
    again.release()
    assert_each_above_the_last(counter, fences)


def test_fence_stays_monotonic_across_a_server_kill_and_restart(redis_servers):
    (server,) = redis_servers(1)
    client = server.client()
    before = []
    for _ in range(5):
        lock = Lock(client, "restart", timeout=5)
        lock.acquire()
        before.append(lock.fence)
        lock.release()
    server.restart()  # SIGKILL, no persistence: the stored counter is gone
    client = server.client()
    assert client.dbsize() == 0
    lock = Lock(client, "restart", timeout=5)
    lock.acquire()
    assert lock.fence > max(before)
    lock.release()


def test_holder_metadata(redis_client):
    lock = Lock(redis_client, "meta", timeout=30, label="nightly report")
    lock.acquire()
    holder = lock_holder(redis_client, "meta")
    assert holder is not None
    assert holder.token == lock.local.token and holder.fence == lock.fence
    assert holder.label == "nightly report"
    import os
    import socket

    assert holder.pid == os.getpid() and holder.host == socket.gethostname()
    assert holder.thread == threading.current_thread().name
    server_ms = int(redis_client.time()[0]) * 1000
    assert abs(holder.acquired_at_ms - server_ms) < 5000
    assert 25000 < holder.ttl_ms <= 30000
    assert holder.masked_token != holder.token.decode()
    lock.release()
    assert lock_holder(redis_client, "meta") is None


BAD_INPUTS = [
    (dict(name=""), InvalidLockArgument),
    (dict(name=b""), InvalidLockArgument),
    (dict(name=42), InvalidLockArgumentType),
    (dict(name=None), InvalidLockArgumentType),
    (dict(name="ok", timeout=0), InvalidLockArgument),
    (dict(name="ok", timeout=-1), InvalidLockArgument),
    (dict(name="ok", timeout="10"), InvalidLockArgumentType),
    (dict(name="ok", timeout=float("nan")), InvalidLockArgument),
    (dict(name="ok", blocking_timeout=-0.5), InvalidLockArgument),
    (dict(name="ok", timeout=1, sleep=2), InvalidLockArgument),
    (dict(name="ok", auto_renew=True), InvalidLockArgument),
    (dict(name="x:dcoord:y"), InvalidLockArgument),
    (dict(name="ok", timeout=5, auto_renew="yes"), InvalidLockArgumentType),
    (dict(name="ok", timeout=5, on_lost=5), InvalidLockArgumentType),
]


@pytest.mark.parametrize("kwargs,error", BAD_INPUTS)
def test_bad_input_is_a_typed_error_and_writes_nothing(redis_client, kwargs, error):
    kwargs = dict(kwargs)
    name = kwargs.pop("name")
    with pytest.raises(error) as info:
        Lock(redis_client, name, **kwargs).acquire()
    assert isinstance(info.value, LockError)
    assert redis_client.dbsize() == 0


def test_bad_acquire_arguments_write_nothing(redis_client):
    lock = Lock(redis_client, "args", timeout=5)
    with pytest.raises(InvalidLockArgument):
        lock.acquire(blocking_timeout=-1)
    with pytest.raises(InvalidLockArgumentType):
        lock.acquire(blocking_timeout="soon")
    with pytest.raises(InvalidLockArgument):
        lock.acquire(token="")
    assert redis_client.dbsize() == 0


def test_identity_lock_transcript(redis_server):
    client = redis.Redis(host=redis_server.host, port=redis_server.port, decode_responses=True)
    client.flushall()
    lock = IdentityLock(client, "test-lock")
    assert lock.acquire("peter", 3600) is True
    assert lock.release("tom") is False
    assert lock.release("peter") is True
    assert lock.acquire("peter", 3600) is True
    assert lock.acquire("tom", 3600) is False
    assert 3590 < client.ttl("test-lock") <= 3600
    assert client.get("test-lock") == "peter"


# -- several processes ---------------------------------------------------------------------
def _contend(url: str, name: str, rounds: int) -> list[tuple[int, int, int]]:
    client = redis.Redis.from_url(url)
    spans = []
    for _ in range(rounds):
        lock = Lock(client, name, timeout=10)
        lock.acquire()
        start = time.monotonic_ns()
        # An unprotected read-modify-write: loses updates unless the lock excludes others.
        value = int(client.get(name + ":counter") or 0)
        time.sleep(0.0005)
        client.set(name + ":counter", value + 1)
        end = time.monotonic_ns()
        spans.append((start, end, lock.fence))
        lock.release()
    return spans


def test_mutual_exclusion_and_fence_order_across_processes(redis_client, redis_url):
    results = run_processes(_contend, [(redis_url, "shared", 40)] * 4)
    spans = sorted(span for result in results for span in result)
    assert len(spans) == 160
    for earlier, later in zip(spans, spans[1:]):
        assert earlier[1] <= later[0], "two processes held the lock at the same time"
        assert earlier[2] < later[2], "fences must grow in grant order"
    assert int(redis_client.get("shared:counter")) == 160


def test_a_first_attempt_interrupted_before_its_reply_leaves_no_hold(redis_server, redis_client):
    """The sync twin of the asyncio test: KeyboardInterrupt after the acquire script ran, before
    its reply was read.  The hold is given back (the interruption still reaches the caller)."""
    from redis.connection import Connection

    armed = {"interrupt": False}

    class InterruptedReplies(Connection):
        def read_response(self, *args, **kwargs):
            if armed["interrupt"]:
                armed["interrupt"] = False
                time.sleep(0.1)  # the script has run on the server by now
                self.disconnect()  # as redis-py's read_response does when interrupted
                raise KeyboardInterrupt
            return super().read_response(*args, **kwargs)

    client = redis.Redis.from_url(redis_server.url, connection_class=InterruptedReplies)
    client.ping()
    lock = Lock(client, "interrupted-first", timeout=None)
    assert lock.acquire(blocking=False)  # the script is loaded: the interrupted call will run it
    lock.release()
    armed["interrupt"] = True
    with pytest.raises(KeyboardInterrupt):
        lock.acquire(blocking=False)
    assert not redis_client.exists("interrupted-first")
    assert lock.acquire(blocking=False)  # and the lock is free for the next caller
    lock.release()
    client.close()


def test_scripts_flushed_from_the_server_are_loaded_again(redis_server, redis_client):
    """After SCRIPT FLUSH (a restart or a failover loses them too), the short path loads the script
    and sends the call once more: sync and asyncio, acquire and release."""
    import asyncio

    import redis.asyncio

    from django_redis_coord.asyncio import Lock as AsyncLock

    lock = Lock(redis_client, "flushed", timeout=5)
    for _ in range(2):
        redis_client.script_flush()
        assert lock.acquire(blocking=False)
        redis_client.script_flush()
        lock.release()
    assert not redis_client.exists("flushed")

    async def scenario():
        client = redis.asyncio.Redis.from_url(redis_server.url)
        alock = AsyncLock(client, "flushed", timeout=5)
        for _ in range(2):
            await client.script_flush()
            assert await alock.acquire(blocking=False)
            await client.script_flush()
            await alock.release()
        held = await client.exists("flushed")
        await client.aclose()
        return held

    assert asyncio.run(scenario()) == 0


def test_an_acquire_sent_again_by_a_retrying_client_is_recognised_as_its_own_grant(redis_client):
    """Clients on redis-py's ordinary path (cluster, subclasses) send a command again after a
    timeout, although it may have run.  A token the library made for the call tells Redis that a
    holder with it is this very call: the second send reports the grant, and never waits behind it."""
    from django_redis_coord.core.arguments import new_token as make_token
    from django_redis_coord.core.queue.rules import OWN_TOKEN

    lock = Lock(redis_client, "resent", timeout=None)
    token = make_token()
    first = lock.line.acquire(token, 1 + OWN_TOKEN, "w")
    for mode in (1 + OWN_TOKEN, 0 + OWN_TOKEN):  # a blocking acquire sent again, or a try sent again
        again = lock.line.acquire(token, mode, "w")
        assert again.acquired and again.fence == first.fence
    assert redis_client.zcard(lock.keys.queue) == 0
    # Handed over between the two sends: the second send takes the hand-off, not a place in line.
    waiting = make_token()
    assert not lock.line.acquire(waiting, 1 + OWN_TOKEN, "w").acquired
    lock.local.hold.token = token
    lock.release()
    assert redis_client.get("resent") == waiting
    handed = lock.line.acquire(waiting, 1 + OWN_TOKEN, "w")
    assert handed.acquired and handed.fence > first.fence
    assert redis_client.zcard(lock.keys.queue) == 0 and redis_client.hlen(lock.keys.waiters) == 0


def test_a_first_acquire_whose_reply_timed_out_gives_its_grant_back(redis_servers):
    """The acquire ran but its reply did not come back in time: the grant (with no expiry here)
    must not stay behind, held by a token nobody knows."""
    import socket

    (server,) = redis_servers(1)
    admin = server.client()
    # No retries: a client that retries sends the acquire again, which then reports its own grant.
    client = redis.Redis(host=server.host, port=server.port, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    warm = Lock(client, "warm-up", timeout=5)  # connected, scripts loaded: the acquire itself times out
    assert warm.acquire()
    warm.release()
    lock = Lock(client, "timed-out", timeout=None)
    stall = socket.create_connection((server.host, server.port))
    stall.sendall(b"DEBUG SLEEP 0.6\r\n")  # the server stops answering for longer than the client waits
    time.sleep(0.05)
    with pytest.raises(redis.exceptions.TimeoutError):
        lock.acquire(blocking=False)
    time.sleep(0.7)
    assert admin.get("timed-out") is None and admin.zcard(lock.keys.queue) == 0
    stall.close()


def test_the_hand_over_hook_takes_a_hold_over_and_hands_it_on_in_one_step(redis_client):
    """``lock.hand_over``: an acquire that ends another token's hold as it takes the key (a fresh
    fence), and a release that grants the key to that token, each one transaction; a hold already
    ended hands nothing over."""
    from django_redis_coord.core.lock.handover import HandOver

    reservation = Lock(redis_client, "hand-over", timeout=30)
    assert reservation.acquire(token="reserved", blocking=False)
    run = Lock(redis_client, "hand-over", timeout=30)
    run.hand_over = HandOver(replaces=b"reserved")
    assert run.acquire(token="run", blocking=False)  # taken over: no refusal, the key is the run's
    assert redis_client.get("hand-over") == b"run" and run.fence > reservation.fence
    run.hand_over.hands_to = Lock(redis_client, "hand-over", timeout=30)
    run.release()
    assert redis_client.get("hand-over") == b"reserved" and 0 < redis_client.pttl("hand-over") <= 30_000

    ended = Lock(redis_client, "hand-over:ended", timeout=0.2)
    assert ended.acquire(token="gone", blocking=False)
    ended.hand_over = HandOver(replaces=b"next", hands_to=Lock(redis_client, "hand-over:ended", timeout=30))
    wait_until(lambda: redis_client.get("hand-over:ended") is None, timeout=10)
    with pytest.raises(LockNotOwnedError):
        ended.release()
    assert redis_client.get("hand-over:ended") is None  # nothing handed over
