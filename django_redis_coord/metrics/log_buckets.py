"""The histograms of the contention history: log-spaced buckets, percentiles with a stated error.

A duration of ``s`` seconds is counted in bucket ``i = ceil(log(s) / log(GAMMA))``, the bucket of
the durations in ``(GAMMA ** (i - 1), GAMMA ** i]``, with ``GAMMA = (1 + RELATIVE_ERROR) /
(1 - RELATIVE_ERROR)``.  A bucket is reported as ``2 * GAMMA ** i / (GAMMA + 1)``: within
:data:`RELATIVE_ERROR` (2 %) of every duration it holds.  The ``q`` percentile is the nearest-rank
one: the ``ceil(q * n)``-th shortest of the ``n`` durations recorded, found exactly by counting
and reported as its bucket's value, so it is within 2 % of that recorded duration; there is no
interpolation between bounds, and no upper bound: a hold of a minute, an hour or a day is counted
as such.  Durations under :data:`MIN_SECONDS` (0.1 ms) are counted as 0.1 ms, and over
:data:`MAX_SECONDS` (7 days) as 7 days, which bounds a histogram to :data:`SIZE` buckets; only the
buckets a minute's durations fall in are kept.

The same scheme as DDSketch's (Masson, Rim and Lee, VLDB 2019); nothing here imports anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Optional

__all__ = ["RELATIVE_ERROR", "GAMMA", "MIN_SECONDS", "MAX_SECONDS", "SIZE", "bucket", "value", "quantile",
           "merged"]

#: The largest relative difference between a reported percentile and the recorded duration it stands for.
RELATIVE_ERROR = 0.02
#: The ratio of two consecutive bucket bounds.
GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(GAMMA)
#: Shorter durations are counted as this one (seconds).
MIN_SECONDS = 1e-4
#: Longer durations are counted as this one (seconds): 7 days.
MAX_SECONDS = 7 * 86400.0


def bucket(seconds: float) -> int:
    """The bucket of a duration: ``ceil(log(seconds) / log(GAMMA))``, within the bounds."""
    seconds = min(max(float(seconds), MIN_SECONDS), MAX_SECONDS)
    return math.ceil(math.log(seconds) / _LOG_GAMMA)


#: The number of buckets a histogram can have.
SIZE = bucket(MAX_SECONDS) - bucket(MIN_SECONDS) + 1


def value(index: int) -> float:
    """What bucket ``index`` reports: within :data:`RELATIVE_ERROR` of every duration in it."""
    return 2 * GAMMA ** index / (GAMMA + 1)


def quantile(counts: Mapping[int, int], q: float) -> Optional[float]:
    """The ``q`` (0-1) nearest-rank quantile of a histogram (bucket -> count); ``None`` when empty."""
    total = sum(count for count in counts.values() if count > 0)
    if total <= 0:
        return None
    rank = max(1, math.ceil(round(q * total, 9)))  # round: 0.99 * 100 is 99.00000000000001
    seen = 0
    for index in sorted(counts):
        count = counts[index]
        if count > 0:
            seen += count
            if seen >= rank:
                return value(index)
    return value(max(counts))  # not reached: seen ends at total >= rank


def merged(histograms: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """The sum of histograms, bucket by bucket."""
    total: dict[int, int] = {}
    for histogram in histograms:
        for index, count in histogram.items():
            total[index] = total.get(index, 0) + count
    return total
