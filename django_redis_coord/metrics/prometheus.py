"""Prometheus metrics through ``prometheus-client`` (``pip install "django-redis-coord[prometheus]"``).

:class:`PrometheusRecorder` defines, on a registry (``prometheus_client.REGISTRY`` by default, the
one django-prometheus and ``prometheus_client.start_http_server`` expose), labelled by ``template``
and ``kind``:

* ``django_redis_coord_acquire_wait_seconds`` (histogram): time spent acquiring, per acquisition;
* ``django_redis_coord_acquisitions_total``, ``django_redis_coord_contentions_total`` (acquires that
  gave up: a ``@locked`` view's 409), ``django_redis_coord_losses_total`` (counters);
* ``django_redis_coord_hold_seconds`` (histogram): how long each released hold lasted;
* ``django_redis_coord_ratelimit_admitted_total``, ``django_redis_coord_ratelimit_limited_total``
  (counters): the calls a ``@rate_limited`` admitted and refused (``kind`` ``ratelimit`` or
  ``ratelimit-window``).

:class:`HolderCollector` reads the holder registry when scraped: ``django_redis_coord_holders``,
``django_redis_coord_waiters`` and ``django_redis_coord_oldest_hold_seconds`` by ``kind``, and
``django_redis_coord_registry_up`` (0 when Redis could not be read).

Under gunicorn and the like, set ``PROMETHEUS_MULTIPROC_DIR`` as prometheus-client documents: the
histograms and counters of every worker process are then summed by its ``MultiProcessCollector``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Optional

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._recording import BUCKETS, Recorder, feed
from .gauges import HolderGauges

__all__ = ["PrometheusRecorder", "HolderCollector", "NAMESPACE"]

NAMESPACE = "django_redis_coord"
_LABELS = ("template", "kind")


class _Series:
    """The children of one (template, kind): made once, then used without a label lookup."""

    __slots__ = ("wait", "acquisitions", "contentions", "losses", "hold")

    def __init__(self, recorder: PrometheusRecorder, template: str, kind: str) -> None:
        self.wait = recorder.wait.labels(template, kind)
        self.acquisitions = recorder.acquisitions.labels(template, kind)
        self.contentions = recorder.contentions.labels(template, kind)
        self.losses = recorder.losses.labels(template, kind)
        self.hold = recorder.hold.labels(template, kind)


class _Feeding(Collector):
    """Registered first: a scrape hands the queued events to the recorders before it reads."""

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        feed()
        return iter(())


class PrometheusRecorder(Recorder):
    """The hold metrics on ``registry`` (each name may be defined once per registry); a scrape of
    that registry first hands the queued events over (:func:`~django_redis_coord.metrics.feed`)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None, *, namespace: str = NAMESPACE,
                 buckets: Sequence[float] = BUCKETS) -> None:
        registry = REGISTRY if registry is None else registry
        registry.register(_Feeding())
        common: dict[str, Any] = {"labelnames": _LABELS, "namespace": namespace, "registry": registry}
        self.wait = Histogram("acquire_wait_seconds", "Seconds spent acquiring, per acquisition.",
                              buckets=buckets, **common)
        self.acquisitions = Counter("acquisitions", "Holds begun.", **common)
        self.contentions = Counter("contentions", "Acquires that gave up because the key was taken.", **common)
        self.losses = Counter("losses", "Holds found lost (expired, taken over, not renewed in time).", **common)
        self.hold = Histogram("hold_seconds", "Seconds each released hold lasted.", buckets=buckets, **common)
        self.rate_admitted = Counter("ratelimit_admitted", "Calls a rate limit admitted.", **common)
        self.rate_limited = Counter("ratelimit_limited", "Calls a rate limit refused.", **common)
        self._series: dict[tuple[str, str], _Series] = {}

    def series(self, template: str, kind: str) -> _Series:
        key = (template, kind)
        found = self._series.get(key)
        if found is None:
            found = self._series[key] = _Series(self, template, kind)
        return found

    def acquired(self, template: str, kind: str, wait_time: float) -> None:
        series = self.series(template, kind)
        series.acquisitions.inc()
        series.wait.observe(wait_time)

    def contended(self, template: str, kind: str, wait_time: float) -> None:
        self.series(template, kind).contentions.inc()

    def released(self, template: str, kind: str, held_time: Optional[float]) -> None:
        if held_time is not None:
            self.series(template, kind).hold.observe(held_time)

    def lost(self, template: str, kind: str, held_time: Optional[float]) -> None:
        self.series(template, kind).losses.inc()

    def admitted(self, template: str, kind: str, value: Optional[float]) -> None:
        self.rate_admitted.labels(template, kind).inc()

    def limited(self, template: str, kind: str, value: Optional[float]) -> None:
        self.rate_limited.labels(template, kind).inc()


class HolderCollector(Collector):
    """A custom collector: the registry's gauges, read when scraped (see :class:`HolderGauges`).

    >>> REGISTRY.register(HolderCollector(HolderGauges(redis.Redis())))  # doctest: +SKIP
    """

    def __init__(self, gauges: HolderGauges, *, namespace: str = NAMESPACE) -> None:
        self.gauges = gauges
        self.namespace = namespace

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        name = self.namespace + "_"
        return (
            GaugeMetricFamily(name + "holders", "Live holds (one per semaphore permit, per reader).", labels=["kind"]),
            GaugeMetricFamily(name + "waiters", "Callers queued behind a live hold.", labels=["kind"]),
            GaugeMetricFamily(name + "oldest_hold_seconds", "Age of the oldest live hold.", labels=["kind"]),
            GaugeMetricFamily(name + "registry_up", "1 when the holder registry could be read, else 0."),
        )

    def describe(self) -> Iterator[Metric]:
        """The metric names, without reading Redis (``register()`` calls this)."""
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        holders, waiters, oldest, up = self._families()
        reading = self.gauges.read()
        up.add_metric([], 0.0 if reading is None else 1.0)
        for kind, found in (reading or {}).items():
            holders.add_metric([kind], found.holders)
            waiters.add_metric([kind], found.waiters)
            oldest.add_metric([kind], found.oldest_hold)
        return iter((holders, waiters, oldest, up) if reading is not None else (up,))
