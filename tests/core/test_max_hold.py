"""``max_hold``: a hold the watchdog renews ends that long after it began, with the loss signal,
even while its holder hangs; against real redis-servers, the hung holder in another process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

import pytest
import redis

from django_redis_coord import InvalidLockArgument, Lock, LockNotOwnedError, Redlock, Semaphore, locked
from django_redis_coord.asyncio import Lock as AsyncLock
from tests.support.procs import CTX

TIMEOUT = 0.6
MAX_HOLD = 1.5
#: The hung holder's TTL and cap: the watchdog renews about every third of the TTL, so that only a
#: stall of the holder's process longer than two thirds of it (2 s) loses the hold before its cap,
#: which is what that test is about.  With a 0.6 s TTL, a loaded run's 0.4 s stall lost a
#: semaphore's permit 1.2 s after it began, before its 1.5 s cap.
HUNG_TIMEOUT = 3.0
HUNG_MAX_HOLD = 4.5


def wait_for_key(client: redis.Redis, key: str, what: str) -> bytes:
    deadline = time.monotonic() + 10
    while (value := client.get(key)) is None:
        assert time.monotonic() < deadline, what
        time.sleep(0.01)
    return value


def hang_holding(url: str, kind: str, name: str) -> None:
    """Child: take ``name`` (renewed, capped), note when it asked (``time.monotonic()``, one clock
    for every process on Linux), note the loss and the hold's last local deadline, then hang."""
    client = redis.Redis.from_url(url)

    def lost(_subject: object) -> None:
        client.set(f"{name}:lost", 1)

    options = {"timeout": HUNG_TIMEOUT, "auto_renew": True, "max_hold": HUNG_MAX_HOLD, "on_lost": lost}
    began = time.monotonic()
    if kind == "lock":
        hold: Any = Lock(client, name, **options)
        assert hold.acquire()
    else:
        semaphore = Semaphore(client, name, limit=1, **options)
        assert semaphore.acquire("hung")
        hold = semaphore.permit("hung")
    client.set(f"{name}:began", repr(began))
    deadline = hold.deadline
    while hold.valid:  # the watchdog moves the deadline at each renewal, up to the cap
        deadline = hold.deadline or deadline
        time.sleep(0.01)
    client.set(f"{name}:deadline", repr(deadline))
    time.sleep(30)  # hung: never releases


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_hung_holder_in_another_process_loses_its_hold_at_max_hold(redis_client, redis_url, kind):
    name = f"capped:{kind}"
    child = CTX.Process(target=hang_holding, args=(redis_url, kind, name), daemon=True)
    child.start()
    try:
        wait_for_key(redis_client, f"{name}:began", "the child never took the hold")
        # Renewed (the TTL is 3 s) until the cap, not past it: the hung child would hold for
        # 30 s, the waiter gives up after 15.
        if kind == "lock":
            waiter: Any = Lock(redis_client, name, timeout=5)
            assert waiter.acquire(blocking_timeout=15)
        else:
            waiter = Semaphore(redis_client, name, limit=1, timeout=5)
            assert waiter.acquire("next", blocking=True, blocking_timeout=15)
        got = time.monotonic()
        # Renewed up to the cap: the hold ends no earlier than MAX_HOLD after it began.
        assert got - float(redis_client.get(f"{name}:began")) >= HUNG_MAX_HOLD
        wait_for_key(redis_client, f"{name}:lost", "on_lost never ran in the hung holder's process")
        # The holder's own deadline had passed (it was told) before the next holder got it.
        assert float(wait_for_key(redis_client, f"{name}:deadline", "the holder never saw its loss")) <= got
    finally:
        child.kill()
        child.join(5)


def test_without_a_cap_the_same_holder_keeps_its_hold(redis_client):
    holder = Lock(redis_client, "uncapped", timeout=TIMEOUT, auto_renew=True)
    assert holder.acquire()
    time.sleep(MAX_HOLD + 0.3)
    assert holder.valid and not Lock(redis_client, "uncapped", timeout=1).acquire(blocking=False)
    holder.release()


def ended_by_the_cap(remaining_ms: Callable[[], Optional[int]], acquired_at: float, max_hold: float,
                     ttl: float, within: float = 30.0) -> None:
    """Read the hold's remaining time in Redis (``remaining_ms()``: ms, ``None`` once it ended)
    until it ends, and check that it ends by the cap, whatever the machine's load.

    The cap is promised on the hold's end in Redis, not on when a callback runs: each renewal asks
    for at most what is left until ``max_hold`` after the hold began (``acquired_at`` is taken
    after ``acquire()`` returned, so no earlier than that), and a renewal executes in Redis before
    the TTL it renews ends (it is sent after the previous one came back, else it finds the hold
    gone), so the hold never ends later than ``max_hold + ttl`` after it began.  A read sent at
    ``before`` that sees ``left`` ms shows an end no earlier than ``before + left``.  Without the
    cap the renewals go on and a read past that bound sees the hold alive."""
    give_up = time.monotonic() + within
    while True:
        before = time.monotonic()
        left = remaining_ms()
        if left is None:
            return
        assert left >= 0, "a capped hold never loses its expiry"
        assert before + left / 1000 <= acquired_at + max_hold + ttl, (
            f"the hold is still renewed {before - acquired_at:.3f}s after its grant, past max_hold={max_hold}")
        assert time.monotonic() < give_up, "the hold never ended"
        time.sleep(0.01)


def test_a_redlock_and_an_asyncio_lock_are_capped_too(redis_servers, redis_server):
    # A Redlock asks each master within node_timeout: give the masters time enough on a loaded
    # machine (node_timeout must stay well under the TTL, so the TTL grows with it).
    ttl, max_hold = 2.0, 3.0
    clients = [server.client() for server in redis_servers(3)]
    lost = threading.Event()
    held = Redlock(clients, "capped:redlock", timeout=ttl, node_timeout=0.5, auto_renew=True, max_hold=max_hold,
                   on_lost=lambda _lock: lost.set())
    assert held.acquire(blocking_timeout=30)
    acquired_at = time.monotonic()

    def on_a_majority() -> Optional[int]:
        left = [client.pttl("capped:redlock") for client in clients]
        alive = sorted(ms for ms in left if ms != -2)
        # The Redlock holds while a majority holds: its end is the majority's earliest end.
        return alive[-2] if len(alive) >= 2 else None

    ended_by_the_cap(on_a_majority, acquired_at, max_hold, ttl)
    assert lost.wait(30), "the holder was not told of the end"  # it never released: the cap ended it
    assert not held.valid
    assert Redlock(clients, "capped:redlock", timeout=5, node_timeout=0.5).acquire(blocking_timeout=30)
    with pytest.raises(LockNotOwnedError):  # it ended in Redis: as a lock whose TTL ran out
        held.release()

    async def scenario() -> None:
        client = redis_server.async_client()
        try:
            lost_at = asyncio.get_running_loop().create_future()
            lock = AsyncLock(client, "capped:alock", timeout=TIMEOUT, auto_renew=True, max_hold=1.0,
                             on_lost=lambda _lock: lost_at.set_result(True))
            assert await lock.acquire()
            acquired_at = time.monotonic()
            give_up = acquired_at + 30
            while True:  # as ended_by_the_cap, with the reads awaited
                before = time.monotonic()
                left = await client.pttl("capped:alock")
                if left == -2:
                    break
                assert left >= 0 and before + left / 1000 <= acquired_at + 1.0 + TIMEOUT
                assert time.monotonic() < give_up, "the hold never ended"
                await asyncio.sleep(0.01)
            await asyncio.wait_for(lost_at, 30)
            assert not lock.valid
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_max_hold_is_checked(redis_client):
    with pytest.raises(InvalidLockArgument, match="needs auto_renew"):
        Lock(redis_client, "bad", timeout=5, max_hold=60)
    with pytest.raises(InvalidLockArgument, match="at least timeout"):
        Semaphore(redis_client, "bad", limit=1, timeout=5, auto_renew=True, max_hold=2)
    with pytest.raises(InvalidLockArgument):
        Lock(redis_client, "bad", timeout=5, auto_renew=True, max_hold=-1)
    with pytest.raises(InvalidLockArgument, match="needs auto_renew"):
        locked("bad", timeout=5, auto_renew=False, max_hold=60)
    with pytest.raises(InvalidLockArgument, match="at least timeout"):  # when decorating, not per request
        locked("bad", timeout=60, max_hold=30)


@pytest.mark.django_db
def test_a_locked_view_that_hangs_past_max_hold_lets_the_next_caller_in(redis_client, rf):
    from django.http import HttpResponse

    from django_redis_coord import lock

    entered = threading.Event()

    @locked("capped-view", timeout=TIMEOUT, auto_renew=True, max_hold=1.0)
    def view(request):
        entered.set()
        time.sleep(2.0)
        return HttpResponse(b"late")

    outcome: list = []
    caller = threading.Thread(target=lambda: outcome.append(view(rf.get("/"))))
    caller.start()
    try:
        assert entered.wait(5)
        began = time.monotonic()
        other = lock("capped-view", timeout=5)
        assert other.acquire(blocking_timeout=5)
        assert 0.8 <= time.monotonic() - began <= 1.0 + TIMEOUT
        other.release()
    finally:
        caller.join(10)
    assert outcome


def test_a_read_write_lock_hold_is_capped(redis_client):
    from django_redis_coord.core.rwlock.sync import ReadWriteLock

    lost = threading.Event()
    lock = ReadWriteLock(redis_client, "capped:rw", timeout=TIMEOUT, auto_renew=True, max_hold=1.0,
                         on_lost=lambda _hold: lost.set())
    assert lock.write.acquire()
    acquired_at = time.monotonic()

    def remaining() -> Optional[int]:
        holders = lock.holders()
        return holders[0].ttl_ms if holders else None

    ended_by_the_cap(remaining, acquired_at, 1.0, TIMEOUT)
    assert lost.wait(30), "the holder was not told of the end"
    assert not lock.write.valid
    assert ReadWriteLock(redis_client, "capped:rw", timeout=5).read.acquire(blocking_timeout=30)
