"""OpenTelemetry tracing (docs/metrics.md, "Tracing"), read back from the SDK's in-memory span
exporter: an acquire that waited or failed is one span named after its key template, in the
caller's context; an uncontended one makes none; rate-limit decisions and force releases are
events of the current span; nothing at all while tracing is off."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from django_redis_coord import Lock, ReadWriteLock, Semaphore, lock
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.checks import check_settings
from django_redis_coord.config import tracing_options
from django_redis_coord.core import tracing
from django_redis_coord.core.exceptions import LockNotOwnedError
from django_redis_coord.core.keys import encode_name, keys_for
from django_redis_coord.core.listing import HolderListing
from django_redis_coord.core.tracing import TracingEvents
from django_redis_coord.metrics import MetricsEvents
from tests.operators.test_admin import client_for, confirmed_form, make_user, release_url
from tests.support.procs import CTX

#: One provider for the process (OpenTelemetry takes the global one once), its spans kept in memory.
EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


@pytest.fixture(scope="module", autouse=True)
def _global_provider():
    trace.set_tracer_provider(_PROVIDER)  # the Django setting traces to the global provider
    yield


@pytest.fixture
def spans(redis_client):
    """Tracing on (the core switch) with the in-memory exporter; its spans, cleared first."""
    EXPORTER.clear()
    tracing.enable()
    yield EXPORTER
    tracing.disable()


@pytest.fixture
def request_span():
    """A span standing for the request's, current while the test runs its calls in it."""
    return trace.get_tracer("tests").start_as_current_span("GET /report")


def finished(exporter: InMemorySpanExporter, prefix: str = "") -> list[Any]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith(prefix)]


def queued(client: redis.Redis, name: str, kind: bytes) -> int:
    return client.zcard(keys_for(encode_name(name), kind).queue)


def release_once_queued(client: redis.Redis, name: str, kind: bytes, release) -> threading.Thread:
    """Call ``release()`` once someone waits in ``name``'s queue (so the wait really happens)."""

    def run() -> None:
        deadline = time.monotonic() + 30
        while queued(client, name, kind) == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        release()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def assert_no_rendered_name(span: Any, name: str) -> None:
    assert name not in span.name
    assert all(name not in str(value) for value in span.attributes.values())


def test_a_contended_acquire_makes_one_span_named_after_its_template(spans, spawn, redis_client, redis_url,
                                                                     request_span):
    holder = spawn("report:monthly", timeout=30)
    waiter = Lock(redis_client, "report:monthly", timeout=10, events=TracingEvents("report:{name}"))
    with request_span as parent:
        releasing = release_once_queued(redis_client, "report:monthly", b"lock", holder.finish)
        assert waiter.acquire(blocking_timeout=30)
        releasing.join(30)
    fence = waiter.fence
    waiter.release()
    [span] = finished(spans, "lock ")
    assert span.name == "lock report:{name}"
    attributes = dict(span.attributes)
    assert attributes["dcoord.kind"] == "lock" and attributes["dcoord.template"] == "report:{name}"
    assert attributes["dcoord.outcome"] == "acquired"
    assert attributes["dcoord.fence"] == fence > holder.fence
    assert 0 < attributes["dcoord.holder.ttl_ms"] <= 30_000  # the holder's remaining TTL when the wait began
    assert attributes["dcoord.wait_ms"] > 0
    assert span.end_time - span.start_time == pytest.approx(attributes["dcoord.wait_ms"] * 1e6, rel=0.01)
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert_no_rendered_name(span, "report:monthly")


def test_an_uncontended_acquire_makes_no_span(spans, spawn, redis_client):
    waiter = Lock(redis_client, "report:daily", timeout=10, events=TracingEvents("report:{name}"))
    for _ in range(3):
        assert waiter.acquire()
        waiter.release()
    assert waiter.acquire(blocking=False)
    waiter.release()
    assert finished(spans) == []
    # After a contended acquire the next blocking one queues at once (the lock's hint): granted
    # by that very call, it did not wait, and makes no span either.
    holder = spawn("report:daily", timeout=30)
    releasing = release_once_queued(redis_client, "report:daily", b"lock", holder.finish)
    assert waiter.acquire(blocking_timeout=30)
    releasing.join(30)
    waiter.release()
    assert len(finished(spans)) == 1
    assert waiter.acquire()
    waiter.release()
    assert len(finished(spans)) == 1


def test_a_timeout_makes_an_error_span(spans, spawn, redis_client):
    holder = spawn("report:yearly", timeout=30)
    waiter = Lock(redis_client, "report:yearly", timeout=10, events=TracingEvents("report:{name}"))
    assert not waiter.acquire(blocking_timeout=0.2)
    [span] = finished(spans)
    assert span.name == "lock report:{name}"
    assert span.attributes["dcoord.outcome"] == "timeout"
    assert span.attributes["dcoord.wait_ms"] >= 200
    assert 0 < span.attributes["dcoord.holder.ttl_ms"] <= 30_000
    assert "dcoord.fence" not in span.attributes
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "timeout"
    holder.finish()


def test_a_refused_acquire_makes_a_span_without_error(spans, spawn, redis_client):
    holder = spawn("report:weekly")  # no timeout: the refusal says -1
    waiter = Lock(redis_client, "report:weekly", timeout=10, events=TracingEvents("report:{name}"))
    assert not waiter.acquire(blocking=False)
    [span] = finished(spans)
    assert span.attributes["dcoord.outcome"] == "refused"
    assert span.attributes["dcoord.holder.ttl_ms"] == -1
    assert span.status.status_code is StatusCode.UNSET
    holder.finish()


def test_a_lost_hold_makes_an_error_span(spans, redis_client):
    held = Lock(redis_client, "report:lost", timeout=0.2, events=TracingEvents("report:{name}"))
    assert held.acquire()
    fence = held.fence
    time.sleep(0.5)  # the TTL ends on Redis's clock
    with pytest.raises(LockNotOwnedError):
        held.release()
    [span] = finished(spans)
    assert span.name == "lock report:{name}"
    assert span.attributes["dcoord.outcome"] == "lost" and span.attributes["dcoord.fence"] == fence
    assert span.attributes["dcoord.held_ms"] >= 500
    assert span.status.status_code is StatusCode.ERROR


def test_a_read_that_waited_for_a_writer(spans, spawn, redis_client):
    holder = spawn("ledger:7", mode="write", timeout=30)
    rw = ReadWriteLock(redis_client, "ledger:7", timeout=10, events=TracingEvents("ledger:{id}"))
    releasing = release_once_queued(redis_client, "ledger:7", b"rw", holder.finish)
    assert rw.read.acquire(blocking_timeout=30)
    releasing.join(30)
    rw.read.release()
    [span] = finished(spans)
    assert span.name == "rwlock ledger:{id}"
    assert span.attributes["dcoord.kind"] == "rwlock" and span.attributes["dcoord.rwlock.mode"] == "read"
    assert span.attributes["dcoord.outcome"] == "acquired" and span.attributes["dcoord.fence"] > 0


def _hold_permit(url: str, name: str, held: Any, release: Any) -> None:
    semaphore = Semaphore(redis.Redis.from_url(url), name, limit=1, timeout=30)
    assert semaphore.acquire()
    held.set()
    release.wait(30)
    semaphore.release()


def test_a_permit_that_waited_carries_the_limit(spans, redis_client, redis_url):
    held, release = CTX.Event(), CTX.Event()
    child = CTX.Process(target=_hold_permit, args=(redis_url, "exports", held, release))
    child.start()
    try:
        assert held.wait(30)
        semaphore = Semaphore(redis_client, "exports", limit=1, timeout=10, events=MetricsEvents(template="exports"))
        releasing = release_once_queued(redis_client, "exports", b"sem", release.set)
        assert semaphore.acquire(blocking=True, blocking_timeout=30)
        releasing.join(30)
        semaphore.release()
    finally:
        release.set()
        child.join(30)
    [span] = finished(spans)
    assert span.name == "semaphore exports"
    assert span.attributes["dcoord.outcome"] == "acquired" and span.attributes["dcoord.semaphore.limit"] == 1


def test_an_asyncio_acquire_that_waited(spans, spawn, redis_client, redis_url, request_span):
    holder = spawn("report:async", timeout=30)

    async def main() -> int:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            waiter = AsyncLock(client, "report:async", timeout=10, events=TracingEvents("report:{name}"))
            assert await waiter.acquire(blocking_timeout=30)
            fence = waiter.fence
            await waiter.release()
            return fence
        finally:
            await client.aclose()

    with request_span as parent:
        releasing = release_once_queued(redis_client, "report:async", b"lock", holder.finish)
        fence = asyncio.run(main())
        releasing.join(30)
    [span] = finished(spans, "lock ")
    assert span.name == "lock report:{name}" and span.attributes["dcoord.fence"] == fence
    assert span.parent.span_id == parent.get_span_context().span_id


def test_tracing_off_makes_no_span(redis_client, spawn):
    EXPORTER.clear()
    assert not tracing.enabled()
    holder = spawn("report:off", timeout=30)
    waiter = Lock(redis_client, "report:off", timeout=10, events=TracingEvents("report:{name}"))
    assert not waiter.acquire(blocking_timeout=0.1)
    releasing = release_once_queued(redis_client, "report:off", b"lock", holder.finish)
    assert waiter.acquire(blocking_timeout=30)
    releasing.join(30)
    waiter.release()
    assert EXPORTER.get_finished_spans() == ()


def commands_of(client: redis.Redis, action) -> dict[str, int]:
    """The commands redis-server ran for ``action()`` (a script's own commands included), by name."""
    client.config_resetstat()
    action()
    stats = client.info("commandstats")
    ours = ("cmdstat_info", "cmdstat_config|resetstat")
    return {name: stat["calls"] for name, stat in stats.items() if name not in ours}


def test_tracing_adds_no_redis_command(spans, redis_client, spawn):
    """A traced lock, tracing on, runs exactly the commands of a lock without any events object."""
    plain = Lock(redis_client, "report:calls", timeout=10)
    traced = Lock(redis_client, "report:calls", timeout=10, events=TracingEvents("report:{name}"))

    def pair(lock: Lock) -> None:
        assert lock.acquire()
        lock.release()

    def refused(lock: Lock) -> None:
        assert not lock.acquire(blocking=False)

    pair(plain)  # the scripts are loaded, the registry made
    assert commands_of(redis_client, lambda: pair(traced)) == commands_of(redis_client, lambda: pair(plain))
    holder = spawn("report:calls", timeout=30)
    refused_traced = commands_of(redis_client, lambda: refused(traced))
    assert refused_traced == commands_of(redis_client, lambda: refused(plain))
    assert refused_traced["cmdstat_evalsha"] == 1
    holder.finish()
    [span] = finished(spans)  # the refusal was traced
    assert span.attributes["dcoord.outcome"] == "refused"


def test_a_provider_of_its_own(redis_client, spawn):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(tracer_provider=provider)
    try:
        holder = spawn("report:own", timeout=30)
        assert not Lock(redis_client, "report:own", events=TracingEvents()).acquire(blocking=False)
        holder.finish()
    finally:
        tracing.disable()
    [span] = exporter.get_finished_spans()
    assert span.name == "lock (untemplated)"
    assert span.instrumentation_scope.name == "django_redis_coord"


def test_a_force_release_is_an_event_of_the_current_span(spans, spawn, redis_client, request_span):
    holder = spawn("report:stuck", timeout=30)
    with request_span as current:
        result = HolderListing(redis_client).force_release("report:stuck", expected_fence=holder.fence)
    assert result.released
    assert holder.finish() == "LOST"
    [event] = [event for event in current.events if event.name == "dcoord.force_release"]
    assert dict(event.attributes) == {
        "dcoord.kind": "lock", "dcoord.force_release.result": "released", "dcoord.fence": holder.fence,
        "dcoord.force_release.fence_after": result.fence_after, "dcoord.force_release.handed_off": False,
    }


def test_a_force_release_outside_any_span_gets_a_span_of_its_own(spans, spawn, redis_client):
    holder = spawn("report:stuck", timeout=30)
    result = HolderListing(redis_client).force_release("report:stuck", expected_fence=holder.fence)
    assert result.released and holder.finish() == "LOST"
    [span] = finished(spans)
    assert span.name == "force release lock"
    [event] = span.events
    assert event.name == "dcoord.force_release" and event.attributes["dcoord.fence"] == holder.fence
    assert_no_rendered_name(span, "report:stuck")


# -- Django ----------------------------------------------------------------------------------------
def coord(**extra):
    return override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD, **extra})


@pytest.fixture
def django_spans(redis_client):
    """``TRACING`` on, through the setting; the spans, cleared first."""
    EXPORTER.clear()
    with coord(TRACING=True):
        assert tracing.enabled()
        yield EXPORTER
    assert not tracing.enabled()


@pytest.mark.django_db
def test_a_locked_view_that_waited_is_a_child_of_the_request_span(django_spans, spawn, redis_client, client,
                                                                  request_span):
    redis_client.set("go:x", 1)  # the view returns at once
    holder = spawn("wait:x", timeout=30)
    with request_span as parent:
        releasing = release_once_queued(redis_client, "wait:x", b"lock", holder.finish)
        response = client.get("/t/wait/x/")
        releasing.join(30)
    assert response.status_code == 200
    [span] = finished(django_spans, "lock ")
    assert span.name == "lock wait:{name}" and span.attributes["dcoord.outcome"] == "acquired"
    assert span.parent.span_id == parent.get_span_context().span_id
    assert_no_rendered_name(span, "wait:x")


def test_the_factories_trace_under_their_template(django_spans, spawn):
    holder = spawn("invoice:42", timeout=30)
    assert not lock("invoice:42", template="invoice:{pk}").acquire(blocking=False)
    holder.finish()
    [span] = finished(django_spans)
    assert span.name == "lock invoice:{pk}" and span.attributes["dcoord.outcome"] == "refused"


@pytest.mark.django_db
def test_rate_limit_decisions_are_events_of_the_request_span(django_spans, client, request_span):
    with request_span as current:
        answers = [client.get("/t/rl/gcra/ada/").status_code for _ in range(3)]
    assert answers == [200, 200, 429]  # rate="3/m", burst=2
    events = [dict(event.attributes) for event in current.events if event.name == "dcoord.ratelimit"]
    assert [event["dcoord.ratelimit.allowed"] for event in events] == [True, True, False]
    assert [event["dcoord.ratelimit.remaining"] for event in events] == [1, 0, 0]
    assert {event["dcoord.template"] for event in events} == {"rl:{name}"}
    assert {event["dcoord.kind"] for event in events} == {"ratelimit"}
    assert {event["dcoord.ratelimit.limit"] for event in events} == {2}
    assert events[0]["dcoord.ratelimit.retry_after_ms"] == 0 and events[2]["dcoord.ratelimit.retry_after_ms"] > 0
    assert [span.name for span in finished(django_spans)] == ["GET /report"]  # no span per decision
    assert all("ada" not in str(value) for event in events for value in event.values())


@pytest.mark.django_db
def test_tracing_setting_off_makes_no_span_nor_event(redis_client, spawn, client, request_span):
    EXPORTER.clear()
    holder = spawn("invoice:43", timeout=30)
    assert not lock("invoice:43", template="invoice:{pk}").acquire(blocking=False)
    holder.finish()
    with request_span as current:
        assert client.get("/t/rl/gcra/bob/").status_code == 200
    assert not tracing.enabled()
    assert [span.name for span in EXPORTER.get_finished_spans()] == ["GET /report"]
    assert len(current.events) == 0


def test_the_tracing_setting_is_checked(monkeypatch):
    with coord(TRACING="yes"):
        assert [(e.id, "TRACING" in e.msg) for e in check_settings()] == [("django_redis_coord.E013", True)]
    monkeypatch.setattr(tracing_options, "TRACING_MODULE", "opentelemetry_not_installed.trace")
    with coord(TRACING=True):
        [error] = check_settings()
        assert not tracing.enabled()
    assert error.id == "django_redis_coord.E025" and "django-redis-coord[otel]" in error.hint


@pytest.mark.django_db
def test_an_admin_force_release_is_an_event_of_the_request_span(django_spans, spawn, django_user_model,
                                                                request_span):
    holder = spawn("stuck:job", timeout=60)
    client = client_for(make_user(django_user_model, "root", staff=True, superuser=True))
    form = confirmed_form(client, "stuck:job")
    with request_span as current:
        assert client.post(release_url("stuck:job"), form).status_code == 302
    assert holder.finish() == "LOST"
    [event] = [event for event in current.events if event.name == "dcoord.force_release"]
    assert event.attributes["dcoord.force_release.result"] == "released"
    assert event.attributes["dcoord.fence"] == holder.fence


def test_a_command_force_release_gets_a_span_of_its_own(django_spans, spawn):
    holder = spawn("stuck:cron", timeout=60)
    call_command("locks", "release", "stuck:cron", interactive=False, stdout=io.StringIO(), stderr=io.StringIO())
    assert holder.finish() == "LOST"
    [span] = finished(django_spans)
    assert span.name == "force release lock"
    [event] = span.events
    assert event.attributes["dcoord.force_release.result"] == "released"
    assert event.attributes["dcoord.fence"] == holder.fence
