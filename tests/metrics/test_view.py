"""``/metrics``: the URL include serves the real prometheus-client registry, as Prometheus scrapes it."""

from __future__ import annotations

import subprocess
import sys

from django.test import Client, override_settings
from django.urls import include, path
from prometheus_client.parser import text_string_to_metric_families

from django_redis_coord import lock
from django_redis_coord.config import metrics as configured
from tests.metrics.test_django_metrics import coord

urlpatterns = [path("", include("django_redis_coord.metrics.urls"))]


def scraped(text: str, name: str, labels: dict) -> float:
    """The value of the sample ``name`` with ``labels`` in an exposition, as Prometheus reads it."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


@override_settings(ROOT_URLCONF=__name__)
def test_the_include_serves_the_holds_counted_and_held_now(redis_client, monkeypatch):
    # The gauges serve one reading for up to ``max_age`` (1 s) to every scrape of the process, of
    # any test: a scrape within 1 s of an earlier one (this test's first, or another test's) is
    # served that reading, made before the hold below began.  With max_age 0 each scrape reads
    # the registry, so the second one is made while the hold is live (their sharing is checked in
    # tests/metrics/test_recorders.py).
    monkeypatch.setattr(configured._gauges, "max_age", 0.0)
    labels = {"template": "scrape:{n}", "kind": "lock"}
    with coord(METRICS=["prometheus"]):
        before = scraped(Client().get("/metrics").content.decode(), "django_redis_coord_acquisitions_total", labels)
        for n in range(3):
            with lock(f"scrape:{n}", template="scrape:{n}"):
                pass
        with lock("scrape:held", template="scrape:{n}"):
            response = Client().get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")  # what prometheus_client serves
    text = response.content.decode()
    assert scraped(text, "django_redis_coord_acquisitions_total", labels) - before == 4
    assert scraped(text, "django_redis_coord_holders", {"kind": "lock"}) >= 1  # the hold live at the scrape


@override_settings(ROOT_URLCONF=__name__)
def test_openmetrics_when_the_scraper_asks_and_only_get(redis_client):
    with coord(METRICS=["prometheus"]):
        client = Client()
        response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
        assert response["Content-Type"].startswith("application/openmetrics-text")
        assert response.content.rstrip().endswith(b"# EOF")
        assert client.post("/metrics").status_code == 405


def test_without_prometheus_client_the_urlconf_says_what_to_install():
    """Loading the include without prometheus_client fails at start-up with the extra to install
    (not a 500 at every scrape)."""
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "import django; from django.conf import settings; settings.configure(); django.setup()\n"
        "from django.core.exceptions import ImproperlyConfigured\n"
        "try:\n"
        "    import django_redis_coord.metrics.urls\n"
        "except ImproperlyConfigured as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "django-redis-coord[prometheus]" in out.stdout, out.stdout
