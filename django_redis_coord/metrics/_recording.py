"""What every metrics backend shares: the labels (key templates, bounded), the :class:`Recorder`
interface, and the fan-out that hands a hold's events to the recorders without ever letting one of
them break or slow the lock (:class:`Fanout`, :class:`MetricsEvents`).

A lock does not call the recorders: it appends its event to one queue of the process (at most
:data:`QUEUED` events; past that they are dropped and the drop is logged), and a background thread
hands the queue to the recorders every :data:`FEED_SECONDS` seconds (:func:`feed` does it at once:
a Prometheus scrape of a :class:`~django_redis_coord.metrics.prometheus.PrometheusRecorder`'s
registry does, and so may a test before reading).  What a recorder raises is logged at most once a
minute.  A forked child starts with an empty queue (the parent feeds its own events).

Nothing here imports Django, Prometheus or OpenTelemetry.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Optional

from ..core import tracing
from ..core.events import Events
from ..core.tracing import trace_loss, trace_wait
from ._background import Periodic

__all__ = [
    "BUCKETS",
    "DEFAULT_TEMPLATE",
    "OTHER_TEMPLATE",
    "MAX_TEMPLATES",
    "MAX_TEMPLATE_LENGTH",
    "Fanout",
    "MetricsEvents",
    "Recorder",
    "feed",
    "label_of",
    "FEED_SECONDS",
    "QUEUED",
]

logger = logging.getLogger("django_redis_coord.metrics")

#: The label of a hold made without a template (``lock("invoice:42")`` without ``template=``, a
#: core primitive whose :class:`MetricsEvents` has none): never the rendered name.
DEFAULT_TEMPLATE = tracing.DEFAULT_TEMPLATE  # "(untemplated)", the spans' too
#: The label of every template past :data:`MAX_TEMPLATES` in one process.
OTHER_TEMPLATE = "(other)"
#: Distinct template labels one process reports; later ones are counted under :data:`OTHER_TEMPLATE`.
MAX_TEMPLATES = 200
#: Longer templates are cut to this many characters.
MAX_TEMPLATE_LENGTH = 200
#: Upper bounds (seconds) of the wait and hold histograms' buckets (then +Inf), shared by the
#: Prometheus and OpenTelemetry histograms and the history kept in Redis.
BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                              30.0, 60.0, 300.0)

#: The ``kind`` label of each primitive's kind: a read-write lock's read and write holds are both
#: ``rwlock`` (the gauges' name for the registry's ``rw``); a kind not listed keeps its own name.
KIND_LABELS = {"lock": "lock", "semaphore": "semaphore", "redlock": "redlock", "read-write lock": "rwlock",
               "read hold of read-write lock": "rwlock", "write hold of read-write lock": "rwlock"}

#: Seconds between two log records of one recorder's failures (the ones between are counted).
LOG_EVERY = 60.0
#: Seconds between two hand-overs of the queued events to the recorders.
FEED_SECONDS = 1.0
#: Events queued at most between two hand-overs.
QUEUED = 100_000
#: Events handed over between two offers of the GIL to other threads (a lock waiting for it after
#: a round trip would otherwise wait for the whole batch).
CHUNK = 32


class _Labels:
    """Template -> label, with at most :data:`MAX_TEMPLATES` distinct labels in a process."""

    def __init__(self) -> None:
        self.known: set[str] = set()

    def __call__(self, template: Optional[str]) -> str:
        if template is None:
            return DEFAULT_TEMPLATE
        if template in self.known:
            return template
        if not isinstance(template, str):
            return DEFAULT_TEMPLATE
        label = template[:MAX_TEMPLATE_LENGTH]
        if label in self.known:
            return label
        if len(self.known) >= MAX_TEMPLATES:
            return OTHER_TEMPLATE
        self.known.add(label)  # one set operation (atomic under the GIL); a race may pass the cap by one
        return label


#: The labels of this process (shared by every recorder, so they agree).
label_of = _Labels()


class Recorder:
    """A metrics backend: one method per event of a hold, given the bounded template label, the
    primitive's kind (``"lock"``, ``"semaphore"``, ``"rwlock"``, ``"redlock"``: ``KIND_LABELS``)
    and a duration in seconds.

    The methods are called by ``feed()`` (one thread at a time), never in the lock's call;
    :meth:`batch_done` after each batch.  Keep them in memory (no I/O).  What they raise is logged
    now and then, never passed to a lock.
    """

    def acquired(self, template: str, kind: str, wait_time: float) -> None:
        """A new hold began after ``wait_time`` seconds of trying."""

    def contended(self, template: str, kind: str, wait_time: float) -> None:
        """An acquire gave up after ``wait_time`` seconds (the key was taken)."""

    def released(self, template: str, kind: str, held_time: Optional[float]) -> None:
        """A hold ended by its release after ``held_time`` seconds."""

    def lost(self, template: str, kind: str, held_time: Optional[float]) -> None:
        """A hold was found lost (expired, taken over, not renewed in time)."""

    def admitted(self, template: str, kind: str, value: Optional[float]) -> None:
        """A rate limit (``kind`` ``"ratelimit"`` or ``"ratelimit-window"``) admitted a call."""

    def limited(self, template: str, kind: str, value: Optional[float]) -> None:
        """A rate limit refused a call."""

    def batch_done(self) -> None:
        """The events of one hand-over were all given (a recorder may add up counts until then)."""


class _Failures:
    """Failures of recorders, logged at most once per :data:`LOG_EVERY` seconds per recorder class."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, tuple[float, int]] = {}

    def note(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            logged_at, missed = self._state.get(what, (-LOG_EVERY, 0))
            if now - logged_at < LOG_EVERY:
                self._state[what] = (logged_at, missed + 1)
                return
            self._state[what] = (now, 0)
        more = f" ({missed} more failure(s) since the last report)" if missed else ""
        logger.error("Metrics: %s failed: %r%s; the locks are not affected", what, exc, more, exc_info=exc)

    def clear(self) -> None:
        with self._lock:
            self._state.clear()


#: Every recorder failure of this process goes through here.
failures = _Failures()


#: The events not handed to their recorders yet: (recorders, event, template, kind, value).
_queue: deque[tuple[tuple[Recorder, ...], str, Optional[str], Any, Optional[float]]] = deque()
_feeding = threading.Lock()


class Fanout:
    """The recorders one event goes to: :meth:`record` queues it (see the module's text)."""

    def __init__(self, recorders: Iterable[Recorder]) -> None:
        self.recorders = tuple(recorders)

    def record(self, event: str, template: Optional[str], primitive: Any, value: Optional[float]) -> None:
        """``event`` (``"acquired"``, ``"contended"``, ``"released"`` or ``"lost"``; ``"admitted"`` or
        ``"limited"`` for a rate limit) of ``primitive``."""
        if len(_queue) >= QUEUED:
            failures.note("queueing metrics (the queue is full: events dropped until it is fed)",
                          OverflowError(QUEUED))
            return
        _queue.append((self.recorders, event, template, getattr(primitive, "kind", None), value))
        try:
            _feeder.ensure()
        except Exception as exc:  # no thread to be had (at shutdown, or none left): never the lock's problem
            failures.note("starting the metrics thread", exc)


def feed() -> int:
    """Hand every queued event to its recorders now; returns how many events."""
    fed = 0
    with _feeding:
        touched: dict[int, Recorder] = {}
        while True:
            try:
                recorders, event, template, kind, value = _queue.popleft()
            except IndexError:
                break
            try:
                label = label_of(template)
            except Exception as exc:  # a template whose hash raises, say
                failures.note("labelling", exc)
                continue
            kind = KIND_LABELS.get(kind, kind) if isinstance(kind, str) else "lock"
            for recorder in recorders:
                touched[id(recorder)] = recorder
                try:
                    getattr(recorder, event)(label, kind, value)
                except Exception as exc:
                    failures.note(type(recorder).__name__, exc)
            fed += 1
            if fed % CHUNK == 0:
                time.sleep(0)
        for recorder in touched.values():
            try:
                recorder.batch_done()
            except Exception as exc:
                failures.note(type(recorder).__name__, exc)
    return fed


_feeder = Periodic(feed, FEED_SECONDS, "django-redis-coord-metrics")


def _after_fork_in_child() -> None:
    global _feeding
    _queue.clear()
    _feeding = threading.Lock()
    failures._lock = threading.Lock()  # a thread of the parent may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class MetricsEvents(Events):
    """The ``events=`` of a core primitive that feeds metrics recorders, under one template label.

    >>> from django_redis_coord.metrics.prometheus import PrometheusRecorder  # doctest: +SKIP
    >>> recorder = PrometheusRecorder()                                       # doctest: +SKIP
    >>> with Lock(client, "invoice:42", events=MetricsEvents(recorder, template="invoice:{pk}")):  # doctest: +SKIP
    ...     ...

    Without ``template`` the label is ``DEFAULT_TEMPLATE``.  :meth:`bound` gives the same
    recorders under another template.  No method raises; the recorders get the events from
    ``feed()`` (see the module's text).  While tracing is on
    (``django_redis_coord.core.tracing.enable()``), the waits and losses are traced too, under
    the same template.
    """

    def __init__(self, *recorders: Recorder, template: Optional[str] = None) -> None:
        self.fanout = Fanout(recorders)
        self.template = template

    def bound(self, template: Optional[str]) -> MetricsEvents:
        """The same recorders under ``template``."""
        events = MetricsEvents(template=template)
        events.fanout = self.fanout
        return events

    def acquired(self, primitive: Any, *, fence: Optional[int], wait_time: float) -> None:
        self.fanout.record("acquired", self.template, primitive, wait_time)

    def contended(self, primitive: Any, *, wait_time: float, pttl: Optional[int], limit: Optional[int]) -> None:
        self.fanout.record("contended", self.template, primitive, wait_time)

    def released(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        self.fanout.record("released", self.template, primitive, held_time)

    def lost(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        self.fanout.record("lost", self.template, primitive, held_time)
        trace_loss(primitive, self.template, fence=fence, held_time=held_time)

    def waited(self, primitive: Any, *, outcome: str, wait_time: float, fence: Optional[int],
               pttl: Optional[int], limit: Optional[int]) -> None:
        trace_wait(primitive, self.template, outcome=outcome, wait_time=wait_time, fence=fence, pttl=pttl,
                   limit=limit)
