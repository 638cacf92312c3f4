"""DJANGO_REDIS_COORD["METRICS"]: the factories and @locked feed Prometheus, OpenTelemetry and the
history under their key template (never the rendered name), the signals carry it, and the system
checks explain a bad setting."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from django.conf import settings
from django.http import HttpResponse
from django.test import RequestFactory, override_settings
from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import REGISTRY

from django_redis_coord import lock, locked, semaphore
from django_redis_coord.checks import check_settings
from django_redis_coord.config.metrics import configured_recorder
from django_redis_coord.config.shortcuts import alock
from django_redis_coord.core.exceptions import InvalidLockArgumentType, LockNotOwnedError
from django_redis_coord.metrics import DEFAULT_TEMPLATE, feed, read_history
from tests.metrics.test_recorders import otel_sums

GAUGES_MAX_AGE = 1.05


def coord(**extra):
    return override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD, **extra})


def sample(name: str, template: str, kind: str = "lock") -> float:
    return REGISTRY.get_sample_value(name, {"template": template, "kind": kind}) or 0.0


class Delta:
    """Prometheus' default registry gathers every test of the process: compare before and after."""

    NAMES = ("django_redis_coord_acquisitions_total", "django_redis_coord_contentions_total",
             "django_redis_coord_losses_total", "django_redis_coord_hold_seconds_count")

    def __init__(self, template: str, kind: str = "lock") -> None:
        self.template, self.kind = template, kind
        self.before = self.now()

    def now(self) -> tuple[float, ...]:
        return tuple(sample(name, self.template, self.kind) for name in self.NAMES)

    def __call__(self) -> tuple[float, ...]:
        """(acquisitions, contentions, losses, releases) since made."""
        return tuple(after - before for after, before in zip(self.now(), self.before))


@pytest.fixture
def prometheus(redis_client):
    with coord(METRICS=["prometheus"]):
        yield


@locked("invoice:{pk}")
def send_invoice(pk):
    return pk


def test_locked_labels_its_holds_with_its_key_template(prometheus):
    delta = Delta("invoice:{pk}")
    for pk in range(200):
        assert send_invoice(pk) == pk
    assert delta() == (200, 0, 0, 200)
    assert sample("django_redis_coord_acquisitions_total", "invoice:7") == 0  # never the rendered name


@locked
def nightly_report():
    return "done"


@locked(key=lambda tenant: f"tenant:{tenant}")
def tenant_job(tenant):
    return tenant


def test_a_default_or_callable_key_is_labelled_with_the_dotted_path(prometheus):
    bare = Delta(f"{__name__}.nightly_report")
    by_callable = Delta(f"{__name__}.tenant_job")
    nightly_report()
    tenant_job("a")
    tenant_job("b")
    assert bare()[0] == 1 and by_callable()[0] == 2


def test_a_with_block_is_labelled_with_its_template(prometheus):
    delta = Delta("report:{day}")
    with locked("report:{day}", params={"day": "2026-01-02"}):
        pass
    assert delta()[0] == 1


@pytest.mark.django_db  # closing a response sends request_finished, which looks at the database connections
def test_a_view_answering_409_counts_a_contention(prometheus, redis_client):
    @locked("order:{pk}")
    def view(request, pk):
        return HttpResponse("ok")

    delta = Delta("order:{pk}")
    holder = lock("order:5", template="order:{pk}")
    assert holder.acquire(blocking=False)
    assert view(RequestFactory().get("/"), pk=5).status_code == 409
    holder.release()
    response = view(RequestFactory().get("/"), pk=5)
    assert response.status_code == 200
    response.close()  # the view's hold ends with its response
    assert delta() == (2, 1, 0, 2)


def test_factories_take_the_template_by_keyword_else_a_default_label(prometheus):
    labelled, untemplated, permits = Delta("invoice:{pk}"), Delta(DEFAULT_TEMPLATE), Delta("export:{n}", "semaphore")
    with lock("invoice:42", template="invoice:{pk}"):
        pass
    with lock("invoice:43"):
        pass
    with semaphore("export:1", 2, template="export:{n}"):
        pass

    async def in_loop():
        async with alock("invoice:44", template="invoice:{pk}"):
            pass

    asyncio.run(in_loop())
    assert labelled()[0] == 2 and untemplated()[0] == 1 and permits()[0] == 1
    assert sample("django_redis_coord_acquisitions_total", "invoice:43") == 0
    with pytest.raises(InvalidLockArgumentType):
        lock("invoice:45", template=45)


def test_a_lost_hold_is_counted(prometheus):
    delta = Delta("short:{n}")
    held = lock("short:1", timeout=0.2, template="short:{n}")
    assert held.acquire(blocking=False)
    import time

    time.sleep(0.35)
    with pytest.raises(LockNotOwnedError):
        held.release()
    assert delta() == (1, 0, 1, 0)


def test_the_signals_carry_the_template(received, redis_client):
    with lock("invoice:42", template="invoice:{pk}"):
        pass
    with lock("invoice:43"):
        pass
    send_invoice(9)
    templates = [data["template"] for label, data in received if label == "acquired"]
    assert templates == ["invoice:{pk}", DEFAULT_TEMPLATE, "invoice:{pk}"]


def test_without_metrics_nothing_is_counted(redis_client):
    delta = Delta("invoice:{pk}")
    send_invoice(1)
    assert delta() == (0, 0, 0, 0)


@pytest.fixture(scope="module")
def otel_reader():
    """The global meter provider, set once for the process (as an application's start-up does)."""
    reader = InMemoryMetricReader()
    otel_metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


def test_opentelemetry_through_the_settings(otel_reader, redis_client):
    def acquisitions() -> float:
        return otel_sums(otel_reader).get(("django_redis_coord.acquisitions", "invoice:{pk}", "lock"), 0)

    before = acquisitions()
    with coord(METRICS=["otel"]):
        for pk in range(3):
            send_invoice(pk)
        assert configured_recorder("otel") is not None
        feed()  # what the metrics' thread does every second
        holder = lock("gauged", timeout=30)
        assert holder.acquire(blocking=False)
        time.sleep(GAUGES_MAX_AGE)  # the gauges' reading before the acquire is kept that long
        holders = otel_sums(otel_reader)[("django_redis_coord.holders", "", "lock")]
        holder.release()
    assert acquisitions() - before == 3
    assert holders >= 1


def test_the_history_goes_under_the_key_prefix(redis_client):
    with coord(METRICS=["history"], KEY_PREFIX="shop"):
        for pk in range(4):
            send_invoice(pk)
        history = configured_recorder("history")
        feed()
        assert history is not None and history.flush() == 1
    keys = [key.decode() for key in redis_client.scan_iter("*history*")]
    assert len(keys) == 1 and keys[0].startswith("shop:{history}:dcoord:history:")
    found = {h.template: h.total("acquisitions") for h in read_history(redis_client, "shop")}
    assert found == {"invoice:{pk}": 4}
    with coord(METRICS=["prometheus"]):
        assert configured_recorder("history") is None


@pytest.mark.parametrize("value, problem", [
    (["prometheus", "statsd"], "E019"), ("prometheus", "E019"), (["otel", "otel"], "E019"), ([3], "E019"),
])
def test_a_bad_metrics_setting_is_a_system_check_error_with_a_hint(value, problem):
    with coord(METRICS=value):
        errors = check_settings()
    assert [e.id for e in errors] == [f"django_redis_coord.{problem}"] and errors[0].hint


def test_a_missing_exporter_package_is_named_with_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what an environment without it gives
    with coord(METRICS=["prometheus", "history"]):
        errors = check_settings()
    assert [e.id for e in errors] == ["django_redis_coord.E020"]
    assert 'pip install "django-redis-coord[prometheus]"' in errors[0].hint


def test_good_metrics_settings_pass():
    with coord(METRICS=["prometheus", "otel", "history"]):
        assert check_settings() == []
