"""The contention history kept in Redis for the admin page: per minute and template, the counts of
acquisitions, contentions and losses and the histograms of waits and holds.

A lock never pays a round trip for it: :class:`HistoryRecorder` adds each event (handed over by
the metrics' thread) to counts kept in this process, and a thread of its own writes them every
:data:`FLUSH_SECONDS` seconds, all the minutes pending in one pipeline (one ``history_add``
script call per minute).  The histograms have log-spaced buckets
(:mod:`~django_redis_coord.metrics.log_buckets`): the percentiles read back are within 2 % of a
recorded duration, whatever its length.  What Redis keeps is bounded:

* one hash per minute, ``[KEY_PREFIX:]{history}:dcoord:history:<minute>`` (the minute since the
  epoch, by the recording process's clock), expiring :data:`RETENTION_SECONDS` after its last write;
* at most :data:`TEMPLATES_PER_MINUTE` templates in a minute's hash, whichever processes wrote
  them (the script counts them): the counts of any further template go to ``(other)``;
* a bounded number of fields per template: 3 counters and, per histogram, one count per bucket
  its durations fell in (at most :data:`~django_redis_coord.metrics.log_buckets.SIZE`; a few dozen
  in practice).

A failed write (Redis unreachable) drops that batch and is logged now and then.  After a fork the
child starts with no pending counts (the parent writes its own) and its own thread.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from typing import Any, Optional

from ..core.scripts import queue_script, sync_scripts
from ._background import Periodic
from ._recording import OTHER_TEMPLATE, Recorder, failures, feed
from .log_buckets import bucket

__all__ = [
    "HistoryRecorder",
    "history_key",
    "wait_field",
    "hold_field",
    "COUNTERS",
    "FLUSH_SECONDS",
    "RETENTION_SECONDS",
    "TEMPLATES_PER_MINUTE",
]

#: Seconds between two writes of a process's pending counts.
FLUSH_SECONDS = 5.0
#: A minute's hash expires this long after its last write (the admin page shows the last hour).
RETENTION_SECONDS = 65 * 60
#: Templates one minute's hash holds at most, over every process (then ``(other)``).
TEMPLATES_PER_MINUTE = 50

#: The counters of one template in one minute (see ``lua/history_add.lua``): acquisitions,
#: contentions, losses.  The histograms' fields are ``w:<bucket>`` (waits) and ``h:<bucket>``
#: (holds), a bucket of :mod:`~django_redis_coord.metrics.log_buckets`.
COUNTERS = ("a", "c", "l")
_ACQUIRED, _CONTENDED, _LOST = COUNTERS
WAIT_PREFIX, HOLD_PREFIX = "w:", "h:"


def wait_field(seconds: float) -> str:
    """The field counting a wait of ``seconds``."""
    return f"{WAIT_PREFIX}{bucket(seconds)}"


def hold_field(seconds: float) -> str:
    """The field counting a hold of ``seconds``."""
    return f"{HOLD_PREFIX}{bucket(seconds)}"


def history_key(prefix: str, minute: int) -> bytes:
    """The hash of ``minute`` (minutes since the epoch) under ``prefix`` (a ``KEY_PREFIX``)."""
    head = f"{prefix}:" if prefix else ""
    return f"{head}{{history}}:dcoord:history:{minute}".encode()


#: Every recorder of this process, for the fork and exit hooks.
_recorders: weakref.WeakSet[HistoryRecorder] = weakref.WeakSet()


class HistoryRecorder(Recorder):
    """Counts events per minute and template here, and writes them to ``client`` in the background.

    ``prefix``: the ``KEY_PREFIX`` the history keys go under.  Override :meth:`target` to pick the
    client and prefix at each write (the Django settings do).  ``clock`` gives the seconds since
    the epoch the minutes are counted in.
    """

    def __init__(self, client: Any = None, *, prefix: str = "", flush_every: float = FLUSH_SECONDS,
                 templates_per_minute: int = TEMPLATES_PER_MINUTE, retention: float = RETENTION_SECONDS,
                 clock: Any = time.time) -> None:
        self.client = client
        self.prefix = prefix
        self.templates_per_minute = templates_per_minute
        self.retention = retention
        self.clock = clock
        self._writer = Periodic(self.flush, flush_every, "django-redis-coord-history")
        self._reset()
        _recorders.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, dict[str, dict[str, int]]] = {}

    def target(self) -> tuple[Any, str]:
        """The client written to and the prefix of the keys, at each write."""
        return self.client, self.prefix

    # -- recording (in memory) -----------------------------------------------------------------
    def _add(self, template: str, *fields: str) -> None:
        minute = int(self.clock() // 60)
        with self._lock:
            rows = self._pending.get(minute)
            if rows is None:
                rows = self._pending[minute] = {}
            row = rows.get(template)
            if row is None:
                if len(rows) >= self.templates_per_minute:
                    template = OTHER_TEMPLATE
                row = rows.get(template)
                if row is None:
                    row = rows[template] = {}
            for name in fields:
                row[name] = row.get(name, 0) + 1
        self._writer.ensure()

    def acquired(self, template: str, kind: str, wait_time: float) -> None:
        self._add(template, _ACQUIRED, wait_field(wait_time))

    def contended(self, template: str, kind: str, wait_time: float) -> None:
        self._add(template, _CONTENDED)

    def released(self, template: str, kind: str, held_time: Optional[float]) -> None:
        if held_time is not None:
            self._add(template, hold_field(held_time))

    def lost(self, template: str, kind: str, held_time: Optional[float]) -> None:
        self._add(template, _LOST)

    # -- writing (in the background) -----------------------------------------------------------
    def pending(self) -> int:
        """Templates x minutes counted here and not written yet."""
        with self._lock:
            return sum(len(rows) for rows in self._pending.values())

    def flush(self, *, quiet: bool = False) -> int:
        """Write what is pending now, in one pipeline; returns the number of minutes written
        (0 when nothing was pending or the write failed: that batch is dropped, and logged unless
        ``quiet``)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return 0
        try:
            client, prefix = self.target()
            script = sync_scripts.get(client, "history_add")
            ttl_ms = int(self.retention * 1000)
            with client.pipeline(transaction=False) as pipe:
                for minute, rows in sorted(pending.items()):
                    args: list[Any] = [self.templates_per_minute, ttl_ms, OTHER_TEMPLATE]
                    for template, row in rows.items():
                        counts = [(name, n) for name, n in row.items() if n]
                        args += [template, len(counts), *(part for pair in counts for part in pair)]
                    queue_script(pipe, script, [history_key(prefix, minute)], args)
                pipe.execute()
        except Exception as exc:
            if not quiet:
                failures.note("writing the contention history", exc)
            return 0
        return len(pending)

    def close(self) -> None:
        """Stop the background thread and write what is pending."""
        self._writer.stop()
        self.flush()


def _after_fork_in_child() -> None:
    """The child writes only its own events: no pending counts of the parent."""
    for recorder in list(_recorders):
        recorder._reset()


def _flush_all_at_exit() -> None:
    feed()  # what the metrics' thread had not handed over yet
    for recorder in list(_recorders):
        recorder.flush(quiet=True)  # best effort: the server may be gone already


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_flush_all_at_exit)
