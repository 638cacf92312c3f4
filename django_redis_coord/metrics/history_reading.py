"""Reading the contention history back (see :mod:`~django_redis_coord.metrics.history`): per
template, a series per minute of acquisitions, contentions, losses and the waits' and holds'
50th and 99th percentiles, estimated from the histogram buckets as Prometheus'
``histogram_quantile`` does (linear within a bucket; past the last bound, the last bound).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ..core.arguments import as_bytes
from ._recording import BUCKETS
from .history import FIELDS, history_key

__all__ = ["TemplateHistory", "read_history", "quantile"]

_BUCKET_COUNT = len(BUCKETS) + 1


def quantile(counts: Sequence[int], q: float) -> Optional[float]:
    """The ``q`` quantile (0-1) of a histogram of :data:`BUCKETS` counts; ``None`` when empty."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index >= len(BUCKETS):
                return BUCKETS[-1]
            lower = BUCKETS[index - 1] if index else 0.0
            return lower + (BUCKETS[index] - lower) * (rank - seen) / count
        seen += count
    return BUCKETS[-1]


@dataclass
class TemplateHistory:
    """The last minutes of one template, oldest first (one entry per minute, zeros when idle)."""

    template: str
    #: The minutes (since the epoch) of the series.
    minutes: list[int]
    acquisitions: list[int] = field(default_factory=list)
    contentions: list[int] = field(default_factory=list)
    losses: list[int] = field(default_factory=list)
    #: Per minute, the waits' and holds' histogram bucket counts.
    waits: list[list[int]] = field(default_factory=list)
    holds: list[list[int]] = field(default_factory=list)

    def _quantiles(self, histograms: list[list[int]], q: float) -> list[Optional[float]]:
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

    def overall(self, histograms: str, q: float) -> Optional[float]:
        """The ``q`` quantile of ``"waits"`` or ``"holds"`` over all the minutes."""
        merged = [sum(column) for column in zip(*getattr(self, histograms))]
        return quantile(merged, q) if merged else None


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
    index = {name: position for position, name in enumerate(FIELDS)}
    for slot, reply in enumerate(replies):
        for raw_field, raw_value in (reply or {}).items():
            name, sep, template = _text(raw_field).partition("|")
            position = index.get(name)
            if not sep or position is None:
                continue  # "t|<template>" and "#templates": the script's bookkeeping
            history = found.get(template)
            if history is None:
                history = found[template] = _empty(template, span)
            count = int(_text(raw_value) or 0)
            if position < 3:
                (history.acquisitions, history.contentions, history.losses)[position][slot] += count
            elif position < 3 + _BUCKET_COUNT:
                history.waits[slot][position - 3] += count
            else:
                history.holds[slot][position - 3 - _BUCKET_COUNT] += count
    return sorted(found.values(), key=lambda h: (-h.total("contentions"), -h.total("acquisitions"), h.template))


def _empty(template: str, span: list[int]) -> TemplateHistory:
    size = len(span)
    return TemplateHistory(
        template=template, minutes=list(span), acquisitions=[0] * size, contentions=[0] * size, losses=[0] * size,
        waits=[[0] * _BUCKET_COUNT for _ in span], holds=[[0] * _BUCKET_COUNT for _ in span],
    )
