"""@locked on real views through Django's test clients, against the session's redis-server."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from django import urls
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.test import AsyncClient, Client, override_settings
from django.views.decorators.cache import cache_page

from benchmarks.common import CommandMonitor
from django_redis_coord import locked
from django_redis_coord.core.exceptions import InvalidLockArgument, LockLostError
from django_redis_coord.decorator.locked import KeyTemplateError, LockContended, MissingKeyValue, current_lock
from django_redis_coord.signals import lock_acquired, lock_released
from tests.support.procs import CTX, run_processes
from tests.testapp.models import Account


def wait_for(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def entered(client, name: str, count: int = 1) -> bool:
    return int(client.get(f"entered:{name}") or 0) >= count


def in_thread(target):
    box: dict = {}

    def run():
        try:
            box["value"] = target()
        except BaseException as exc:  # reported by result()
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()

    def result():
        thread.join(30)
        assert not thread.is_alive(), "request thread did not finish"
        if "error" in box:
            raise box["error"]
        return box["value"]

    return result


def contend(redis_client, path: str, name: str):
    """First request holds ``path``; a second one arrives while it is inside; then let go."""
    first = in_thread(lambda: Client().get(path))
    wait_for(lambda: entered(redis_client, name))
    second = Client().get(path)
    redis_client.set(f"go:{name}", 1)
    return first(), second


def assert_conflict(response, timeout: float = 30) -> None:
    assert response.status_code == 409
    retry_after = int(response["Retry-After"])
    # The holder took the lock for `timeout` seconds a moment ago: the remaining TTL rounded up.
    assert timeout - 5 <= retry_after <= timeout


# -- two concurrent requests ---------------------------------------------------------------------
def test_threads_one_200_one_409_with_retry_after(redis_client):
    first, second = contend(redis_client, "/t/hold/a/", "a")
    assert first.status_code == 200
    assert first.content.startswith(b"hold:a fence=")
    assert_conflict(second)
    assert b"another request holds it" in second.content
    # Released once the first response finished: the next request gets in.
    redis_client.delete("go:a", "entered:a")
    redis_client.set("go:a", 1)
    assert Client().get("/t/hold/a/").status_code == 200


def _request_in_child(path: str, name: str, role: str):
    import redis
    from django.conf import settings

    flags = redis.Redis.from_url(settings.REDIS_URL)
    if role == "second":
        wait_for(lambda: entered(flags, name))
    response = Client().get(path)
    if role == "second":
        flags.set(f"go:{name}", 1)
    return role, response.status_code, response.get("Retry-After")


def test_processes_one_200_one_409_with_retry_after(redis_client):
    results = dict(
        (role, (status, retry))
        for role, status, retry in run_processes(
            _request_in_child, [("/t/hold/p/", "p", "first"), ("/t/hold/p/", "p", "second")]
        )
    )
    assert results["first"] == (200, None)
    status, retry_after = results["second"]
    assert status == 409
    assert 25 <= int(retry_after) <= 30


def test_processes_racing_at_once_exactly_one_wins(redis_client):
    barrier = CTX.Barrier(3)

    def racer(index: int):
        import redis
        from django.conf import settings

        barrier.wait(10)
        response = Client().get("/t/hold/race/")
        if response.status_code != 200:
            redis.Redis.from_url(settings.REDIS_URL).incr("refused:race")
        return response.status_code

    runner = in_thread(lambda: run_processes(racer, [(0,), (1,), (2,)]))
    # All three are on their way; once one is inside and the others were refused, let it go.
    wait_for(lambda: entered(redis_client, "race") and int(redis_client.get("refused:race") or 0) >= 2)
    redis_client.set("go:race", 1)
    statuses = sorted(runner())
    assert statuses == [200, 409, 409]


# -- views of every shape ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, prefix",
    [("/t/cbv/c/", b"cbv:c"), ("/t/cbv-method/c/", b"cbvm:c"), ("/t/cbv-dispatch/c/", b"cbvd:c")],
)
def test_class_based_views(redis_client, path, prefix):
    first, second = contend(redis_client, path, "c")
    assert first.status_code == 200 and first.content.startswith(prefix)
    assert_conflict(second)


def async_contend(redis_client, path: str, name: str):
    """The asyncio form of :func:`contend`, through ``AsyncClient``."""

    async def scenario():
        client = AsyncClient()
        first = asyncio.ensure_future(client.get(path))
        while not entered(redis_client, name):
            await asyncio.sleep(0.01)
        second = await client.get(path)
        redis_client.set(f"go:{name}", 1)
        return await first, second

    return asyncio.run(scenario())


def test_async_view_two_concurrent_requests(redis_client):
    first, second = async_contend(redis_client, "/t/ahold/x/", "x")
    assert first.status_code == 200 and first.content.startswith(b"hold:x fence=")
    assert_conflict(second)
    # The async view released its lock: a sync request to the same key gets in.
    redis_client.delete("entered:x")
    assert Client().get("/t/hold/x/").status_code == 200


def test_async_view_uses_asyncio_client_without_thread_hop(redis_client):
    seen = {}

    @locked("nohop")
    async def view(request):
        seen["thread"] = threading.get_ident()
        seen["lock"] = type(current_lock()).__mro__
        return "done"

    async def scenario():
        from django.test import RequestFactory

        seen["loop_thread"] = threading.get_ident()
        return await view(RequestFactory().get("/"))

    assert asyncio.run(scenario()) == "done"
    assert seen["thread"] == seen["loop_thread"]
    from django_redis_coord.core.lock.aio import Lock as AsyncLock

    assert AsyncLock in seen["lock"]


def test_async_class_based_view(redis_client):
    first, second = async_contend(redis_client, "/t/acbv/y/", "y")
    assert first.status_code == 200 and first.content.startswith(b"acbv:y")
    assert_conflict(second)


# -- lifetime ------------------------------------------------------------------------------------
def test_streaming_response_holds_until_stream_closed(redis_client):
    response = Client().get("/t/stream/s/")
    assert response.status_code == 200
    assert redis_client.exists("stream:s"), "the lock must outlive the view while the stream is open"
    assert Client().get("/t/stream/s/").status_code == 409
    assert b"".join(response.streaming_content) == b"0\n1\n2\n"
    assert not redis_client.exists("stream:s")
    follow_up = Client().get("/t/stream/s/")
    assert follow_up.status_code == 200
    assert b"".join(follow_up.streaming_content) == b"0\n1\n2\n"


def test_async_streaming_response_holds_until_stream_closed(redis_client):
    async def scenario():
        client = AsyncClient()
        response = await client.get("/t/astream/s2/")
        held_during = bool(redis_client.exists("stream:s2"))
        refused = (await client.get("/t/astream/s2/")).status_code
        body = b"".join([chunk async for chunk in response.streaming_content])
        await asyncio.sleep(0)
        return held_during, refused, body

    held_during, refused, body = asyncio.run(scenario())
    assert held_during and refused == 409 and body == b"0\n1\n2\n"
    wait_for(lambda: not redis_client.exists("stream:s2"), timeout=5)


def test_lazily_rendered_response_is_rendered_under_the_lock(redis_client):
    response = Client().get("/t/rendered/r/")
    assert response.content == b"held while rendering: True"
    assert not redis_client.exists("rendered:r")


def test_exception_releases(redis_client):
    client = Client(raise_request_exception=True)
    for _ in range(2):  # the second call would be a 409 if the first had kept the lock
        with pytest.raises(ValueError, match="boom e"):
            client.get("/t/boom/e/")
    assert not redis_client.exists("boom:e")
    assert Client(raise_request_exception=False).get("/t/boom/e/").status_code == 500


def test_async_exception_releases(redis_client):
    async def scenario():
        client = AsyncClient(raise_request_exception=True)
        for _ in range(2):
            with pytest.raises(ValueError, match="boom f"):
                await client.get("/t/aboom/f/")

    asyncio.run(scenario())
    assert not redis_client.exists("boom:f")


def test_wait_lets_the_second_request_in_after_the_first(redis_client):
    first = in_thread(lambda: Client().get("/t/wait/w/"))
    wait_for(lambda: entered(redis_client, "w"))
    second = in_thread(lambda: Client().get("/t/wait/w/"))
    time.sleep(0.3)
    assert not entered(redis_client, "w", 2), "the second request must wait for the first"
    redis_client.set("go:w", 1)
    assert first().status_code == 200
    assert second().status_code == 200


@pytest.mark.django_db
def test_rollback_on_loss_rolls_back_the_views_transaction(redis_client):
    Account.objects.create(name="r", balance=0)
    client = Client(raise_request_exception=True)
    with pytest.raises(LockLostError):
        client.get("/t/rollback/r/?sleep=0.6")
    assert Account.objects.get(name="r").balance == 0
    assert client.get("/t/rollback/r/").status_code == 200
    assert Account.objects.get(name="r").balance == 100


@pytest.mark.django_db(transaction=True)
def test_watchdog_keeps_a_long_view_locked(redis_client):
    Account.objects.create(name="k", balance=0)
    first = in_thread(lambda: Client().get("/t/renewed/k/"))
    wait_for(lambda: entered(redis_client, "k"))
    # More than three lock timeouts (1.5 s: renewed every 0.5 s, so a loaded machine must stall the
    # watchdog a whole second to lose the hold; 0.3 s left it 0.2 s, and a loaded run lost it).
    time.sleep(4.6)
    second = Client().get("/t/renewed/k/")
    redis_client.set("go:k", 1)
    assert first().status_code == 200
    assert second.status_code == 409
    assert Account.objects.get(name="k").balance == 1


# -- keys ----------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_key_from_request_user(redis_client):
    alice = User.objects.create_user("alice")
    client = Client()
    client.force_login(alice)
    response = client.get("/t/user/")
    assert response.content.startswith(f"user:{alice.pk} ".encode())

    async def scenario():
        async_client = AsyncClient()
        await async_client.aforce_login(alice)
        return await async_client.get("/t/auser/")

    assert asyncio.run(scenario()).content.startswith(f"user:{alice.pk} ".encode())


@pytest.mark.django_db
def test_anonymous_user_is_refused_rather_than_sharing_a_key(redis_client):
    response = Client().get("/t/user/")
    assert response.status_code == 400
    assert not redis_client.keys("user:*")


def test_key_from_query_and_headers(redis_client):
    assert Client().get("/t/query/", {"item": "a b/c"}).content.startswith(b"item:a%20b%2Fc ")
    assert Client().get("/t/header/", headers={"X-Tenant": "acme"}).content.startswith(b"tenant:acme ")


def test_missing_query_or_header_is_a_bad_request_not_a_shared_key(redis_client):
    assert Client().get("/t/query/").status_code == 400
    assert Client().get("/t/header/").status_code == 400
    assert Client().get("/t/query/", {"item": ""}).status_code == 400
    assert redis_client.dbsize() == 0


def test_values_are_encoded_so_different_values_never_share_a_key(redis_client):
    @locked("pair:{a}:{b}")
    def job(a, b):
        return current_lock().name

    assert job("x:y", "z") != job("x", "y:z")

    @locked("pair:{a}-{b}.{c}")
    def dashed(a, b, c):
        return current_lock().name

    keys = {dashed(*values) for values in [("x-y", "z", "w"), ("x", "y-z", "w"), ("x", "y", "z.w"), ("x", "y.z", "w")]}
    assert len(keys) == 4
    assert dashed("a@b", "c", "d") == "pair:a@b-c.d"  # characters the template does not use stay readable
    with pytest.raises(KeyTemplateError, match="nothing between them"):
        locked("pair:{a}{b}")(lambda a, b: None)

    @locked("report-{day}.csv")
    def one_field(day):
        return current_lock().name

    assert one_field("2024-01-01") == "report-2024-01-01.csv"  # one field: keys as they always were

    @locked("{{literal}}-{day}")  # escaped braces are text, not a second field
    def escaped(day):
        return current_lock().name

    assert escaped("x-y") == "{literal}-x-y"


def test_default_key_is_the_views_dotted_name(redis_client):
    assert Client().get("/t/default/").content == b"tests.testapp.views.default_key"


def test_callable_key(redis_client):
    assert Client().get("/t/callable/abc/").content.startswith(b"callable:cba ")


def test_template_naming_an_unknown_argument_fails_at_decoration():
    with pytest.raises(KeyTemplateError, match="pkk"):

        @locked("order:{pkk}")
        def view(request, pk):
            pass

    with pytest.raises(KeyTemplateError, match="positional"):
        locked("order:{}")(lambda request: None)
    with pytest.raises(KeyTemplateError, match="not a valid template"):
        locked("order:{pk")(lambda request, pk: None)


def test_template_on_view_with_kwargs_fails_at_request_time(redis_client, rf):
    @locked("order:{pk}")
    def view(request, **kwargs):
        return "ran"

    assert view(rf.get("/"), pk=3) == "ran"
    with pytest.raises(KeyTemplateError, match=r"\{pk\}"):
        view(rf.get("/"), other=3)
    with pytest.raises(KeyTemplateError, match="cannot fill"):
        locked("order:{kwargs[nope]}")(view)(rf.get("/"), pk=1)


def test_bad_options_fail_at_decoration():
    with pytest.raises(InvalidLockArgument):
        locked("x", limit=0)
    with pytest.raises(InvalidLockArgument):
        locked("x", status=200)
    with pytest.raises(InvalidLockArgument):
        locked("x", timeout=-1)
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="rollback_on_loss"):

        @locked("x", rollback_on_loss=True)
        async def view(request):
            pass


# -- contention answers --------------------------------------------------------------------------
def test_configurable_status_handler_and_template(redis_client, rf):
    blocker = locked("busy")
    with blocker:

        @locked("busy", status=423)
        def with_status(request):
            return "ran"

        response = with_status(rf.get("/"))
        assert response.status_code == 423 and int(response["Retry-After"]) >= 1

        def handler(request, contention):
            from django.http import JsonResponse

            return JsonResponse({"name": contention.name, "retry": contention.retry_after}, status=429)

        response = locked("busy", handler=handler)(lambda request: "ran")(rf.get("/"))
        body = json.loads(response.content)
        assert response.status_code == 429 and body["name"] == "busy"
        assert response["Retry-After"] == str(body["retry"])

        with override_settings(
            TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [], "OPTIONS": {
                "loaders": [("django.template.loaders.locmem.Loader", {"busy.html": "busy {{ contention.name }}"})]
            }}]
        ):
            response = locked("busy", template_name="busy.html")(lambda request: "ran")(rf.get("/"))
        assert response.status_code == 409 and response.content == b"busy busy"

        with override_settings(DJANGO_REDIS_COORD={"URL": redis_client_url(redis_client), "CONTENTION_STATUS": 429}):
            assert locked("busy")(lambda request: "ran")(rf.get("/")).status_code == 429


@pytest.mark.django_db
def test_each_request_gets_its_own_hold_and_settings_changes_apply(redis_client, rf):
    from django.http import HttpResponse

    seen = []

    @locked("reused")  # the timeout comes from the settings
    def view(request):
        held = current_lock()
        seen.append((held, redis_client.get(held.name), redis_client.pttl(held.name), held.fence))
        return HttpResponse(b"ok")

    with override_settings(DJANGO_REDIS_COORD={"URL": redis_client_url(redis_client), "DEFAULT_TIMEOUT": 20}):
        first_response = view(rf.get("/"))
        second_response = locked("reused", wait=5)(lambda request: HttpResponse(b"waited"))
        waiting = in_thread(lambda: second_response(rf.get("/")))  # queued behind the first hold
        wait_for(lambda: redis_client.zcard(seen[0][0].keys.queue) == 1)
        first_response.close()  # hands the lock to the waiting request
        waited = waiting()
        assert waited.status_code == 200 and waited.content == b"waited"
        waited.close()
        third_response = view(rf.get("/"))
        held_now = seen[-1][0]
        assert seen[0][0].local.token is None and not seen[0][0].owned() and held_now.owned()
        third_response.close()
        view(rf.get("/")).close()
    locks = [entry[0] for entry in seen]
    from django_redis_coord.config import shortcuts

    dotted = f"{view.__module__}.{view.__qualname__}"
    (made_once,) = [made for key, made in shortcuts._made.items() if key[0] == "reused" and key[3] == dotted]
    assert len({id(held) for held in locks}) == 3 and made_once not in locks and made_once.local.token is None
    (first, token_1, pttl_1, fence_1), (second, token_2, _, fence_2), (third, token_3, _, fence_3) = seen
    assert len({token_1, token_2, token_3}) == 3 and fence_1 < fence_2 < fence_3
    assert not first.valid and not second.valid and not third.valid
    assert 15_000 < pttl_1 <= 20_000
    with override_settings(DJANGO_REDIS_COORD={"URL": redis_client_url(redis_client), "KEY_PREFIX": "other",
                                               "DEFAULT_TIMEOUT": 40}):
        response = view(rf.get("/"))
        held, token, pttl, _ = seen[-1]
        assert held.name == "other:reused" and redis_client.get("other:reused") == token
        assert 35_000 < pttl <= 40_000
        response.close()
    assert redis_client.get("other:reused") is None and redis_client.get("reused") is None


def redis_client_url(client) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


# -- plain functions and the context manager -----------------------------------------------------
def test_plain_function_and_context_manager(redis_client):
    calls = []

    @locked("report:{day}", timeout=10)
    def build(day, *, force=False):
        calls.append((day, current_lock().name))
        return "built"

    assert build("mon") == "built"
    assert calls == [("mon", "report:mon")]
    with locked("report:{day}", params={"day": "tue"}) as held:
        assert held.fence and held.name == "report:tue"
        assert build("mon") == "built"  # other key
        with pytest.raises(LockContended) as info:
            build("tue")
        assert 1 <= info.value.retry_after <= 60
    assert build("tue") == "built"


def test_async_plain_function_and_context_manager(redis_client):
    @locked("job:{n}")
    async def job(n):
        return current_lock().name

    async def scenario():
        async with locked("job:{n}", params={"n": 1}) as held:
            assert held.fence
            with pytest.raises(LockContended):
                await job(1)
            assert await job(2) == "job:2"
        return await job(1)

    assert asyncio.run(scenario()) == "job:1"


def test_celery_style_bound_task(redis_client):
    class Task:
        name = "tasks.send"

    @locked("task:{self.name}:{order_id}")
    def send(self, order_id):
        return current_lock().name

    assert send(Task(), 7) == "task:tasks.send:7"


# -- limit=N: a semaphore ------------------------------------------------------------------------
def _limited_racer(barrier, path: str, name: str):
    import redis
    from django.conf import settings

    barrier.wait(10)
    response = Client().get(path)
    if response.status_code != 200:
        redis.Redis.from_url(settings.REDIS_URL).incr(f"refused:{name}")
    return response.status_code, response.get("Retry-After")


def test_limit_two_lets_exactly_two_in_across_processes(redis_client):
    barrier = CTX.Barrier(4)
    runner = in_thread(
        lambda: run_processes(_limited_racer, [(barrier, "/t/limited/l/", "l") for _ in range(4)])
    )
    wait_for(lambda: entered(redis_client, "l", 2) and int(redis_client.get("refused:l") or 0) >= 2)
    assert int(redis_client.get("entered:l")) == 2
    redis_client.set("go:l", 1)
    results = runner()
    assert sorted(status for status, _ in results) == [200, 200, 409, 409]
    for status, retry_after in results:
        if status == 409:
            assert 25 <= int(retry_after) <= 30
    # Both permits came back: two more get in at once.
    redis_client.delete("entered:l")
    assert [Client().get("/t/limited/l/").status_code for _ in range(2)] == [200, 200]


def test_limit_two_with_threads_and_permit_fences(redis_client):
    firsts = [in_thread(lambda: Client().get("/t/limited/m/")) for _ in range(2)]
    wait_for(lambda: entered(redis_client, "m", 2))
    third = Client().get("/t/limited/m/")
    assert third.status_code == 409 and b"all permits are taken" in third.content
    redis_client.set("go:m", 1)
    bodies = [first().content for first in firsts]
    fences = sorted(int(body.split(b"=")[1]) for body in bodies)
    assert fences[0] < fences[1]


def test_plain_function_with_a_missing_value_raises(redis_client):
    @locked("invoice:{invoice_id}")
    def send(invoice_id=None):
        return "sent"

    with pytest.raises(MissingKeyValue, match="None"):
        send()
    assert send(5) == "sent"
    assert redis_client.dbsize() > 0 and not redis_client.exists("invoice:None")


def test_limit_two_on_an_async_view(redis_client):
    async def scenario():
        client = AsyncClient()
        firsts = [asyncio.ensure_future(client.get("/t/alimited/n/")) for _ in range(2)]
        while not entered(redis_client, "n", 2):
            await asyncio.sleep(0.01)
        third = await client.get("/t/alimited/n/")
        redis_client.set("go:n", 1)
        return [await first for first in firsts], third

    firsts, third = asyncio.run(scenario())
    assert [first.status_code for first in firsts] == [200, 200]
    assert third.status_code == 409 and 25 <= int(third["Retry-After"]) <= 30
    wait_for(lambda: redis_client.zcard("limited:n") == 0, timeout=5)


def test_async_views_through_the_sync_handler_release(redis_client):
    # A sync (WSGI) handler runs an async view in an event loop of its own, closed before the
    # response is: the release then goes through the sync client under the same token.
    for path, key in (("/t/aavail/q/", "avail:q"), ("/t/alimited/q/", "limited:q")):
        redis_client.set("go:q", 1)
        for _ in range(2):
            assert Client().get(path).status_code == 200
        assert not redis_client.exists(key) or redis_client.zcard(key) == 0
    response = Client().get("/t/astream/q/")
    with pytest.warns(Warning, match="consume asynchronous iterators"):
        assert b"".join(list(response)) == b"0\n1\n2\n"
    assert not redis_client.exists("stream:q")


def test_the_sync_twins_of_asyncio_holds_are_copies_of_one_lock_per_name(redis_client):
    """A response closed in a worker thread releases with a sync copy of a lock made once per name."""
    from django.http import HttpResponse
    from django.test import RequestFactory

    from django_redis_coord.config import shortcuts

    @locked("twinned", timeout=5)
    async def view(request):
        return HttpResponse(b"ok")

    async def scenario():
        for _ in range(3):
            response = await view(RequestFactory().get("/"))
            assert redis_client.exists("twinned")
            await asyncio.to_thread(response.close)
            assert not redis_client.exists("twinned")

    asyncio.run(scenario())
    templates = [made for key, made in shortcuts._made.items() if key[0] == "twinned" and not key[4]]
    assert len(templates) == 1 and templates[0].redis is None and templates[0]._state().token is None


@pytest.mark.parametrize("auto_renew", [False, True])
def test_async_response_closed_from_a_worker_thread_releases_once(redis_client, received, auto_renew):
    """Django closes an async view's response in a worker thread while the loop runs.  A hold the
    loop's watchdog does not renew is released right there with the sync client (no hop back to
    the loop); a renewed one is released on its loop, which owns the renewal.  Either way once,
    with the fence it was granted, and the next request gets in."""
    from django.http import HttpResponse
    from django.test import RequestFactory

    from django_redis_coord.signals import lock_released

    released_in: list[asyncio.AbstractEventLoop] = []

    async def where(sender, **kwargs):  # awaited on the loop by asend(), in a loop of its own by send()
        released_in.append(asyncio.get_running_loop())

    lock_released.connect(where, weak=False)

    holds = []

    @locked("closed-in-thread", timeout=5, auto_renew=auto_renew)
    async def view(request):
        holds.append(current_lock())
        return HttpResponse(b"ok")

    async def scenario():
        response = await view(RequestFactory().get("/"))
        held = bool(redis_client.exists("closed-in-thread"))
        await asyncio.to_thread(response.close)
        # A renewed hold is released by a task on the loop: let it run.
        for _ in range(200):
            if not redis_client.exists("closed-in-thread"):
                break
            await asyncio.sleep(0.01)
        again = await view(RequestFactory().get("/"))
        again.close()
        await asyncio.sleep(0.05)
        return asyncio.get_running_loop(), held, again.status_code

    try:
        loop, held, again = asyncio.run(scenario())
    finally:
        lock_released.disconnect(where)
    assert held and again == 200
    assert not redis_client.exists("closed-in-thread")
    acquired = [event for label, event in received if label == "acquired"]
    released = [event for label, event in received if label == "released"]
    assert len(acquired) == 2 and len(released) == 2
    assert released[0]["fence"] == acquired[0]["fence"] < acquired[1]["fence"]
    assert (released_in[0] is loop) is auto_renew
    # Whichever thread released it, the signals speak for the view's own (asyncio) lock, and that
    # lock knows its hold has ended.
    for start, end in zip(acquired, released):
        assert end["sender"] is start["sender"] and end["instance"] is start["instance"]
    assert [event["instance"] for event in acquired] == holds
    assert not holds[0].valid and holds[0].fence is None


# -- responses replaced by a middleware, class-based view names, checked options ------------------
class _URLConf:
    def __init__(self, *patterns) -> None:
        self.urlpatterns = list(patterns)


@locked("etag-view", timeout=30)
def _etag_view(request):
    from django.http import HttpResponse

    response = HttpResponse(b"same body")
    response["ETag"] = '"v1"'
    return response


def test_a_response_a_middleware_replaces_still_releases_when_the_request_ends(redis_client):
    from django.urls import path

    with override_settings(ROOT_URLCONF=_URLConf(path("etag/", _etag_view)),
                           MIDDLEWARE=["django.middleware.http.ConditionalGetMiddleware"]):
        client = Client()
        assert client.get("/etag/").status_code == 200
        assert not redis_client.exists("etag-view")
        # A 304 made by the middleware in place of the view's response, which nobody closes.
        assert client.get("/etag/", headers={"If-None-Match": '"v1"'}).status_code == 304
        assert not redis_client.exists("etag-view")
        assert client.get("/etag/").status_code == 200


def test_class_based_views_decorated_in_the_urlconf_are_named_after_their_class(redis_client):
    from django.test import RequestFactory
    from django.views import View

    from django_redis_coord.signals import lock_acquired

    class ReportView(View):
        def get(self, request):
            from django.http import HttpResponse

            return HttpResponse(b"ok")

    class ExportView(ReportView):
        pass

    seen = []

    def record(sender, **kwargs):
        seen.append(kwargs["name"])

    lock_acquired.connect(record, weak=False)
    try:
        for view_class in (ReportView, ExportView):
            locked(timeout=5)(view_class.as_view())(RequestFactory().get("/"))  # held until its TTL
    finally:
        lock_acquired.disconnect(record)
    # Not Django's as_view.<locals>.view for both: two views, two locks.
    assert seen == [f"{__name__}.{ReportView.__qualname__}", f"{__name__}.{ExportView.__qualname__}"]


def test_params_fill_a_template_and_are_known_when_decorating(redis_client):
    @locked("job:{tenant}:{n}", params={"tenant": "acme"}, timeout=5)
    def job(n):
        return redis_client.exists("job:acme:7")

    assert job(7) == 1


def test_query_or_headers_used_whole_are_refused_when_decorating():
    for template in ("report:{query}", "report:{headers}", "report:{query!s}"):
        with pytest.raises(KeyTemplateError, match="whole"):
            locked(template, timeout=5)(lambda request: None)


def test_a_whole_user_key_refuses_anonymous_requests(redis_client):
    from django.contrib.auth.models import AnonymousUser
    from django.test import RequestFactory

    @locked("per-user:{user}", timeout=5)
    def view(request):
        from django.http import HttpResponse

        return HttpResponse(b"ok")

    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    with pytest.raises(MissingKeyValue, match="anonymous"):
        view(request)
    assert not redis_client.keys("*per-user*")


@pytest.mark.parametrize(
    "options",
    [{"fail_open": "false"}, {"auto_renew": "no"}, {"rollback_on_loss": "no"}, {"using": 5}],
)
def test_options_of_the_wrong_type_are_refused(options):
    from django_redis_coord.core.exceptions import InvalidLockArgumentType

    with pytest.raises(InvalidLockArgumentType):
        locked("typed", timeout=5, **options)


def test_an_async_contention_handler_on_a_sync_view_is_refused_when_decorating():
    from django.core.exceptions import ImproperlyConfigured

    async def handler(request, info):
        return None

    with pytest.raises(ImproperlyConfigured, match="async"):
        locked("handled", timeout=5, handler=handler)(lambda request: None)


@locked("etag-aview", timeout=30)
async def _etag_aview(request):
    from django.http import HttpResponse

    response = HttpResponse(b"same body")
    response["ETag"] = '"v1"'
    return response


def test_an_async_view_s_response_a_middleware_replaces_still_releases(redis_client):
    from django.urls import path

    async def scenario():
        client = AsyncClient()
        assert (await client.get("/etag/")).status_code == 200
        assert (await client.get("/etag/", headers={"If-None-Match": '"v1"'})).status_code == 304
        assert not redis_client.exists("etag-aview")
        assert (await client.get("/etag/")).status_code == 200

    with override_settings(ROOT_URLCONF=_URLConf(path("etag/", _etag_aview)),
                           MIDDLEWARE=["django.middleware.http.ConditionalGetMiddleware"]):
        asyncio.run(scenario())


def test_the_limit_stored_in_redis_is_the_one_reported_and_a_different_one_is_logged(redis_client, caplog):
    first = locked("export-limit", limit=1, timeout=30)
    later = locked("export-limit", limit=3, timeout=30)  # the code changed; Redis keeps the first limit
    with first:
        with caplog.at_level("WARNING", logger="django_redis_coord"):
            with pytest.raises(LockContended, match="all 1 permits"):
                with later:
                    pass
    assert "limit 1" in caplog.text and "set_max_size" in caplog.text


def test_a_view_argument_named_like_a_request_value_is_the_one_the_key_uses(redis_client):
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpResponse
    from django.test import RequestFactory

    seen = []

    @locked("search:{query}", timeout=5)
    def search(request, query):
        seen.append(request.coord_lock.name)
        return HttpResponse(b"ok")

    @locked("profile:{user}", timeout=5)
    def profile(request, user):
        seen.append(request.coord_lock.name)
        return HttpResponse(b"ok")

    request = RequestFactory().get("/?query=other")
    request.user = AnonymousUser()
    search(request, query="shoes")
    profile(request, user="ada")  # the URL's user, not the (anonymous) request.user
    assert seen == ["search:shoes", "profile:ada"]


def test_a_request_that_waited_in_vain_gets_the_holder_s_retry_after(redis_client):
    from django_redis_coord import lock

    holder = lock("waited-in-vain", timeout=30)
    assert holder.acquire(blocking=False)
    try:
        with pytest.raises(LockContended) as refused:
            with locked("waited-in-vain", timeout=5, wait=0.2):
                pass
        assert refused.value.retry_after == 30  # the holder's remaining TTL, not a guess of 1 s
        first = locked("waited-permits", limit=1, timeout=30)
        with first:
            with pytest.raises(LockContended, match="all 1 permits") as refused:
                with locked("waited-permits", limit=3, timeout=30, wait=0.2):
                    pass
            assert refused.value.retry_after == 30
    finally:
        holder.release()


def test_a_lock_without_expiry_needs_to_be_asked_for_by_name(redis_client):
    from django_redis_coord import NO_EXPIRY

    with pytest.raises(InvalidLockArgument, match="NO_EXPIRY"):
        locked("forever", timeout=None)

    @locked("forever", timeout=NO_EXPIRY)
    def task():
        assert redis_client.pttl("forever") == -1
        return current_lock().timeout

    assert task() is None
    with locked("forever", timeout=NO_EXPIRY) as held:
        assert held.timeout is None
    with pytest.raises(InvalidLockArgument, match="needs a timeout"):
        locked("forever", timeout=NO_EXPIRY, auto_renew=True)


# -- what a request costs Redis ----------------------------------------------------------------------
@locked("counted:{name}", timeout=30)
def counted(request, name):
    return HttpResponse(f"{request.coord_lock.name} fence={request.coord_lock.fence}")


@locked("cached:{name}", timeout=30)
def cached(request, name):
    return HttpResponse(f"fence={request.coord_lock.fence}")


#: This module is the URLconf of the tests below (ROOT_URLCONF): views of their own, nothing else.
urlpatterns = [urls.path("counted/<str:name>/", counted), urls.path("cached/<str:name>/", cache_page(60)(cached))]


@override_settings(ROOT_URLCONF=__name__)
def test_a_locked_view_sends_redis_its_acquire_and_its_release_only(redis_server, redis_client):
    """Hold times (for Retry-After), signals and metrics stay in this process: what a request adds
    on its path is the acquire script and the release script, nothing else."""
    received = []

    def receiver(**kwargs):
        received.append(kwargs["name"])

    client = Client()
    assert client.get("/counted/warm/").status_code == 200  # connected, scripts loaded
    lock_acquired.connect(receiver, dispatch_uid="counted")
    lock_released.connect(receiver, dispatch_uid="counted-released")
    try:
        with CommandMonitor(redis_server, wait=30) as monitor:
            for number in range(10):
                response = client.get(f"/counted/n{number % 3}/")
                assert response.status_code == 200 and b"fence=" in response.content
    finally:
        lock_acquired.disconnect(dispatch_uid="counted")
        lock_released.disconnect(dispatch_uid="counted-released")
    assert monitor.counts == {"EVALSHA": 20}  # 10 requests: one acquire, one release each
    assert len(received) == 20 and redis_client.keys("counted:*") == []


@override_settings(ROOT_URLCONF=__name__)
def test_a_locked_view_under_cache_page_is_cached_without_its_hold(redis_client):
    """The response ``cache_page`` stores is pickled: it must not carry the release (a lock, a client)."""
    client = Client()
    first = client.get("/cached/x/")
    assert first.status_code == 200 and redis_client.get("cached:x") is None  # released at close
    again = client.get("/cached/x/")
    assert again.content == first.content  # served from the cache: the view did not run again
