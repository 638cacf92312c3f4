"""@rate_limited on views (sync, async, class-based; Django's test client and real HTTP), tasks
(Celery's real worker: tests/test_celery.py's fixtures; Django's tasks framework, immediate
backend) and functions: 429 with Retry-After and the IETF RateLimit fields, hostile key values,
the kill switch, Redis outages, the settings' checks, ``manage.py ratelimits``, the metrics and
the admin page.  Every decision is made by the real redis-server of the session."""

from __future__ import annotations

import asyncio
import io
import json
import math
import re
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.http import HttpResponse
from django.test import AsyncClient, Client, RequestFactory, override_settings
from django.urls import reverse
from prometheus_client import REGISTRY
from redis.exceptions import ConnectionError as RedisConnectionError

from django_redis_coord import InvalidLockArgument, InvalidRate, RateLimitExceeded, rate_limited
from django_redis_coord.checks import check_rate_names, check_settings
from django_redis_coord.core.ratelimit import ratelimit_key, window_key
from django_redis_coord.decorator.contention import is_skipped
from django_redis_coord.metrics import feed
from django_redis_coord.ratelimited.decorator import rate_users
from django_redis_coord.ratelimited.headers import retry_after_seconds, sf_string
from django_redis_coord.testing.server import free_port
from tests.operators.test_admin import client_for, make_user


def coord(**extra):
    return override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD, **extra})


def dead_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


# -- views: the answers and their fields ------------------------------------------------------------------
def test_a_sync_view_admits_its_burst_then_answers_429_with_the_fields(redis_client):
    client = Client()
    sec, usec = redis_client.time()
    first, second, third = (client.get("/t/rl/gcra/a/") for _ in range(3))
    after, after_usec = redis_client.time()
    elapsed = after - sec + (after_usec - usec) / 1e6  # server seconds, at least from first to third
    # rate 3/m, burst 2: q is the burst, w the seconds a drained limit takes to refill it (2 x 20 s).
    for response in (first, second, third):
        assert response["RateLimit-Policy"] == '"rl:{name}";q=2;w=40'

    def reset_after(response):  # the decision's reset_after, as the view read it (current_reply)
        return float(response.content.decode().rsplit("=", 1)[1])

    assert first.status_code == 200 and first.content.startswith(b"ran remaining=1 ")
    assert 0 < reset_after(first) <= 20 and "Retry-After" not in first
    assert first["RateLimit"] == f'"rl:{{name}}";r=1;t={math.ceil(reset_after(first))}'
    assert second.status_code == 200 and 20 < reset_after(second) <= 40
    assert second["RateLimit"] == f'"rl:{{name}}";r=0;t={math.ceil(reset_after(second))}'
    # Refused: Retry-After is retry_after rounded up, at most the interval (20 s); t is the same.
    # retry_after is 20 s less the time from the first decision to the third: over 20 - elapsed.
    assert third.status_code == 429 and math.ceil(20 - elapsed) <= int(third["Retry-After"]) <= 20
    assert third["RateLimit"] == f'"rl:{{name}}";r=0;t={third["Retry-After"]}'  # the draft: t <= Retry-After
    assert b"too many requests" in third.content
    # One key, expiring when the limit is entirely free again (at most burst x interval = 40 s).
    assert redis_client.keys("*") == [ratelimit_key("rl:a")]
    assert 0 < redis_client.pttl(ratelimit_key("rl:a")) <= 40_000
    # Another key value has a limit of its own.
    assert client.get("/t/rl/gcra/b/").status_code == 200


def test_an_async_view_and_class_based_views(redis_client):
    async def three(path):
        client = AsyncClient()
        return [await client.get(path) for _ in range(3)]

    statuses = [r.status_code for r in asyncio.run(three("/t/rl/agcra/a/"))]
    assert statuses == [200, 200, 429]
    client = Client()
    assert [client.get("/t/rl/cbv/a/").status_code for _ in range(3)] == [200, 200, 429]
    async_cbv = asyncio.run(three("/t/rl/acbv/a/"))
    assert [r.status_code for r in async_cbv] == [200, 200, 429]
    assert 1 <= int(async_cbv[2]["Retry-After"]) <= 30
    assert async_cbv[0]["RateLimit-Policy"] == '"arl-cbv:{name}";q=2;w=60'


def test_a_sliding_window_view(redis_client):
    client = Client()
    responses = [client.get("/t/rl/window/a/") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[0]["RateLimit-Policy"] == '"rl-window:{name}";q=2;w=60'
    assert responses[1]["RateLimit"].startswith('"rl-window:{name}";r=0;t=')
    assert 1 <= int(responses[2]["Retry-After"]) <= 60
    assert 0 < redis_client.pttl(window_key("rl-window:a")) <= 60_000  # expires a period after the last admission


def test_stacked_decorators_list_both_policies(redis_client):
    client = Client()
    first, second = client.get("/t/rl/stacked/a/"), client.get("/t/rl/stacked/a/")
    assert first.status_code == 200 and second.status_code == 429
    assert first["RateLimit-Policy"] == '"inner";q=1;w=60, "outer";q=10;w=60'
    assert first["RateLimit"] == '"inner";r=0;t=60, "outer";r=9;t=6'
    assert 1 <= int(second["Retry-After"]) <= 60  # retry_after rounded up, at most the interval
    assert second["RateLimit"].startswith(f'"inner";r=0;t={second["Retry-After"]}, "outer";r=8;')


@pytest.mark.parametrize("retry_after, seconds", [
    (1.9, 2), (1.0, 1), (1.000001, 2), (0.2, 1), (0.0, 1), (19.999, 20), (3599.01, 3600),
])
def test_retry_after_is_rounded_up_to_whole_seconds(retry_after, seconds):
    """A client coming back after ``Retry-After`` seconds must not come back early: 1.9 s is 2."""
    assert retry_after_seconds(retry_after) == seconds


def test_the_policy_name_is_a_structured_field_string():
    assert sf_string('a"b\\c') == '"a\\"b\\\\c"'
    assert sf_string("café\n") == '"caf%C3%A9%0A"'


# -- hostile key values ---------------------------------------------------------------------------------
def test_hostile_key_values_are_encoded_or_hashed_never_a_500(redis_client):
    client = Client()
    for value in ("x" * 20_000, "a:dcoord:b", "}{{\x00\r\n", "../../etc", "é" * 500):
        response = client.get("/t/rl/header/", HTTP_X_CLIENT=value)
        assert response.status_code == 200, value[:20]
    keys = [key.decode("utf-8", "replace") for key in redis_client.keys("*")]
    assert len(keys) == 5 and all(len(key) < 300 for key in keys)
    assert any("%sha256-" in key for key in keys)  # the 20 kB value, as its digest
    assert not any(":dcoord:b" in key for key in keys)  # ':' of a value is encoded
    # A value the template needs and the request lacks: 400, nothing written.
    redis_client.flushall()
    assert client.get("/t/rl/header/").status_code == 400
    assert Client().get("/t/rl/user/").status_code == 400  # anonymous: user.pk is None
    assert redis_client.keys("*") == []


def test_a_user_key_limits_each_user(redis_client, django_user_model, db):
    alice = client_for(django_user_model.objects.create_user("alice"))
    bob = client_for(django_user_model.objects.create_user("bob"))
    assert [alice.get("/t/rl/user/").status_code for _ in range(3)] == [200, 200, 429]
    assert bob.get("/t/rl/user/").status_code == 200


# -- settings: the kill switch, named rates, outages -------------------------------------------------------
def test_the_kill_switch_admits_everything_without_asking_redis(redis_client):
    with coord(RATELIMIT={"ENABLED": False}):
        responses = [Client().get("/t/rl/gcra/k/") for _ in range(5)]
        assert [r.status_code for r in responses] == [200] * 5
        assert all("RateLimit" not in r for r in responses)
    assert redis_client.keys("*") == []
    with coord(RATELIMIT={"ENABLED": False}, URL=dead_url()):  # not even a connection
        assert Client().get("/t/rl/gcra/k/").status_code == 200


def test_a_named_rate_comes_from_the_settings(redis_client):
    @rate_limited("rl-named:{name}", rate="api")
    def named(request, name):
        return HttpResponse("ran")

    request = RequestFactory().get("/")
    try:
        with coord(RATELIMIT={"RATES": {"api": {"rate": "1/m", "burst": 1}}}):
            assert check_rate_names() == []
            assert [named(request, name="a").status_code for _ in range(2)] == [200, 429]
        with coord(RATELIMIT={"RATES": {"api": "5/s"}}):  # operators change it without a deploy
            assert named(request, name="b")["RateLimit-Policy"] == '"rl-named:{name}";q=5;w=1'
        (error,) = check_rate_names()
        assert error.id == "django_redis_coord.E023" and "rate='api'" in error.msg and '"RATES"' in error.hint
        assert "test_a_named_rate_comes_from_the_settings.<locals>.named" in error.msg
        with pytest.raises(ImproperlyConfigured, match="has no rate 'api'"):
            named(request, name="c")
    finally:
        rate_users.pop(named, None)  # the other tests' checks must not see it
    assert check_rate_names() == []


def test_bare_decorator_limits_the_view_by_the_default_rate(redis_client):
    @rate_limited
    def ping(request):
        return HttpResponse("pong")

    try:
        with coord(RATELIMIT={"DEFAULT_RATE": "1/m"}):
            responses = [ping(RequestFactory().get("/")) for _ in range(2)]
        assert [r.status_code for r in responses] == [200, 429]
        policy = f'"{__name__}.test_bare_decorator_limits_the_view_by_the_default_rate.<locals>.ping";q=1;w=60'
        assert responses[1]["RateLimit-Policy"] == policy
        assert "without a rate" in check_rate_names()[0].msg  # no DEFAULT_RATE in the test settings
    finally:
        rate_users.pop(ping, None)
    with pytest.raises(InvalidLockArgument, match="got the key twice"):
        rate_limited("a", key="b")


@pytest.mark.parametrize(("value", "problem"), [
    ("100/m", "must be a dict"),
    ({"ENABLED": "no"}, "must be True or False"),
    ({"ENABLD": False}, "Did you mean 'ENABLED'?"),
    ({"DEFAULT_RATE": "100/x"}, "is not a usable rate: Invalid rate '100/x'"),
    ({"RATES": {"api": "ten per second"}}, "is not a usable rate"),
    ({"RATES": {"api": {"rate": "10/s", "burst": 0}}}, "burst must be a positive int"),
    ({"RATES": {"api": {"rte": "10/s"}}}, "a dict with 'rate'"),
    ({"RATES": {"10/s": "10/s"}}, "reads as a rate"),
    ({"ON_UNAVAILABLE": "open"}, "'allow' or 'deny'"),
    ({"STATUS": 200}, "HTTP error status"),
])
def test_a_malformed_setting_is_a_system_check_error_with_a_hint(value, problem):
    with coord(RATELIMIT=value):
        errors = check_settings()
    assert errors and any(problem in e.msg or problem in (e.hint or "") for e in errors), errors
    assert all(e.id in ("django_redis_coord.E021", "django_redis_coord.E022") and e.hint for e in errors)


def test_good_settings_pass():
    with coord(RATELIMIT={"ENABLED": True, "DEFAULT_RATE": {"rate": "100/m", "burst": 20},
                          "RATES": {"api": "10/s", "login": "5/30s"}, "ON_UNAVAILABLE": "allow", "STATUS": 503}):
        assert check_settings() == []


def test_the_system_checks_hint_lists_the_units_the_parser_takes():
    from django_redis_coord.config.ratelimit_options import rate_problem
    from django_redis_coord.core.ratelimit.rules import UNITS

    hint = rate_problem("RATES['x']", "5/fortnight", None).hint
    assert set(re.findall(r"[a-z]+", hint.partition("(units ")[2].partition(")")[0])) == set(UNITS), hint


def test_bad_arguments_are_refused_when_decorating():
    with pytest.raises(InvalidRate, match="100/x"):
        rate_limited("k", rate="100/x")
    with pytest.raises(InvalidLockArgument, match="burst"):
        rate_limited("k", rate="10/s", burst=0)
    with pytest.raises(InvalidLockArgument, match="capacity"):
        rate_limited("k", rate="10/s", burst=2, cost=3)
    with pytest.raises(InvalidLockArgument, match="takes no burst"):
        rate_limited("k", rate="10/s", burst=2, algorithm="window")
    with pytest.raises(InvalidLockArgument, match="on_unavailable"):
        rate_limited("k", rate="10/s", on_unavailable="open")
    with pytest.raises(InvalidLockArgument, match="on_limited must be one of"):
        rate_limited("k", rate="10/s", on_limited="wait")
    with pytest.raises(InvalidLockArgument, match="settings"):
        rate_limited("k", rate="api", burst=3)
    with pytest.raises(Exception, match="uses {nope}"):
        rate_limited("k:{nope}", rate="10/s")(lambda request: None)


def test_an_unreachable_redis_denies_with_503_or_allows_as_chosen(redis_servers, caplog):
    (server,) = redis_servers(1)
    with coord(URL=server.url, CLIENT_OPTIONS={"socket_timeout": 0.5, "socket_connect_timeout": 0.5}):
        assert Client().get("/t/rl/deny/a/").status_code == 200
        server.stop()  # a stopped redis-server
        denied = Client().get("/t/rl/deny/a/")
        assert denied.status_code == 503 and denied["Retry-After"] == "5"
        allowed = asyncio.run(AsyncClient().get("/t/rl/aallow/a/"))
        assert allowed.status_code == 200 and "RateLimit" not in allowed
        with coord(URL=server.url, RATELIMIT={"ON_UNAVAILABLE": "allow"}):
            assert Client().get("/t/rl/gcra/a/").status_code == 200  # the settings' choice
        with pytest.raises(RedisConnectionError):  # a function denied: redis-py's own error
            rate_limited("fn-down", rate="1/s")(lambda: "ran")()
        assert rate_limited("fn-down", rate="1/s", on_unavailable="allow")(lambda: "ran")() == "ran"
    messages = [r.getMessage() for r in caplog.records if r.name == "django_redis_coord"]
    assert any("refusing (on_unavailable='deny')" in m for m in messages)
    assert any("admitting the call (on_unavailable='allow')" in m for m in messages)


# -- a client that comes back at Retry-After is admitted --------------------------------------------------
def test_a_client_retrying_at_retry_after_is_admitted_over_real_http(live_server, redis_client):
    """50 clients on 50 keys of 1/s, burst 1, each: a call, at once a second one (refused: its
    ``retry_after`` is just under 1 s, ``Retry-After: 1``), then a third after sleeping exactly
    Retry-After; three rounds each: 150 tries, at least 99% admitted (all, by the guarantee).

    At most 8 clients at a time: the test server's listen backlog is 10, and the kernel drops the
    connections beyond it, which their clients try again 1, 3, 7, 15 and 31 s later (a loaded run's
    50 at once had a connection time out after 30 s).  The timeout of a call only guards against a
    hang: the guarantee is about the call after the wait, however late it comes."""

    def status(url):
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                return response.status, response.headers
        except urllib.error.HTTPError as error:
            return error.code, error.headers

    def client(n):
        url = f"{live_server.url}/t/rl/fast/c{n}/"
        outcomes = []
        for _ in range(3):
            code, _headers = status(url)
            while code == 200:
                code, headers = status(url)
            assert code == 429
            time.sleep(int(headers["Retry-After"]))
            outcomes.append(status(url)[0] == 200)
        return outcomes

    with ThreadPoolExecutor(8) as pool:
        outcomes = [ok for each in pool.map(client, range(50)) for ok in each]
    assert len(outcomes) == 150 and sum(outcomes) >= 0.99 * len(outcomes)


# -- tasks and functions -------------------------------------------------------------------------------------
def test_a_function_raises_or_skips(redis_client):
    @rate_limited("fn:{n}", rate="1/m", on_limited="raise")
    def send(n):
        return n

    @rate_limited("fn-skip:{n}", rate="1/m", on_limited="skip")
    async def asend(n):
        return n

    assert send(1) == 1
    with pytest.raises(RateLimitExceeded) as raised:
        send(1)
    assert raised.value.lock_name == "fn:1" and 0 < raised.value.retry_after <= 60
    assert asyncio.run(asend(1)) == 1
    skipped = asyncio.run(asend(1))
    assert is_skipped(skipped) and skipped["lock"] == "fn-skip:1" and 1 <= skipped["retry_after"] <= 60


def test_wait_admits_a_call_once_its_reserved_slot_opens(redis_client):
    @rate_limited("fn-wait", rate="2/s", burst=1, wait=2)
    def call():
        return time.monotonic()

    started = time.monotonic()
    times = [call() for _ in range(3)]
    assert times[-1] - started >= 0.9  # the second and third waited half a second each (server time)
    with pytest.raises(InvalidLockArgument, match="cannot wait"):
        rate_limited("x", rate="2/s", algorithm="window", wait=1)


django_tasks = pytest.importorskip("django_tasks")


@rate_limited("task:{n}", rate="1/m", on_limited="skip")
@django_tasks.task
def limited_task(n):
    return n


def test_a_task_of_the_tasks_framework_skips_or_raises(redis_client):
    assert limited_task.enqueue(1).return_value == 1
    result = limited_task.enqueue(1)
    assert result.status == "SUCCESSFUL" and is_skipped(result.return_value)
    with pytest.raises(InvalidLockArgument, match="no retry API"):
        rate_limited("task:{n}", rate="1/m", on_limited="retry")(limited_task)


# -- operators: the command, the metrics, the admin --------------------------------------------------------
def run(*args):
    out = io.StringIO()
    call_command("ratelimits", *args, stdout=out)
    return out.getvalue()


def test_the_command_lists_shows_and_resets(redis_client):
    with coord(KEY_PREFIX="shop"):
        client = Client()
        for _ in range(3):
            client.get("/t/rl/gcra/busy/")
        client.get("/t/rl/gcra/calm/")
        client.get("/t/rl/window/w/")
        listed = run("list")
        lines = listed.splitlines()
        assert lines[0].split() == ["NAME", "KIND", "RATE", "REMAINING", "FREE", "AGAIN", "IN", "IN", "WINDOW"]
        assert [line.split()[0] for line in lines[1:]] == ["rl:busy", "rl:calm", "rl-window:w"]
        shown = run("show", "rl:busy", "--rate", "3/m", "--burst", "2")
        assert "free again in:" in shown and "would be refused" in shown and "remaining:     0 of 2" in shown
        listed_json = json.loads(run("list", "--json", "--limit", "2"))
        assert [(u["name"], u["kind"], u["remaining"]) for u in listed_json] == [("rl:busy", "gcra", 0),
                                                                                  ("rl:calm", "gcra", 1)]
        assert listed_json[0]["key"] == "{shop:rl:busy}:dcoord:gcra" and 0 < listed_json[0]["free_in_ms"] <= 40_000
        window = json.loads(run("show", "rl-window:w", "--json"))
        assert window["limits"][0]["kind"] == "window" and window["limits"][0]["in_window"] == 1
        with pytest.raises(CommandError) as missing:
            run("show", "rl:idle")
        assert missing.value.returncode == 4
        assert "1 key(s) removed" in run("reset", "rl:busy", "--noinput")
        assert not redis_client.exists(ratelimit_key("shop:rl:busy"))
        assert client.get("/t/rl/gcra/busy/").status_code == 200  # idle again


def test_admitted_and_limited_are_counted_per_key_template(redis_client):
    def count(name):
        return REGISTRY.get_sample_value(name, {"template": "rl:{name}", "kind": "ratelimit"}) or 0.0

    with coord(METRICS=["prometheus"]):
        before = (count("django_redis_coord_ratelimit_admitted_total"),
                  count("django_redis_coord_ratelimit_limited_total"))
        client = Client()
        for n in range(20):  # twenty keys, one template: one series
            for _ in range(3):
                client.get(f"/t/rl/gcra/m{n}/")
        feed()
    assert count("django_redis_coord_ratelimit_admitted_total") - before[0] == 40
    assert count("django_redis_coord_ratelimit_limited_total") - before[1] == 20


def test_opentelemetry_counts_admitted_and_limited(redis_client, monkeypatch):
    """The recorder on a meter of its own (the global provider belongs to tests/test_django_metrics.py),
    fed the decisions of a view as the configured exporters are."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from django_redis_coord.metrics import MetricsEvents
    from django_redis_coord.metrics.otel import OtelRecorder
    from django_redis_coord.ratelimited import decorator
    from tests.metrics.test_recorders import otel_sums

    reader = InMemoryMetricReader()
    recorder = OtelRecorder(meter=MeterProvider(metric_readers=[reader]).get_meter("rl-test"))
    fanout = MetricsEvents(recorder).fanout
    monkeypatch.setattr(decorator, "configured_metrics", lambda: fanout)
    client = Client()
    for _ in range(3):
        client.get("/t/rl/window/otel/")
    feed()
    sums = otel_sums(reader)
    assert sums[("django_redis_coord.ratelimit.admitted", "rl-window:{name}", "ratelimit-window")] == 2
    assert sums[("django_redis_coord.ratelimit.limited", "rl-window:{name}", "ratelimit-window")] == 1


def test_status_option_and_an_async_function_waiting_for_its_slot(redis_client):
    @rate_limited("status:{name}", rate="1/m", status=503)
    def view(request, name):
        return HttpResponse("ran")

    request = RequestFactory().get("/")
    assert [view(request, name="s").status_code for _ in range(2)] == [200, 503]

    @rate_limited("await-slot", rate="4/s", burst=1, wait=2)
    async def call():
        return "called"

    async def three():
        return [await call() for _ in range(3)]

    started = time.monotonic()
    assert asyncio.run(three()) == ["called"] * 3
    assert time.monotonic() - started >= 0.45  # two reserved slots, 0.25 s apart on the server's clock


@pytest.mark.django_db
def test_the_admin_page_shows_the_busiest_limits_and_resets_one(redis_client, django_user_model):
    page = reverse("admin:django_redis_coord_holder_ratelimits")
    viewer = make_user(django_user_model, "viewer", staff=True, perms=("view_holder",))
    operator = make_user(django_user_model, "operator", staff=True, perms=("view_holder", "force_release_holder"))
    assert client_for().get(page).status_code == 302
    client = Client()
    for _ in range(2):
        client.get("/t/rl/gcra/busy/")
    client.get("/t/rl/gcra/calm/")
    seen = client_for(viewer).get(page)
    assert seen.status_code == 200
    text = seen.content.decode()
    assert text.index('data-name="rl:busy"') < text.index('data-name="rl:calm"')
    assert "Reset" not in text
    assert client_for(viewer).post(page, {"name": "rl:busy"}).status_code == 403
    after = client_for(operator).post(page, {"name": "rl:busy"}, follow=True)
    assert "Reset the rate limit" in after.content.decode()
    assert not redis_client.exists(ratelimit_key("rl:busy"))
    assert 'id="ratelimits-link"' in client_for(viewer).get(
        reverse("admin:django_redis_coord_holder_changelist")).content.decode()
