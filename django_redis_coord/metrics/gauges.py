"""Gauges read from the holder registry when metrics are collected: live holds, waiting callers and
the age of the oldest hold, per kind.

One :class:`HolderGauges` reads through :class:`~django_redis_coord.listing.HolderListing` (the
16384 per-slot registries in one round trip, the holders' details in one more; never a scan of
the keyspace) and keeps the reading for ``max_age`` seconds, so that the Prometheus collector and
the OpenTelemetry callbacks of one collection share it.  Redlock holds live on the Redlock masters,
not on the server read here: they are not counted.  A reading that fails (Redis unreachable) gives
``None`` and is logged now and then; it never raises into the exporter.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..core.listing import HolderListing
from ._recording import failures

__all__ = ["HolderGauges", "KindFigures", "KINDS"]

#: The kinds the gauges report (the registry's ``sem`` is reported as ``semaphore`` and ``rw`` as
#: ``rwlock``, as the events' kind is).
KINDS = ("lock", "semaphore", "rwlock")
_KIND_OF = {"lock": "lock", "sem": "semaphore", "rw": "rwlock"}


@dataclass
class KindFigures:
    """What the registry said of one kind."""

    #: Live holds (a semaphore counts one per permit held, a read-write lock one per reader).
    holders: int = 0
    #: Callers queued for a held lock, semaphore or read-write lock.
    waiters: int = 0
    #: Seconds since the oldest live hold began (0 without any), by the server's clock.
    oldest_hold: float = 0.0


#: Every gauge reader of this process, for :func:`_after_fork_in_child`.
_all: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A reading under way in a thread of the parent holds its lock: the child gets new ones."""
    for gauges in list(_all):
        gauges._lock = threading.Lock()
        gauges._read_at = -float("inf")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class HolderGauges:
    """Holds, waiters and the oldest hold per kind, read from ``client``'s registries.

    ``prefix`` restricts the reading to names starting with it (a site's ``KEY_PREFIX:``).  Override
    :meth:`listing` to pick the client at each reading (the Django settings do).
    """

    def __init__(self, client: Any = None, *, prefix: Union[str, bytes] = b"", max_age: float = 1.0) -> None:
        self.client = client
        self.prefix = prefix
        self.max_age = max_age
        self._lock = threading.Lock()
        self._reading: Optional[dict[str, KindFigures]] = None
        self._read_at = -float("inf")
        _all.add(self)

    def listing(self) -> HolderListing:
        return HolderListing(self.client, prefix=self.prefix)

    def read(self) -> Optional[dict[str, KindFigures]]:
        """The figures per kind (:data:`KINDS`), or ``None`` when the registry could not be read."""
        with self._lock:
            if time.monotonic() - self._read_at < self.max_age:
                return self._reading
            try:
                self._reading = figures(self.listing())
            except Exception as exc:
                failures.note("reading the holder registry for the gauges", exc)
                self._reading = None
            self._read_at = time.monotonic()
            return self._reading


def figures(listing: HolderListing) -> dict[str, KindFigures]:
    """Holds, waiters and the oldest hold per kind, from one listing of every live holder."""
    result = {kind: KindFigures() for kind in KINDS}
    counted: set[str] = set()
    for holder in listing.holders():
        kind = _KIND_OF.get(holder.kind)
        if kind is None:
            continue
        found = result[kind]
        found.holders += 1
        if holder.primitive_id not in counted:  # waiters are listed with each permit (each reader)
            counted.add(holder.primitive_id)
            found.waiters += holder.waiters
        if holder.acquired_at_ms is not None and holder.server_now_ms:
            found.oldest_hold = max(found.oldest_hold, (holder.server_now_ms - holder.acquired_at_ms) / 1000.0)
    return result
