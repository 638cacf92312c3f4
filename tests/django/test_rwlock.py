"""``@locked(..., mode="read"|"write")`` on real views and functions, and the ``rwlock()`` /
``arwlock()`` factories, against the session's redis-server (several OS processes where the
readers' concurrency is what is tested)."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import AsyncClient, Client, RequestFactory, override_settings

from django_redis_coord import locked
from django_redis_coord.config.shortcuts import arwlock, rwlock
from django_redis_coord.core.exceptions import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    LockContended,
    LockNotOwnedError,
)
from django_redis_coord.core.listing import HolderListing
from django_redis_coord.decorator.contention import is_skipped
from django_redis_coord.decorator.locked import current_lock
from tests.django.test_decorators import entered, in_thread, wait_for
from tests.support.procs import run_processes

READ_VIEW = "tests.testapp.rw_views.read_report"

# Closing a response sends request_finished, whose receiver checks the database connections.
pytestmark = pytest.mark.django_db


def fence_of(response) -> int:
    return int(re.search(rb"fence=(\d+)", response.content).group(1))


def _get(path: str):
    from django.test import Client

    response = Client().get(path)
    return response.status_code, response.content.decode()


# -- views -----------------------------------------------------------------------------------------
def test_two_reader_processes_are_inside_together_and_a_writer_gets_409(redis_client):
    readers = in_thread(lambda: run_processes(_get, [("/t/rw/read/r/",), ("/t/rw/read/r/",)]))
    # Both readers are inside at once: neither leaves before go:r is set.
    wait_for(lambda: entered(redis_client, "r", 2))
    holders = HolderListing(redis_client).holder("report:r", "rw")
    assert [h.mode for h in holders] == ["read", "read"] and holders[0].used == 2
    assert {h.view for h in holders} == {READ_VIEW} and {h.label for h in holders} == {READ_VIEW}
    assert len({h.pid for h in holders}) == 2 and os.getpid() not in {h.pid for h in holders}
    writer = Client().get("/t/rw/write/r/")
    assert writer.status_code == 409 and b"another request holds it" in writer.content
    assert 25 <= int(writer["Retry-After"]) <= 30  # the readers' remaining TTL, rounded up
    redis_client.set("go:r", 1)
    results = readers()
    assert [status for status, _ in results] == [200, 200]
    assert sorted(int(body.split("fence=")[1].split()[0]) for _, body in results) == [h.fence for h in holders]
    assert all(body.startswith("read report:r fence=") and body.endswith("valid=True") for _, body in results)
    # Each reader's hold ended with its response: the writer now gets in, above both readers' fences.
    assert not redis_client.exists("report:r")
    written = Client().get("/t/rw/write/r/")
    assert written.status_code == 200 and written.content.startswith(b"write report:r")
    assert fence_of(written) > max(h.fence for h in holders)


def test_a_reader_arriving_while_a_writer_holds_gets_409(redis_client):
    writer = in_thread(lambda: Client().get("/t/rw/write/w/"))
    wait_for(lambda: entered(redis_client, "w"))
    [holder] = HolderListing(redis_client).holder("report:w", "rw")
    assert holder.mode == "write" and holder.usage == "writer"
    reader = Client().get("/t/rw/read/w/")
    assert reader.status_code == 409 and 25 <= int(reader["Retry-After"]) <= 30
    redis_client.set("go:w", 1)
    assert writer().status_code == 200
    assert Client().get("/t/rw/read/w/").status_code == 200


def test_async_views_let_two_readers_in_together_and_refuse_a_writer(redis_client):
    async def scenario():
        client = AsyncClient()
        readers = [asyncio.ensure_future(client.get("/t/rw/aread/a/")) for _ in range(2)]
        while not entered(redis_client, "a", 2):
            await asyncio.sleep(0.01)
        writer = await client.get("/t/rw/awrite/a/")
        redis_client.set("go:a", 1)
        return [await reader for reader in readers], writer

    readers, writer = asyncio.run(scenario())
    assert [reader.status_code for reader in readers] == [200, 200]
    assert len({fence_of(reader) for reader in readers}) == 2
    assert writer.status_code == 409 and 25 <= int(writer["Retry-After"]) <= 30
    # The responses were closed in worker threads: the holds ended there, with the sync client.
    wait_for(lambda: not redis_client.exists("report:a"), timeout=5)
    assert Client().get("/t/rw/write/a/").status_code == 200


def test_async_views_through_the_sync_handler_release_after_their_loop_ended(redis_client):
    redis_client.set("go:q", 1)
    for path in ("/t/rw/aread/q/", "/t/rw/awrite/q/", "/t/rw/aread/q/"):
        response = Client().get(path)
        assert response.status_code == 200, path
        assert not redis_client.exists("report:q"), path


def test_a_reader_is_released_by_the_thread_that_closes_its_response(redis_client, received):
    holds = []

    @locked("closing:{name}", mode="read", timeout=5)
    def view(request, name):
        holds.append(request.coord_lock)
        assert current_lock() is request.coord_lock
        return HttpResponse(b"ok")

    response = view(RequestFactory().get("/"), "x")
    assert redis_client.zcard("closing:x") == 1 and holds[0].valid
    closer = threading.Thread(target=response.close)
    closer.start()
    closer.join(10)
    assert not redis_client.exists("closing:x")
    [acquired] = [event for label, event in received if label == "acquired"]
    [released] = [event for label, event in received if label == "released"]
    assert acquired["instance"] is released["instance"] is holds[0] and holds[0].mode == "read"
    assert acquired["fence"] == released["fence"] and acquired["name"] == "closing:x"
    assert acquired["kind"] == "read hold of read-write lock"
    assert not holds[0].valid and holds[0].fence is None


@pytest.mark.parametrize("auto_renew", [False, True])
def test_an_async_writer_s_response_closed_from_a_worker_thread_releases_once(redis_client, received, auto_renew):
    """Not renewed: the closing thread releases with a sync twin of the lock (same token and
    fence); renewed: the release runs on the loop, which owns the renewal.  Either way once, and
    the signals speak for the view's own asyncio hold."""
    holds = []

    @locked("athread", mode="write", timeout=5, auto_renew=auto_renew)
    async def view(request):
        holds.append(current_lock())
        return HttpResponse(b"ok")

    async def scenario():
        response = await view(RequestFactory().get("/"))
        held = redis_client.zcard("athread")
        await asyncio.to_thread(response.close)
        for _ in range(200):
            if not redis_client.exists("athread"):
                break
            await asyncio.sleep(0.01)
        again = await view(RequestFactory().get("/"))
        again.close()
        await asyncio.sleep(0.05)
        return held, again.status_code

    held, again = asyncio.run(scenario())
    assert held == 1 and again == 200 and not redis_client.exists("athread")
    acquired = [event for label, event in received if label == "acquired"]
    released = [event for label, event in received if label == "released"]
    assert len(acquired) == 2 and len(released) == 2
    assert released[0]["fence"] == acquired[0]["fence"] < acquired[1]["fence"]
    assert [event["instance"] for event in acquired] == holds
    assert released[0]["instance"] is holds[0] and released[0]["name"] == "athread"
    assert not holds[0].valid and holds[0].fence is None


# -- functions, tasks, the context manager ---------------------------------------------------------
def test_functions_skip_or_raise_while_the_other_mode_is_held(redis_client):
    calls = []

    @locked("ledger:{day}", mode="write", timeout=10, on_contended="skip")
    def close_day(day):
        calls.append(current_lock().mode)
        return "closed"

    @locked("ledger:{day}", mode="read", timeout=10)
    def read_day(day):
        calls.append(current_lock().mode)
        return "read"

    with locked("ledger:{day}", mode="read", params={"day": "mon"}) as held:
        assert held.mode == "read" and held.fence
        assert read_day("mon") == "read"  # readers share
        skipped = close_day("mon")
        assert is_skipped(skipped) and skipped["lock"] == "ledger:mon" and 1 <= skipped["retry_after"] <= 60
        assert close_day("tue") == "closed"
    with locked("ledger:{day}", mode="write", params={"day": "mon"}):
        with pytest.raises(LockContended) as info:
            read_day("mon")
        assert 1 <= info.value.retry_after <= 60
    assert close_day("mon") == "closed"
    assert calls == ["read", "write", "write"]
    assert not redis_client.exists("ledger:mon") and not redis_client.exists("ledger:tue")


def test_async_functions_and_context_manager(redis_client):
    @locked("feed:{n}", mode="write")
    async def refresh(n):
        return current_lock().mode

    async def scenario():
        async with locked("feed:{n}", mode="read", params={"n": 1}) as held:
            assert held.mode == "read" and held.valid
            with pytest.raises(LockContended):
                await refresh(1)
            assert await refresh(2) == "write"
        return await refresh(1)

    assert asyncio.run(scenario()) == "write"


@pytest.mark.parametrize("options, error, message", [
    ({"mode": "read", "limit": 2}, InvalidLockArgument, "limit"),
    ({"mode": "write", "redlock": True}, InvalidLockArgument, "redlock"),
    ({"mode": "READ"}, InvalidLockArgument, "'read' or 'write'"),
    ({"mode": "upgrade"}, InvalidLockArgument, "'read' or 'write'"),
    ({"mode": ""}, InvalidLockArgument, "'read' or 'write'"),
    ({"mode": b"read"}, InvalidLockArgumentType, "'read' or 'write'"),
    ({"mode": True}, InvalidLockArgumentType, "'read' or 'write'"),
    ({"mode": ["read"]}, InvalidLockArgumentType, "'read' or 'write'"),
])
def test_bad_modes_are_refused_when_decorating(options, error, message):
    with pytest.raises(error, match=re.escape(message)):
        locked("report:{pk}", **options)


def test_mode_works_with_every_other_option_a_lock_takes(redis_client):
    @locked("opts", mode="write", timeout=5, wait=1, max_hold=60, label="opts view", status=423)
    def view(request):
        return HttpResponse(f"{request.coord_lock.mode} {request.coord_lock.fence}")

    response = view(RequestFactory().get("/"))
    assert response.status_code == 200 and response.content.startswith(b"write ")
    [holder] = HolderListing(redis_client).holder("opts", "rw")
    assert holder.label == "opts view" and holder.mode == "write"
    response.close()
    with locked("opts", mode="read"):
        started = time.monotonic()
        refused = view(RequestFactory().get("/"))  # waits `wait`, then the configured status
        assert refused.status_code == 423 and time.monotonic() - started >= 0.9
    with pytest.raises(ImproperlyConfigured, match="rollback_on_loss"):

        @locked("opts", mode="read", rollback_on_loss=True)
        async def async_view(request):
            pass


# -- the factories ---------------------------------------------------------------------------------
def test_rwlock_factory_applies_the_settings_and_sends_signals(redis_client, redis_url, received):
    with override_settings(DJANGO_REDIS_COORD={"URL": redis_url, "KEY_PREFIX": "shop", "DEFAULT_TIMEOUT": 7}):
        catalog = rwlock("catalog")
        assert catalog.name == "shop:catalog" and catalog.timeout == 7 and catalog.thread_local
        with catalog.read:
            assert 6000 <= redis_client.pttl("shop:catalog") <= 7000
            other = rwlock("catalog", timeout=3)
            assert not other.write.acquire(blocking=False)
    labels = [(label, event["instance"].mode) for label, event in received]
    assert labels == [("acquired", "read"), ("contended", "write"), ("released", "read")]
    assert {event["name"] for _, event in received} == {"catalog"}
    assert {event["key"] for _, event in received} == {"shop:catalog"}
    assert received[1][1]["retry_after"] == 7


def test_arwlock_factory(redis_client, received):
    async def scenario():
        catalog = arwlock("acatalog", timeout=5, thread_local=False)
        async with catalog.write:
            fence = catalog.write.fence
            # Shared by every task with thread_local=False: another task sees (and may release) it.
            assert await asyncio.create_task(_fence_in_task(catalog)) == fence
        return fence

    fence = asyncio.run(scenario())
    assert [label for label, _ in received] == ["acquired", "released"]
    assert received[0][1]["fence"] == fence and received[0][1]["name"] == "acatalog"


async def _fence_in_task(lock):
    return lock.write.fence


# -- an operator takes a reader's hold back ----------------------------------------------------------
def _reader_or_writer(role: str, name: str):
    import redis
    from django.conf import settings

    from django_redis_coord.signals import lock_lost

    flags = redis.Redis.from_url(settings.REDIS_URL)
    if role == "writer":
        while not flags.exists(f"fence:{name}"):
            time.sleep(0.01)
        writer = rwlock(name, timeout=5)
        acquired = writer.write.acquire(blocking_timeout=20)
        fence = writer.write.fence
        writer.write.release()
        return role, acquired, fence

    def lost(sender, **kwargs):
        flags.rpush(f"lost:{name}", f"{kwargs['name']} {kwargs['fence']} {kwargs['instance'].mode}")

    lock_lost.connect(lost, weak=False)
    reader = rwlock(name, timeout=1, auto_renew=True, label="reader")
    assert reader.read.acquire()
    flags.set(f"fence:{name}", reader.read.fence)
    deadline = time.monotonic() + 20
    while not flags.exists(f"lost:{name}") and time.monotonic() < deadline:
        time.sleep(0.01)
    valid = reader.read.valid
    try:
        reader.read.release()
        outcome = "released"
    except LockNotOwnedError:
        outcome = "not owned"
    return role, [item.decode() for item in flags.lrange(f"lost:{name}", 0, -1)], valid, outcome


def test_force_release_of_a_reader_in_another_process_signals_its_loss_and_lets_the_queued_writer_in(
        redis_client):
    runner = in_thread(lambda: run_processes(_reader_or_writer, [("reader", "ops"), ("writer", "ops")]))
    listing = HolderListing(redis_client)
    wait_for(lambda: [waiter.mode for waiter in listing.waiters("ops", "rw")] == ["write"])
    [reader] = listing.holder("ops", "rw")
    assert reader.mode == "read" and reader.label == "reader" and reader.fence == int(redis_client.get("fence:ops"))
    with pytest.raises(InvalidLockArgument, match="expected_fence"):
        listing.force_release("ops", "rw")
    assert not listing.force_release("ops", "rw", expected_fence=reader.fence - 1).released
    result = listing.force_release("ops", "rw", expected_fence=reader.fence)
    assert result.released and result.handed_off and result.fence_after > reader.fence
    outcomes = {outcome[0]: outcome[1:] for outcome in runner()}
    acquired, writer_fence = outcomes["writer"]
    assert acquired and writer_fence > result.fence_after
    lost, valid, released = outcomes["reader"]
    assert lost == [f"ops {reader.fence} read"] and not valid and released == "not owned"
