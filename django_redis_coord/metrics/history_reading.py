"""Reading the contention history back (see :mod:`~django_redis_coord.metrics.history`): per
template, a series per minute of acquisitions, contentions, losses and the waits' and holds'
50th and 99th percentiles, from the log-spaced histograms
(:mod:`~django_redis_coord.metrics.log_buckets`): the nearest-rank percentile of what was
recorded, within :data:`~django_redis_coord.metrics.log_buckets.RELATIVE_ERROR` (2 %).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ..core.arguments import as_bytes
from .history import COUNTERS, HOLD_PREFIX, WAIT_PREFIX, history_key
from .log_buckets import merged, quantile

__all__ = ["TemplateHistory", "read_history", "quantile"]


@dataclass
class TemplateHistory:
    """The last minutes of one template, oldest first (one entry per minute, zeros when idle)."""

    template: str
    #: The minutes (since the epoch) of the series.
    minutes: list[int]
    acquisitions: list[int] = field(default_factory=list)
    contentions: list[int] = field(default_factory=list)
    losses: list[int] = field(default_factory=list)
    #: Per minute, the waits' and holds' histograms (bucket -> count, see ``log_buckets``).
    waits: list[dict[int, int]] = field(default_factory=list)
    holds: list[dict[int, int]] = field(default_factory=list)

    def _quantiles(self, histograms: list[dict[int, int]], q: float) -> list[Optional[float]]:
        return [quantile(counts, q) for counts in histograms]

    @property
    def wait_p50(self) -> list[Optional[float]]:
        return self._quantiles(self.waits, 0.5)

    @property
    def wait_p99(self) -> list[Optional[float]]:
        return self._quantiles(self.waits, 0.99)

    @property
    def hold_p50(self) -> list[Optional[float]]:
        return self._quantiles(self.holds, 0.5)

    @property
    def hold_p99(self) -> list[Optional[float]]:
        return self._quantiles(self.holds, 0.99)

    def total(self, what: str) -> int:
        """The sum over the minutes of ``"acquisitions"``, ``"contentions"`` or ``"losses"``."""
        return sum(getattr(self, what))

    def count(self, histograms: str) -> int:
        """The number of ``"waits"`` or ``"holds"`` recorded over the minutes."""
        return sum(sum(counts.values()) for counts in getattr(self, histograms))

    def overall(self, histograms: str, q: float) -> Optional[float]:
        """The ``q`` quantile of ``"waits"`` or ``"holds"`` over all the minutes."""
        return quantile(merged(getattr(self, histograms)), q)


def _text(value: Any) -> str:
    return (as_bytes(value) or b"").decode("utf-8", "replace")


def read_history(client: Any, prefix: str = "", *, minutes: int = 60, now: Optional[float] = None
                 ) -> list[TemplateHistory]:
    """The history of the last ``minutes`` minutes (up to the current one, by ``now`` or this
    process's clock), one HGETALL per minute in one pipeline; templates with the most contentions
    first, then the most acquisitions."""
    current = int((time.time() if now is None else now) // 60)
    span = list(range(current - minutes + 1, current + 1))
    with client.pipeline(transaction=False) as pipe:
        for minute in span:
            pipe.hgetall(history_key(prefix, minute))
        replies = pipe.execute()
    found: dict[str, TemplateHistory] = {}
    counters = {name: position for position, name in enumerate(COUNTERS)}
    for slot, reply in enumerate(replies):
        for raw_field, raw_value in (reply or {}).items():
            name, sep, template = _text(raw_field).partition("|")
            if not sep:
                continue  # "#templates": the script's bookkeeping
            position = counters.get(name)
            histograms: Optional[str] = None
            index = 0
            if position is None:
                for prefix_, which in ((WAIT_PREFIX, "waits"), (HOLD_PREFIX, "holds")):
                    if name.startswith(prefix_):
                        try:
                            index = int(name[len(prefix_):])
                        except ValueError:
                            break
                        histograms = which
                if histograms is None:
                    continue  # "t|<template>" (the script's bookkeeping), or a field of another version
            history = found.get(template)
            if history is None:
                history = found[template] = _empty(template, span)
            count = int(_text(raw_value) or 0)
            if histograms is None:
                assert position is not None
                (history.acquisitions, history.contentions, history.losses)[position][slot] += count
            else:
                counts = getattr(history, histograms)[slot]
                counts[index] = counts.get(index, 0) + count
    return sorted(found.values(), key=lambda h: (-h.total("contentions"), -h.total("acquisitions"), h.template))


def _empty(template: str, span: list[int]) -> TemplateHistory:
    size = len(span)
    return TemplateHistory(
        template=template, minutes=list(span), acquisitions=[0] * size, contentions=[0] * size, losses=[0] * size,
        waits=[{} for _ in span], holds=[{} for _ in span],
    )
