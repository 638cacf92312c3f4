"""``max_hold``: a hold the watchdog renews ends that long after it began, with the loss signal,
even while its holder hangs; against real redis-servers, the hung holder in another process."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from django_redis_coord import InvalidLockArgument, Lock, LockNotOwnedError, Redlock, Semaphore, locked
from django_redis_coord.asyncio import Lock as AsyncLock
from tests.procs import CTX

TIMEOUT = 0.6
MAX_HOLD = 1.5


def server_seconds(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def hang_holding(url: str, kind: str, name: str) -> None:
    """Child: take ``name`` (renewed, capped), note when in Redis, note the loss, then hang."""
    client = redis.Redis.from_url(url)

    def lost(_subject: object) -> None:
        client.set(f"{name}:lost-at", server_seconds(client))

    options = {"timeout": TIMEOUT, "auto_renew": True, "max_hold": MAX_HOLD, "on_lost": lost}
    if kind == "lock":
        held: object = Lock(client, name, **options)
        assert held.acquire()  # type: ignore[attr-defined]
    else:
        held = Semaphore(client, name, limit=1, **options)
        assert held.acquire("hung")  # type: ignore[attr-defined]
    client.set(f"{name}:held-at", server_seconds(client))
    time.sleep(30)  # hung: never releases


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_hung_holder_in_another_process_loses_its_hold_at_max_hold(redis_client, redis_url, kind):
    name = f"capped:{kind}"
    child = CTX.Process(target=hang_holding, args=(redis_url, kind, name), daemon=True)
    child.start()
    try:
        deadline = time.monotonic() + 10
        while redis_client.get(f"{name}:held-at") is None:
            assert time.monotonic() < deadline, "the child never took the hold"
            time.sleep(0.01)
        if kind == "lock":
            waiter: object = Lock(redis_client, name, timeout=5)
            assert waiter.acquire(blocking_timeout=10)  # type: ignore[attr-defined]
        else:
            waiter = Semaphore(redis_client, name, limit=1, timeout=5)
            assert waiter.acquire("next", blocking=True, blocking_timeout=10)  # type: ignore[attr-defined]
        got_at = server_seconds(redis_client)
        held_at = float(redis_client.get(f"{name}:held-at"))
        # Renewed (the TTL is 0.6 s) until the cap, not past it: 1.5 s after the grant.
        assert MAX_HOLD - 0.1 <= got_at - held_at <= MAX_HOLD + TIMEOUT
        deadline = time.monotonic() + 2
        while redis_client.get(f"{name}:lost-at") is None:
            assert time.monotonic() < deadline, "on_lost never ran in the hung holder's process"
            time.sleep(0.01)
        lost_at = float(redis_client.get(f"{name}:lost-at"))
        assert held_at + MAX_HOLD - 0.2 <= lost_at <= got_at + 0.05  # told no later than the next holder got it
    finally:
        child.kill()
        child.join(5)


def test_without_a_cap_the_same_holder_keeps_its_hold(redis_client):
    holder = Lock(redis_client, "uncapped", timeout=TIMEOUT, auto_renew=True)
    assert holder.acquire()
    time.sleep(MAX_HOLD + 0.3)
    assert holder.valid and not Lock(redis_client, "uncapped", timeout=1).acquire(blocking=False)
    holder.release()


def test_a_redlock_and_an_asyncio_lock_are_capped_too(redis_servers, redis_server, caplog):
    clients = [server.client() for server in redis_servers(3)]
    lost = threading.Event()
    held = Redlock(clients, "capped:redlock", timeout=TIMEOUT, auto_renew=True, max_hold=1.0,
                   on_lost=lambda _lock: lost.set())
    assert held.acquire()
    started = time.monotonic()
    assert lost.wait(5) and 0.9 <= time.monotonic() - started <= 1.0 + TIMEOUT
    assert "Ended redlock 'capped:redlock' at max_hold: held for 1s" in caplog.text
    assert Redlock(clients, "capped:redlock", timeout=5).acquire(blocking_timeout=2)
    with pytest.raises(LockNotOwnedError):  # it ended in Redis: as a lock whose TTL ran out
        held.release()

    async def scenario() -> float:
        client = redis_server.async_client()
        try:
            lost_at = asyncio.get_running_loop().create_future()
            lock = AsyncLock(client, "capped:alock", timeout=TIMEOUT, auto_renew=True, max_hold=1.0,
                             on_lost=lambda _lock: lost_at.set_result(time.monotonic()))
            assert await lock.acquire()
            began = time.monotonic()
            return await asyncio.wait_for(lost_at, 5) - began
        finally:
            await client.aclose()

    assert 0.9 <= asyncio.run(scenario()) <= 1.0 + TIMEOUT


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
    from django_redis_coord.rwlock import ReadWriteLock

    lost = threading.Event()
    lock = ReadWriteLock(redis_client, "capped:rw", timeout=TIMEOUT, auto_renew=True, max_hold=1.0,
                         on_lost=lambda _hold: lost.set())
    assert lock.write.acquire()
    began = time.monotonic()
    assert lost.wait(5) and 0.9 <= time.monotonic() - began <= 1.0 + TIMEOUT
    assert ReadWriteLock(redis_client, "capped:rw", timeout=5).read.acquire(blocking_timeout=2)
