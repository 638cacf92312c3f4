"""Metrics of holds for operators: Prometheus, OpenTelemetry, and a contention history in Redis.

Every series is labelled by the key *template* (``invoice:{pk}``), never by the rendered name: ten
thousand invoices locked under one template are one series.  ``@locked`` labels its holds with its
key template (the view's dotted path for a callable or default key), the factories with their
``template=`` argument (``lock("invoice:42", template="invoice:{pk}")``), and a hold made without
one is labelled :data:`DEFAULT_TEMPLATE`.

On a Django site, ``DJANGO_REDIS_COORD["METRICS"] = ["prometheus", "otel", "history"]`` turns the
exporters on (:mod:`.configured`).  Without Django, give a core primitive a :class:`MetricsEvents`
over the recorders wanted::

    >>> from django_redis_coord.metrics.prometheus import PrometheusRecorder   # doctest: +SKIP
    >>> events = MetricsEvents(PrometheusRecorder(), template="invoice:{pk}")   # doctest: +SKIP
    >>> with Lock(client, "invoice:42", events=events):                         # doctest: +SKIP
    ...     ...

One module per concern:

* :mod:`._recording`: the labels, the :class:`Recorder` interface, the fan-out that keeps the
  recorders off the lock's path (a lock queues its events; a background thread hands them over
  every second, :func:`feed` at once) and a failing recorder from the lock (logged at most once a
  minute);
* :mod:`.prometheus` and :mod:`.otel`: the two exporters (optional packages);
* :mod:`.gauges`: holders, waiters and the oldest hold, read from the holder registry when scraped;
* :mod:`.history` and :mod:`.history_reading`: the per-minute history in Redis behind the admin's
  contention page;
* :mod:`.options` and :mod:`.configured`: the Django setting.
"""

from __future__ import annotations

from ._recording import (
    BUCKETS,
    DEFAULT_TEMPLATE,
    MAX_TEMPLATE_LENGTH,
    MAX_TEMPLATES,
    OTHER_TEMPLATE,
    Fanout,
    MetricsEvents,
    Recorder,
    feed,
    label_of,
)
from .gauges import HolderGauges, KindFigures
from .history import HistoryRecorder
from .history_reading import TemplateHistory, read_history

__all__ = [
    "BUCKETS",
    "DEFAULT_TEMPLATE",
    "MAX_TEMPLATES",
    "MAX_TEMPLATE_LENGTH",
    "OTHER_TEMPLATE",
    "Fanout",
    "HistoryRecorder",
    "HolderGauges",
    "KindFigures",
    "MetricsEvents",
    "Recorder",
    "TemplateHistory",
    "feed",
    "label_of",
    "read_history",
]
