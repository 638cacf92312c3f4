"""Signals sent by the Django-facing locks, semaphores and @locked."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from django.test import Client, override_settings

from django_redis_coord import lock, locked, semaphore
from django_redis_coord.config.shortcuts import alock
from django_redis_coord.core.exceptions import LockNotOwnedError
from django_redis_coord.signals import lock_acquired
from tests.conftest import connect_hold_signals
from tests.django.test_decorators import entered, in_thread, wait_for


def lost_of(events, name):
    return [data for label, data in events if label == "lost" and data["name"] == name]


def kinds(events):
    return [label for label, _ in events]


def test_lock_acquire_contend_release(received, redis_client, redis_url):
    with override_settings(DJANGO_REDIS_COORD={"URL": redis_url, "KEY_PREFIX": "shop"}):
        holder = lock("orders", timeout=20)
        assert holder.acquire()
        other = lock("orders", timeout=20)
        assert not other.acquire(blocking=False)
        time.sleep(0.05)
        holder.release()
    assert kinds(received) == ["acquired", "contended", "released"]
    acquired, contended, released = (data for _, data in received)
    assert acquired["name"] == "orders" and acquired["key"] == "shop:orders" and acquired["kind"] == "lock"
    assert acquired["fence"] == released["fence"] > 0
    assert acquired["wait_time"] >= 0 and acquired["instance"] is holder
    assert contended["retry_after"] == 20 and contended["instance"] is other
    assert released["held_time"] >= 0.05


def test_waiting_acquire_reports_its_wait_time(received, redis_client):
    holder = lock("queue", timeout=20)
    assert holder.acquire()
    waiter = lock("queue", timeout=20, thread_local=False)
    result = in_thread(lambda: waiter.acquire(blocking=True, blocking_timeout=10))
    time.sleep(0.3)
    holder.release()
    assert result() is True
    waiter_acquired = [data for label, data in received if label == "acquired" and data["instance"] is waiter]
    assert waiter_acquired and waiter_acquired[0]["wait_time"] >= 0.25
    waiter.release()


def test_lock_lost_when_released_after_expiry(received, redis_client):
    holder = lock("expiring", timeout=0.2)
    assert holder.acquire()
    fence = holder.fence
    time.sleep(0.35)
    assert lock("expiring", timeout=5).acquire()
    with pytest.raises(LockNotOwnedError):
        holder.release()
    lost = [data for label, data in received if label == "lost"]
    assert len(lost) == 1 and lost[0]["fence"] == fence and lost[0]["instance"] is holder


def test_lock_lost_from_the_watchdog(received, redis_servers):
    (server,) = redis_servers(1)
    client = server.client(socket_timeout=0.2, socket_connect_timeout=0.2)
    holder = lock("renewed", timeout=0.6, auto_renew=True, client=client)
    assert holder.acquire()
    server.pause()
    try:
        wait_for(lambda: lost_of(received, "renewed"), timeout=10)
    finally:
        server.resume()
    lost = lost_of(received, "renewed")
    assert len(lost) == 1 and lost[0]["fence"] == holder.fence
    assert not holder.valid
    with pytest.raises(LockNotOwnedError):
        holder.release()
    assert len(lost_of(received, "renewed")) == 1


def test_semaphore_signals(received, redis_client):
    first = semaphore("pool", 1, timeout=10)
    second = semaphore("pool", 1, timeout=10)
    assert first.acquire()
    assert not second.acquire()
    assert first.release()
    assert kinds(received) == ["acquired", "contended", "released"]
    acquired, contended, released = (data for _, data in received)
    assert acquired["kind"] == "semaphore" and acquired["fence"] == released["fence"]
    assert 1 <= contended["retry_after"] <= 10


def test_async_lock_signals(received, redis_client):
    async def scenario():
        holder = alock("async-orders", timeout=5)
        assert await holder.acquire()
        assert not await alock("async-orders", timeout=5).acquire(blocking=False)
        await holder.release()

    asyncio.run(scenario())
    assert kinds(received) == ["acquired", "contended", "released"]


def test_locked_view_sends_the_signals(received, redis_client):
    first = in_thread(lambda: Client().get("/t/hold/sig/"))
    wait_for(lambda: entered(redis_client, "sig"))
    assert Client().get("/t/hold/sig/").status_code == 409
    redis_client.set("go:sig", 1)
    assert first().status_code == 200
    assert kinds(received) == ["acquired", "contended", "released"]
    assert {data["name"] for _, data in received} == {"hold:sig"}
    assert received[1][1]["retry_after"] == 30


def test_limited_view_sends_semaphore_signals(received, redis_client):
    redis_client.set("go:sem", 1)
    assert Client().get("/t/limited/sem/").status_code == 200
    assert kinds(received) == ["acquired", "released"]
    assert {data["kind"] for _, data in received} == {"semaphore"}


def test_a_failing_receiver_is_logged_and_the_lock_still_works(redis_client, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    lock_acquired.connect(broken, weak=False)
    try:
        with caplog.at_level(logging.ERROR, logger="django_redis_coord"):
            holder = lock("robust", timeout=5)
            assert holder.acquire()
            holder.release()
    finally:
        lock_acquired.disconnect(broken)
    assert any("receiver bug" in record.getMessage() for record in caplog.records)


def test_semaphore_permit_lost_from_the_watchdog_and_user_callback_still_runs(received, redis_servers):
    (server,) = redis_servers(1)
    client = server.client(socket_timeout=0.2, socket_connect_timeout=0.2)
    called = []
    pool = semaphore("renewed-pool", 2, timeout=0.6, auto_renew=True, client=client, on_lost=called.append)
    assert pool.acquire()
    fence = pool.fence
    server.pause()
    try:
        wait_for(lambda: lost_of(received, "renewed-pool") and called, timeout=10)
    finally:
        server.resume()
    lost = lost_of(received, "renewed-pool")
    assert len(lost) == 1 and lost[0]["kind"] == "semaphore" and lost[0]["fence"] == fence
    assert called[0].fence == fence


def test_an_async_acquire_cancelled_while_its_signal_is_delivered_gives_the_hold_back(redis_client):
    """Cancelled (a client going away under ASGI) after the grant, while a receiver of
    lock_acquired runs: nobody would ever release that hold, so the acquire gives it back."""
    from django_redis_coord.config.shortcuts import asemaphore

    async def slow_receiver(sender, **kwargs):
        await asyncio.sleep(1)

    lock_acquired.connect(slow_receiver, weak=False)
    try:
        async def scenario():
            for make in (lambda: alock("cancelled-in-signal", timeout=None),
                         lambda: asemaphore("cancelled-in-signal:permits", 1, timeout=None)):
                primitive = make()
                task = asyncio.ensure_future(primitive.acquire())
                await asyncio.sleep(0.3)  # granted; the receiver is running
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                for _ in range(200):
                    if await make().acquire(blocking=False):
                        break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError("the hold of the cancelled acquire was never given back")

        asyncio.run(scenario())
    finally:
        lock_acquired.disconnect(slow_receiver)


_connect_all = connect_hold_signals


@pytest.mark.django_db  # closing a response closes old database connections
def test_receivers_connected_after_the_decorator_and_after_unheard_requests_get_every_signal(redis_client, rf):
    """Nobody listening costs nothing, and is looked at on every request: a receiver connected
    later (after decorating, after requests nobody heard, during a hold) gets the same arguments."""
    from django.http import HttpResponse

    from django_redis_coord.core.lock.sync import Lock as CoreLock

    @locked("late:{pk}", timeout=20)
    def view(request, pk):
        return HttpResponse(b"ok")

    @locked("late-pool", limit=1, timeout=20)
    def limited(request):
        return HttpResponse(b"ok")

    for _ in range(2):  # unheard
        view(rf.get("/"), pk=1).close()
        limited(rf.get("/")).close()
    request = rf.get("/")
    response = view(request, pk=1)  # acquired unheard, released heard
    held = request.coord_lock
    time.sleep(0.05)
    events, disconnect = _connect_all()
    try:
        response.close()
        assert kinds(events) == ["released"]
        released = events[0][1]
        assert released["name"] == "late:1" and released["key"] == "late:1" and released["kind"] == "lock"
        assert released["held_time"] >= 0.05 and released["fence"] > 0 and released["sender"] is CoreLock
        assert released["instance"] is held

        events.clear()
        response = view(rf.get("/"), pk=2)
        holder = lock("late:2", timeout=20)
        assert not holder.acquire(blocking=False)
        response.close()
        limited(rf.get("/")).close()
        assert kinds(events) == ["acquired", "contended", "released", "acquired", "released"]
        (_, acquired), (_, contended), (_, released), (_, permit_acquired), (_, permit_released) = events
        assert acquired["name"] == "late:2" and acquired["fence"] == released["fence"] > 0
        assert acquired["wait_time"] >= 0 and released["held_time"] >= 0
        assert acquired["instance"] is released["instance"] and acquired["sender"] is CoreLock
        assert contended["instance"] is holder and 1 <= contended["retry_after"] <= 20
        assert permit_acquired["kind"] == permit_released["kind"] == "semaphore"
        assert permit_acquired["name"] == "late-pool" and permit_acquired["fence"] == permit_released["fence"]
    finally:
        disconnect()
    view(rf.get("/"), pk=3).close()  # disconnected: unheard again
    assert len(events) == 5


def test_an_async_hold_taken_unheard_is_heard_when_released(redis_client):
    events: list = []

    async def scenario():
        holder = alock("late-async", timeout=5)
        assert await holder.acquire()
        await asyncio.sleep(0.05)
        events.extend(_connect_all())
        await holder.release()

    asyncio.run(scenario())
    heard, disconnect = events
    disconnect()
    assert kinds(heard) == ["released"] and heard[0][1]["held_time"] >= 0.05 and heard[0][1]["name"] == "late-async"
