"""The contention history kept in Redis for the admin page: per minute and template, the counts of
acquisitions, contentions and losses and the histograms of waits and holds.

A lock never pays a round trip for it: :class:`HistoryRecorder` adds each event (handed over by
the metrics' thread) to counts kept in this process, and a thread of its own writes them every
:data:`FLUSH_SECONDS` seconds, all the minutes pending in one pipeline (one ``history_add``
script call per minute).  What Redis keeps is bounded:

* one hash per minute, ``[KEY_PREFIX:]{history}:dcoord:history:<minute>`` (the minute since the
  epoch, by the recording process's clock), expiring :data:`RETENTION_SECONDS` after its last write;
* at most :data:`TEMPLATES_PER_MINUTE` templates in a minute's hash, whichever processes wrote
  them (the script counts them): the counts of any further template go to ``(other)``;
* a bounded number of fields per template: 3 counters and 2 x 17 histogram buckets.

A failed write (Redis unreachable) drops that batch and is logged now and then.  After a fork the
child starts with no pending counts (the parent writes its own) and its own thread.
"""

from __future__ import annotations

import atexit
import bisect
import os
import threading
import time
import weakref
from typing import Any, Optional

from ..core.scripts import queue_script, sync_scripts
from ._background import Periodic
from ._recording import BUCKETS, OTHER_TEMPLATE, Recorder, failures, feed

__all__ = [
    "HistoryRecorder",
    "history_key",
    "FIELDS",
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

_BUCKET_COUNT = len(BUCKETS) + 1  # the last one is +Inf
#: The counts of one template in one minute, in this order (see ``lua/history_add.lua``).
FIELDS: tuple[str, ...] = ("a", "c", "l", *(f"w{i}" for i in range(_BUCKET_COUNT)),
                           *(f"h{i}" for i in range(_BUCKET_COUNT)))
_ACQUIRED, _CONTENDED, _LOST, _WAITS, _HOLDS = 0, 1, 2, 3, 3 + _BUCKET_COUNT


def history_key(prefix: str, minute: int) -> bytes:
    """The hash of ``minute`` (minutes since the epoch) under ``prefix`` (a ``KEY_PREFIX``)."""
    head = f"{prefix}:" if prefix else ""
    return f"{head}{{history}}:dcoord:history:{minute}".encode()


def bucket(seconds: float) -> int:
    """The histogram bucket of ``seconds``: the first whose upper bound is at least it."""
    return bisect.bisect_left(BUCKETS, seconds)


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
        self._pending: dict[int, dict[str, list[int]]] = {}

    def target(self) -> tuple[Any, str]:
        """The client written to and the prefix of the keys, at each write."""
        return self.client, self.prefix

    # -- recording (in memory) -----------------------------------------------------------------
    def _add(self, template: str, index: int, extra: Optional[int] = None) -> None:
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
                    row = rows[template] = [0] * len(FIELDS)
            row[index] += 1
            if extra is not None:
                row[extra] += 1
        self._writer.ensure()

    def acquired(self, template: str, kind: str, wait_time: float) -> None:
        self._add(template, _ACQUIRED, _WAITS + bucket(wait_time))

    def contended(self, template: str, kind: str, wait_time: float) -> None:
        self._add(template, _CONTENDED)

    def released(self, template: str, kind: str, held_time: Optional[float]) -> None:
        if held_time is not None:
            self._add(template, _HOLDS + bucket(held_time))

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
                        counts = [(FIELDS[i], n) for i, n in enumerate(row) if n]
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
