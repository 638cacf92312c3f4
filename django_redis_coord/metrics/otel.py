"""OpenTelemetry metrics through ``opentelemetry-api`` (``pip install "django-redis-coord[otel]"``).

:class:`OtelRecorder` makes its instruments on a meter (by default the global meter provider's
``django_redis_coord`` meter: whatever SDK and exporter the application set up receive them),
with the attributes ``template`` and ``kind``:

* ``django_redis_coord.acquire.wait`` (histogram, s), ``django_redis_coord.hold.duration``
  (histogram, s, released holds);
* ``django_redis_coord.acquisitions``, ``django_redis_coord.contentions``,
  ``django_redis_coord.losses``, ``django_redis_coord.ratelimit.admitted`` and
  ``django_redis_coord.ratelimit.limited`` (counters; the last two count the calls a
  ``@rate_limited`` admitted and refused);

and, given :class:`~django_redis_coord.metrics.gauges.HolderGauges`, observable gauges read from
the holder registry at each collection, with the attribute ``kind``:
``django_redis_coord.holders``, ``django_redis_coord.waiters``, ``django_redis_coord.oldest_hold`` (s).

The SDK takes several microseconds per measurement: like every recorder, this one is called by
the metrics' background thread (:func:`~django_redis_coord.metrics.feed`), never in a lock's call,
and it adds each batch's counts once per template and kind (:meth:`OtelRecorder.batch_done`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Optional

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ._recording import BUCKETS, Recorder
from .gauges import HolderGauges, KindFigures

__all__ = ["OtelRecorder", "METER_NAME"]

METER_NAME = "django_redis_coord"


class OtelRecorder(Recorder):
    """The hold metrics on ``meter`` (the global provider's ``django_redis_coord`` meter by default)."""

    def __init__(self, meter: Optional[Meter] = None, *, gauges: Optional[HolderGauges] = None) -> None:
        if meter is None:
            meter = metrics.get_meter(METER_NAME)
        name = METER_NAME + "."
        self.wait = meter.create_histogram(name + "acquire.wait", unit="s", description="Time spent acquiring.",
                                           explicit_bucket_boundaries_advisory=list(BUCKETS))
        self.hold = meter.create_histogram(name + "hold.duration", unit="s", description="Released holds.",
                                           explicit_bucket_boundaries_advisory=list(BUCKETS))
        self.acquisitions = meter.create_counter(name + "acquisitions", unit="{hold}", description="Holds begun.")
        self.contentions = meter.create_counter(name + "contentions", unit="{acquire}",
                                                description="Acquires that gave up because the key was taken.")
        self.losses = meter.create_counter(name + "losses", unit="{hold}", description="Holds found lost.")
        self.rate_admitted = meter.create_counter(name + "ratelimit.admitted", unit="{call}",
                                                  description="Calls a rate limit admitted.")
        self.rate_limited = meter.create_counter(name + "ratelimit.limited", unit="{call}",
                                                 description="Calls a rate limit refused.")
        self._counters = {"acquired": self.acquisitions, "contended": self.contentions, "lost": self.losses,
                          "admitted": self.rate_admitted, "limited": self.rate_limited}
        self._attributes: dict[tuple[str, str], dict[str, str]] = {}
        self._counted: dict[tuple[str, str, str], int] = {}
        self.gauges = gauges
        if gauges is not None:
            meter.create_observable_gauge(name + "holders", [self._observe("holders")], unit="{hold}",
                                          description="Live holds (one per semaphore permit, per reader).")
            meter.create_observable_gauge(name + "waiters", [self._observe("waiters")], unit="{caller}",
                                          description="Callers queued behind a live hold.")
            meter.create_observable_gauge(name + "oldest_hold", [self._observe("oldest_hold")], unit="s",
                                          description="Age of the oldest live hold.")

    def attributes(self, template: str, kind: str) -> dict[str, str]:
        key = (template, kind)
        found = self._attributes.get(key)
        if found is None:
            found = self._attributes[key] = {"template": template, "kind": kind}
        return found

    def _count(self, counter: str, template: str, kind: str) -> None:
        key = (counter, template, kind)
        self._counted[key] = self._counted.get(key, 0) + 1

    def acquired(self, template: str, kind: str, wait_time: float) -> None:
        self.wait.record(wait_time, self.attributes(template, kind))
        self._count("acquired", template, kind)

    def contended(self, template: str, kind: str, wait_time: float) -> None:
        self._count("contended", template, kind)

    def released(self, template: str, kind: str, held_time: Optional[float]) -> None:
        if held_time is not None:
            self.hold.record(held_time, self.attributes(template, kind))

    def lost(self, template: str, kind: str, held_time: Optional[float]) -> None:
        self._count("lost", template, kind)

    def admitted(self, template: str, kind: str, value: Optional[float]) -> None:
        self._count("admitted", template, kind)

    def limited(self, template: str, kind: str, value: Optional[float]) -> None:
        self._count("limited", template, kind)

    def batch_done(self) -> None:
        """Add the batch's counts to the counters, once per template and kind."""
        counted, self._counted = self._counted, {}
        for (counter, template, kind), count in counted.items():
            self._counters[counter].add(count, self.attributes(template, kind))

    def _observe(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            reading: Optional[dict[str, KindFigures]] = self.gauges.read() if self.gauges is not None else None
            return [Observation(getattr(found, field), {"kind": kind}) for kind, found in (reading or {}).items()]

        return callback
