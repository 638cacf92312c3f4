"""The admin's contention page: permissions, the charts drawn from the history in Redis, escaping,
and the link from the holders page."""

from __future__ import annotations

import math
import re
import time

import pytest
from django.conf import settings
from django.test import override_settings
from django.urls import reverse

from django_redis_coord import lock, locked
from django_redis_coord.admin.svg_charts import format_seconds
from django_redis_coord.config.metrics import configured_recorder
from django_redis_coord.metrics import HistoryRecorder, MetricsEvents, feed
from django_redis_coord.metrics.log_buckets import RELATIVE_ERROR
from django_redis_coord.signals import lock_released
from django_redis_coord.testing.server import free_port
from tests.operators.test_admin import client_for, make_user

pytestmark = pytest.mark.django_db

PAGE = "admin:django_redis_coord_holder_contention"


@pytest.fixture
def viewer(django_user_model):
    return make_user(django_user_model, "viewer", staff=True, perms=("view_holder",))


@pytest.fixture
def recording(redis_client):
    with override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD, "METRICS": ["history"]}):
        yield configured_recorder("history")


@locked("invoice:{pk}")
def send_invoice(pk):
    return pk


def test_the_page_needs_the_view_permission(django_user_model, redis_client):
    assert client_for().get(reverse(PAGE)).status_code == 302  # to the login page
    plain = make_user(django_user_model, "plain", staff=True)
    assert client_for(plain).get(reverse(PAGE)).status_code == 403


def test_a_chart_per_template_from_the_history(viewer, recording):
    for pk in range(12):
        send_invoice(pk)
    holder = lock("invoice:3", template="invoice:{pk}")
    assert holder.acquire(blocking=False)
    for _ in range(3):
        assert not lock("invoice:3", template="invoice:{pk}").acquire(blocking=False)
    holder.release()
    with lock("report:daily", template="report:{day}"):
        pass
    feed()
    assert recording.flush() == 1
    response = client_for(viewer).get(reverse(PAGE))
    assert response.status_code == 200
    html = response.content.decode()
    sections = re.findall(r'<div class="module dcoord-template" data-template="([^"]+)">', html)
    assert sections == ["invoice:{pk}", "report:{day}"]  # the most contended first
    invoice = html[html.index('data-template="invoice:{pk}"'):html.index('data-template="report:{day}"')]
    assert "<strong>13</strong> acquisitions" in invoice
    assert '<strong class="contentions">3</strong> contentions' in invoice
    assert invoice.count("<svg") == 3 and invoice.count('class="bar"') == 1  # contentions this minute
    assert invoice.count('class="series"') + invoice.count("<circle") >= 2  # p50 and p99 of the waits
    assert 'id="history-off"' not in html


def test_template_names_are_escaped(viewer, recording, redis_client):
    hostile = '<script>alert("x")</script>{pk}'
    recording.contended(hostile, "lock", 0.0)
    recording.acquired(hostile, "lock", 0.01)
    recording.flush()
    html = client_for(viewer).get(reverse(PAGE)).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html


def test_without_the_history_the_page_says_how_to_turn_it_on(viewer, redis_client):
    html = client_for(viewer).get(reverse(PAGE)).content.decode()
    assert 'id="history-off"' in html and 'id="no-history"' in html


def test_minutes_are_one_of_the_offered_windows(viewer, recording):
    client = client_for(viewer)
    assert "The last 15 minutes" in client.get(reverse(PAGE) + "?minutes=15").content.decode()
    assert "The last 60 minutes" in client.get(reverse(PAGE) + "?minutes=99999").content.decode()
    assert "The last 60 minutes" in client.get(reverse(PAGE) + "?minutes=x").content.decode()


def test_redis_unreachable_is_a_503_page(viewer):
    url = f"redis://127.0.0.1:{free_port()}/0"
    with override_settings(DJANGO_REDIS_COORD={"URL": url, "CLIENT_OPTIONS": {"socket_connect_timeout": 0.5}}):
        response = client_for(viewer).get(reverse(PAGE))
    assert response.status_code == 503 and b"redis-unavailable" in response.content


def test_the_holders_page_links_to_it(viewer, redis_client):
    html = client_for(viewer).get(reverse("admin:django_redis_coord_holder_changelist")).content.decode()
    assert f'href="{reverse(PAGE)}"' in html and 'id="contention-link"' in html


def test_durations_are_written_for_people():
    assert [format_seconds(s) for s in (0.0004, 0.0123, 2.5, 100, 900)] == ["0.4 ms", "12.3 ms", "2.5 s", "100 s",
                                                                             "15 min"]


def test_the_history_of_other_processes_shows_without_recording_here(viewer, redis_client):
    elsewhere = HistoryRecorder(redis_client, flush_every=3600)
    elsewhere.acquired("worker:{n}", "lock", 0.02)
    elsewhere.flush()
    html = client_for(viewer).get(reverse(PAGE)).content.decode()
    assert 'data-template="worker:{n}"' in html and 'id="history-off"' in html


def nearest_rank(durations: list[float], q: float) -> float:
    """The ``q`` percentile of ``durations`` by nearest rank: the ``ceil(q * n)``-th shortest."""
    ordered = sorted(durations)
    return ordered[max(1, math.ceil(round(q * len(ordered), 9))) - 1]


def figures(html: str, template: str) -> dict[str, float]:
    """The percentiles (seconds) the page gives for ``template``, and its count of holds."""
    start = html.index(f'data-template="{template}"')
    section = html[start:html.index("dcoord-charts", start)]
    found = {name: float(value) for name, value in re.findall(r'class="(\w+-p\d+)" data-seconds="([^"]+)"', section)}
    found["holds"] = int(re.search(r'class="holds">(\d+)<', section).group(1))
    return found


def test_hold_percentiles_are_the_held_durations_within_the_stated_error(viewer, recording, redis_client):
    """Locks held for known durations, templated and not: the page's hold p50 and p99 are the
    nearest-rank percentiles of the durations held, within the error the page states; holds of a
    minute and of an hour (their release events fed as a release sends them) are counted as such."""
    feed()
    recording.flush()
    redis_client.flushdb()  # nothing but this test's holds
    held: dict[str, list[float]] = {}

    def note(sender, held_time=None, template=None, **kwargs):  # every release of this process, as recorded
        if held_time is not None:
            held.setdefault(template or "(untemplated)", []).append(held_time)

    lock_released.connect(note, weak=False)
    try:
        for n, seconds in enumerate((0.3, 0.3, 1.0)):
            with lock(f"job:{n}", timeout=30, template="job:{n}"):
                time.sleep(seconds)
        for n, seconds in enumerate((0.3, 1.0, 1.0)):
            with lock(f"maintenance:{n}", timeout=30):  # no template: "(untemplated)"
                time.sleep(seconds)
        feed()
    finally:
        lock_released.disconnect(note)
    # Long holds, through the same path a release takes (the events of a core primitive's hold).
    long_holds = [60.0, 60.0, 3600.0]
    events = MetricsEvents(recording, template="backup:{night}")
    for seconds in long_holds:
        events.released(None, fence=1, held_time=seconds)
    feed()
    recording.flush()
    held["backup:{night}"] = long_holds
    assert len(held["job:{n}"]) == 3 and len(held["(untemplated)"]) >= 3

    html = client_for(viewer).get(reverse(PAGE)).content.decode()
    method = re.search(r'<span id="percentiles-method">(.*?)</span>', html, re.S).group(1)
    assert "nearest-rank" in method and f"within {RELATIVE_ERROR * 100:g} %" in method
    for template, durations in held.items():
        shown = figures(html, template)
        assert shown["holds"] == len(durations), template
        for name, q in (("hold-p50", 0.5), ("hold-p99", 0.99)):
            assert shown[name] == pytest.approx(nearest_rank(durations, q), rel=RELATIVE_ERROR), (template, name)
    assert figures(html, "backup:{night}")["hold-p99"] == pytest.approx(3600.0, rel=RELATIVE_ERROR)
    assert "hold p50 <strong" in html and ">60.4 s</strong>" in html  # a minute, for people
