"""@locked(redlock=True) and the redlock()/aredlock() factories over three real, independent masters."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
import redis
from django.conf import settings as django_settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import AsyncClient, Client, override_settings
from django.urls import path

from django_redis_coord import NO_EXPIRY, Lock, QuorumUnavailable, aredlock, lock_holder, locked
from django_redis_coord.asyncio import Redlock as AsyncCoreRedlock
from django_redis_coord.config.shortcuts import redlock
from django_redis_coord.config.signalling import app_name
from django_redis_coord.core.exceptions import InvalidLockArgument, InvalidLockArgumentType, LockNotOwnedError
from django_redis_coord.core.redlock.sync import Redlock as CoreRedlock
from django_redis_coord.decorator.locked import LockContended, current_lock, redlock_users
from tests.django.test_decorators import entered, in_thread, wait_for
from tests.support.procs import run_processes


# -- fixtures --------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _forget_redlock_users():
    """Views decorated here must not make other modules' system checks report E017."""
    before = dict(redlock_users)
    yield
    for wrapper in list(redlock_users):
        if wrapper not in before:
            del redlock_users[wrapper]


@pytest.fixture
def three(redis_servers, redis_client):
    """Three independent masters configured as REDLOCK["MASTERS"] (and the session Redis as URL)."""
    servers = redis_servers(3)
    # Fresh masters are dialled on first use: give them room on a loaded CI machine.
    redlock = {"MASTERS": [server.url for server in servers], "NODE_TIMEOUT": 0.5}
    value = {"URL": django_settings.REDIS_URL, "REDLOCK": redlock}
    with override_settings(DJANGO_REDIS_COORD=value):
        yield servers


def flags() -> redis.Redis:
    """The session Redis, where views note that they entered and wait for their go."""
    return redis.Redis.from_url(django_settings.REDIS_URL)


def hold_until_go(name: str) -> None:
    client = flags()
    client.incr(f"entered:{name}")
    wait_for(lambda: client.get(f"go:{name}") is not None, timeout=30)


async def ahold_until_go(name: str) -> None:
    client = flags()
    client.incr(f"entered:{name}")
    deadline = time.monotonic() + 30
    while client.get(f"go:{name}") is None:
        assert time.monotonic() < deadline, "no go in time"
        await asyncio.sleep(0.01)


def holders(servers, key: str) -> list:
    found = []
    for server in servers:
        client = server.client(socket_timeout=2)
        try:
            found.append(client.get(key))
        finally:
            client.close()
    return found


class URLConf:
    """A URLconf object (ROOT_URLCONF may be a module or any hashable object with ``urlpatterns``)."""

    def __init__(self, *patterns) -> None:
        self.urlpatterns = list(patterns)


urlconf = URLConf


def sync_views():
    @locked("report:{pk}", timeout=30, redlock=True)
    def report(request, pk):
        hold_until_go(f"report:{pk}")
        return HttpResponse(f"report:{pk} fence={request.coord_lock.fence}")

    return urlconf(path("report/<str:pk>/", report))


def assert_conflict(response, timeout: float = 30) -> None:
    assert response.status_code == 409
    retry_after = int(response["Retry-After"])
    # The holder took the lock for `timeout` seconds a moment ago: its remaining time rounded up.
    assert timeout - 5 <= retry_after <= timeout


# -- two concurrent requests ---------------------------------------------------------------------
def test_two_concurrent_requests_one_200_one_409_with_retry_after(three, redis_client):
    with override_settings(ROOT_URLCONF=sync_views()):
        first = in_thread(lambda: Client().get("/report/7/"))
        wait_for(lambda: entered(redis_client, "report:7"))
        # The hold is on every master, under one token.
        tokens = holders(three, "report:7")
        assert tokens[0] is not None and tokens == [tokens[0]] * 3
        second = Client().get("/report/7/")
        assert_conflict(second)
        assert b"another request holds it" in second.content
        redis_client.set("go:report:7", 1)
        response = first()
        assert response.status_code == 200
        fence = int(response.content.split(b"fence=")[1])
        assert fence > 0
        # Released on all masters once the response finished; the next request gets in.
        assert holders(three, "report:7") == [None] * 3
        third = Client().get("/report/7/")
        assert third.status_code == 200
        assert int(third.content.split(b"fence=")[1]) > fence


def _request_in_child(pk: str, role: str):
    client = flags()
    if role == "second":
        wait_for(lambda: entered(client, f"report:{pk}"))
    response = Client().get(f"/report/{pk}/")
    if role == "second":
        client.set(f"go:report:{pk}", 1)
    return role, response.status_code, response.get("Retry-After")


def test_two_processes_one_200_one_409_with_retry_after(three, redis_client):
    with override_settings(ROOT_URLCONF=sync_views()):
        results = {
            role: (status, retry)
            for role, status, retry in run_processes(_request_in_child, [("p", "first"), ("p", "second")])
        }
    assert results["first"] == (200, None)
    status, retry_after = results["second"]
    assert status == 409 and 25 <= int(retry_after) <= 30
    assert holders(three, "report:p") == [None] * 3


def test_retry_after_comes_from_the_masters(three, redis_client, rf):
    # The holder's lease (30 s) is longer than the refused view's own timeout (5 s): the masters say so.
    with redlock("long", timeout=30):

        @locked("long", timeout=5, redlock=True)
        def view(request):
            return HttpResponse("ran")

        response = view(rf.get("/"))
        assert_conflict(response, 30)

    # A holder without expiry on two masters: they cannot tell, the view's timeout is the bound.
    for server in three[:2]:
        Lock(server.client(), "forever", timeout=None).acquire()

    @locked("forever", timeout=7, redlock=True)
    def other(request):
        return HttpResponse("ran")

    response = other(rf.get("/"))
    assert response.status_code == 409 and response["Retry-After"] == "7"


@pytest.mark.django_db  # closing a response sends request_finished, which checks the database
def test_wait_lets_the_second_request_in_after_the_first(three, redis_client, rf):
    @locked("queued", timeout=30, wait=10, redlock=True)
    def view(request):
        hold_until_go("queued")
        return HttpResponse(str(request.coord_lock.fence))

    first = in_thread(lambda: view(rf.get("/")))
    wait_for(lambda: entered(redis_client, "queued"))
    second = in_thread(lambda: view(rf.get("/")))
    time.sleep(0.3)
    redis_client.set("go:queued", 1)
    response = first()
    response.close()  # the response closer releases the hold
    later = second()
    later.close()
    assert response.status_code == later.status_code == 200
    assert int(later.content) > int(response.content)


# -- async views ---------------------------------------------------------------------------------
def async_views():
    @locked("aview:{pk}", timeout=30, redlock=True)
    async def aview(request, pk):
        assert isinstance(request.coord_lock, AsyncCoreRedlock)
        await ahold_until_go(f"aview:{pk}")
        return HttpResponse(f"fence={request.coord_lock.fence}")

    return urlconf(path("aview/<str:pk>/", aview))


def test_async_view_two_concurrent_requests(three, redis_client):
    async def scenario():
        client = AsyncClient()
        first = asyncio.ensure_future(client.get("/aview/1/"))
        deadline = time.monotonic() + 15
        while not entered(redis_client, "aview:1"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        tokens = holders(three, "aview:1")
        second = await client.get("/aview/1/")
        redis_client.set("go:aview:1", 1)
        return await first, second, tokens

    with override_settings(ROOT_URLCONF=async_views()):
        first, second, tokens = asyncio.run(scenario())
    assert first.status_code == 200 and first.content.startswith(b"fence=")
    assert tokens[0] is not None and tokens == [tokens[0]] * 3
    assert_conflict(second)
    wait_for(lambda: holders(three, "aview:1") == [None] * 3, timeout=5)


def test_async_view_through_the_sync_handler_releases(three, redis_client):
    # The sync handler runs the view in a loop of its own, closed before the response is:
    # the hold is released through the sync masters under the same token.
    redis_client.set("go:aview:2", 1)
    with override_settings(ROOT_URLCONF=async_views()):
        fences = []
        for _ in range(2):
            response = Client().get("/aview/2/")
            assert response.status_code == 200
            fences.append(int(response.content.split(b"=")[1]))
    assert fences[1] > fences[0]
    assert holders(three, "aview:2") == [None] * 3


# -- plain functions and the context manager -----------------------------------------------------
def test_plain_function_and_context_manager(three):
    @locked("job:{n}", timeout=10, redlock=True)
    def job(n):
        held = current_lock()
        assert isinstance(held, CoreRedlock) and held.valid
        return held.fence

    assert job(1) > 0
    with locked("job:{n}", params={"n": 2}, timeout=10, redlock=True) as held:
        assert isinstance(held, CoreRedlock)
        fence = held.fence
        assert [lock_holder(server.client(), "job:2").fence for server in three] == [fence] * 3
        with pytest.raises(LockContended) as info:
            job(2)
        assert 5 <= info.value.retry_after <= 10
    assert holders(three, "job:2") == [None] * 3
    assert held.fence is None  # released
    assert job(2) > fence


def test_async_plain_function_and_context_manager(three):
    @locked("ajob:{n}", timeout=10, redlock=True)
    async def job(n):
        return current_lock().fence

    async def scenario():
        async with locked("ajob:{n}", params={"n": 1}, timeout=10, redlock=True) as held:
            assert isinstance(held, AsyncCoreRedlock)
            with pytest.raises(LockContended):
                await job(1)
            other = await job(2)
            fence = held.fence
        return fence, other, await job(1)

    fence, other, later = asyncio.run(scenario())
    assert fence > 0 and other > 0 and later > fence
    assert holders(three, "ajob:1") == [None] * 3


def test_factories_use_the_settings(three, redis_client):
    # NODE_TIMEOUT: each master has 5 s to answer (the default 0.1 s was missed by a loaded run's
    # fresh masters: no test here is about how fast they answer).
    value = {"URL": django_settings.REDIS_URL, "KEY_PREFIX": "shop", "DEFAULT_TIMEOUT": 20,
             "REDLOCK": {"MASTERS": [server.url for server in three], "NODE_TIMEOUT": 5}}
    with override_settings(DJANGO_REDIS_COORD=value):
        with redlock("ledger") as held:
            assert held.name == "shop:ledger" and app_name(held) == "ledger" and held.timeout == 20
            assert held.node_timeout == 5
            assert holders(three, "shop:ledger") == [held.local.token] * 3
        assert holders(three, "shop:ledger") == [None] * 3

        async def scenario():
            async with aredlock("ledger", timeout=30) as aheld:
                assert isinstance(aheld, AsyncCoreRedlock)
                assert aheld.timeout == 30 and aheld.node_timeout == 5
                return aheld.fence, holders(three, "shop:ledger")

        fence, during = asyncio.run(scenario())
        assert fence > 0 and during[0] is not None and during == [during[0]] * 3
        assert redlock.__module__ == aredlock.__module__ == "django_redis_coord.config.shortcuts"
    with override_settings(DJANGO_REDIS_COORD={**value, "DEFAULT_TIMEOUT": "never"}):
        with pytest.raises(InvalidLockArgument, match="always expires"):
            redlock("ledger")


# -- masters down --------------------------------------------------------------------------------
@pytest.mark.django_db  # closing a response sends request_finished, which checks the database
def test_one_of_three_masters_down_still_works(three, redis_client, rf):
    three[2].kill()

    @locked("degraded", timeout=10, redlock=True)
    def view(request):
        return HttpResponse(str(request.coord_lock.fence))

    response = view(rf.get("/"))
    assert response.status_code == 200 and int(response.content) > 0
    response.close()

    # And contention is still detected with a master missing.
    with locked("degraded", timeout=10, redlock=True):
        assert view(rf.get("/")).status_code == 409


def test_two_of_three_masters_down_fail_closed_or_open(three, redis_client, rf, caplog):
    three[1].kill()
    three[2].kill()
    ran = []

    @locked("outage", timeout=10, redlock=True)
    def closed(request):
        ran.append("closed")
        return HttpResponse("ran")

    @locked("outage", timeout=10, redlock=True, fail_open=True)
    def opened(request):
        ran.append(request.coord_lock)
        return HttpResponse("ran unlocked")

    started = time.monotonic()
    response = closed(rf.get("/"))
    assert response.status_code == 503 and b"unavailable" in response.content
    # Refused within the per-master budget (100 ms by default), with generous slack.
    assert time.monotonic() - started < 5
    assert ran == []
    assert any("fail closed" in record.getMessage() for record in caplog.records)
    response = opened(rf.get("/"))
    assert response.status_code == 200 and response.content == b"ran unlocked"
    assert ran == [None]
    assert any("fail open" in record.getMessage() for record in caplog.records)
    # Plain functions and the context manager raise the quorum error unless they fail open.
    with pytest.raises(QuorumUnavailable) as info:
        with locked("outage", timeout=10, redlock=True):
            pass
    assert len(info.value.failures) == 2
    with locked("outage", timeout=10, redlock=True, fail_open=True) as held:
        assert held is None
    # The failure left nothing behind on the living master.
    assert holders(three[:1], "outage") == [None]


def test_two_of_three_down_fail_closed_on_an_async_view(three, redis_client):
    three[0].kill()
    three[1].kill()

    @locked("aoutage", timeout=10, redlock=True)
    async def view(request):
        return HttpResponse("ran")

    with override_settings(ROOT_URLCONF=urlconf(path("aoutage/", view))):
        response = asyncio.run(AsyncClient().get("/aoutage/"))
    assert response.status_code == 503


# -- signals -------------------------------------------------------------------------------------
@pytest.mark.django_db  # closing a response sends request_finished, which checks the database
def test_signals_fire_with_fences(three, redis_client, rf, received):
    @locked("signalled", timeout=30, redlock=True)
    def view(request):
        hold_until_go("signalled")
        return HttpResponse(str(request.coord_lock.fence))

    first = in_thread(lambda: view(rf.get("/")))
    wait_for(lambda: entered(redis_client, "signalled"))
    master_fences = [lock_holder(server.client(), "signalled").fence for server in three]
    # Each master's holder info names the view (what the listing, the admin and the command show).
    assert [lock_holder(server.client(), "signalled").view for server in three] == [
        f"{__name__}.test_signals_fire_with_fences.<locals>.view"] * 3
    assert view(rf.get("/")).status_code == 409
    redis_client.set("go:signalled", 1)
    response = first()
    response.close()
    assert [label for label, _ in received] == ["acquired", "contended", "released"]
    acquired, contended, released = (data for _, data in received)
    fence = int(response.content)
    assert acquired["fence"] == released["fence"] == fence and master_fences == [fence] * 3
    assert acquired["kind"] == "redlock" and acquired["name"] == "signalled"
    assert isinstance(acquired["instance"], CoreRedlock)
    assert 25 <= contended["retry_after"] <= 30 and released["held_time"] > 0


def test_lost_signal_when_the_hold_expired(three, redis_client, received):
    # Each master has 5 s to answer (a 1 s TTL allowed a quarter of it, which a loaded run's masters
    # missed: no test here is about how fast they answer), and the TTL runs out when the test says
    # so: the hold's key on every master is made to expire now, as a TTL that ran out would.
    holder = redlock("short", timeout=30, node_timeout=5)
    assert holder.acquire()
    fence = holder.fence
    for server in three:
        client = server.client()
        assert client.pexpire("short", 1)
        client.close()
    wait_for(lambda: holders(three, "short") == [None] * 3, timeout=120)
    taker = redlock("short", timeout=30, node_timeout=5)
    assert taker.acquire(blocking=False)
    with pytest.raises(LockNotOwnedError):
        holder.release()
    lost = [data for label, data in received if label == "lost"]
    assert len(lost) == 1 and lost[0]["fence"] == fence and lost[0]["instance"] is holder
    assert taker.fence > fence
    taker.release()


def test_lost_signal_from_the_watchdog(three, redis_client, received):
    # Two masters stop answering: the watchdog cannot renew on a quorum and reports the loss.
    holder = redlock("watched", timeout=1, auto_renew=True)
    assert holder.acquire()
    three[1].pause()
    three[2].pause()
    try:
        wait_for(lambda: any(label == "lost" for label, _ in received), timeout=10)
    finally:
        three[1].resume()
        three[2].resume()
    lost = [data for label, data in received if label == "lost"]
    assert len(lost) == 1 and lost[0]["fence"] == holder.fence and not holder.valid
    # The resumed masters are dialled again; once a quorum answers, the release says it was lost.
    deadline = time.monotonic() + 10
    while True:
        try:
            holder.release()
        except QuorumUnavailable:
            assert time.monotonic() < deadline
            time.sleep(0.1)
            continue
        except LockNotOwnedError:
            break
        raise AssertionError("a lost hold was released without an error")
    assert len([label for label, _ in received if label == "lost"]) == 1


def test_async_signals(three, redis_client, received):
    async def scenario():
        holder = aredlock("asig", timeout=10)
        assert await holder.acquire()
        assert not await aredlock("asig", timeout=10).acquire(blocking=False)
        fence = holder.fence
        await holder.release()
        return fence

    fence = asyncio.run(scenario())
    assert [label for label, _ in received] == ["acquired", "contended", "released"]
    assert received[0][1]["fence"] == received[2][1]["fence"] == fence


# -- refusals when decorating, and the system check ------------------------------------------------
def test_incompatible_options_fail_at_decoration(three):
    with pytest.raises(InvalidLockArgument, match="not a semaphore"):
        locked("x", redlock=True, limit=2)
    with pytest.raises(InvalidLockArgument, match="always expires"):
        locked("x", redlock=True, timeout=NO_EXPIRY)
    with pytest.raises(InvalidLockArgumentType):
        locked("x", redlock="yes")
    value = {"URL": django_settings.REDIS_URL, "DEFAULT_TIMEOUT": NO_EXPIRY,
             "REDLOCK": {"MASTERS": [server.url for server in three]}}
    with override_settings(DJANGO_REDIS_COORD=value):
        with pytest.raises(InvalidLockArgument, match="DEFAULT_TIMEOUT"):

            @locked("x", redlock=True)
            def view(request):
                pass

        @locked("x", redlock=True, timeout=5)  # an explicit timeout is fine
        def fine(request):
            pass


def test_missing_masters_fail_at_decoration_and_in_the_system_check(three, redis_client):
    with override_settings(DJANGO_REDIS_COORD={"URL": django_settings.REDIS_URL}):
        with pytest.raises(ImproperlyConfigured, match="REDLOCK"):

            @locked("x", redlock=True)
            def view(request):
                pass

        with pytest.raises(ImproperlyConfigured, match="REDLOCK"):
            with locked("x", redlock=True):
                pass
        assert "django_redis_coord.E017" not in {m.id for m in checks.run_checks(tags=["django_redis_coord"])}

    @locked("x", redlock=True)  # masters configured (the fixture's settings)
    def configured(request):
        pass

    assert checks.run_checks(tags=["django_redis_coord"]) == []
    # The masters went away from the settings after decorating: the system check says so.
    with override_settings(DJANGO_REDIS_COORD={"URL": django_settings.REDIS_URL}):
        found = [m for m in checks.run_checks(tags=["django_redis_coord"]) if m.id == "django_redis_coord.E017"]
        assert len(found) == 1 and "configured" in found[0].msg and "MASTERS" in found[0].hint
        del configured
        gc.collect()
        assert checks.run_checks(tags=["django_redis_coord"]) == []


def test_node_timeout_setting_is_capped_at_a_quarter_of_the_timeout(three):
    from django_redis_coord.config.shortcuts import redlock

    assert redlock("capped", timeout=10).node_timeout == 0.5
    assert redlock("capped", timeout=1).node_timeout == 0.25
    assert redlock("capped", timeout=10, node_timeout=0.05).node_timeout == 0.05
