"""Recent hold durations per name, kept in this process: a ``Retry-After`` closer to when the
holder is likely done than its remaining TTL.

The TTL is an upper bound: a 5 s job guarded with ``timeout=30`` holds its key for 5 s, and a
client told "30" comes back 25 s late.  Each hold of a name released in this process (by the
signalling primitives ``@locked`` and the factories use) adds its duration; the estimate for a
refused acquire is the median of the last :data:`RECENT` of them, rounded up to whole seconds
(at least 1), and never more than the remaining TTL.  Without any yet, it is the TTL.  At most
:data:`NAMES` short names are kept (the record is dropped when full), nothing in Redis.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any, Optional

from .keys import cacheable

#: Durations kept per name.
RECENT = 8
#: Names kept at most (the whole record is dropped when it is full).
NAMES = 1024

# No lock: each step below is one operation on a dict or deque (atomic under the GIL); two
# threads recording the first durations of a name at once may lose one of them, which is harmless.
_durations: dict[Any, deque] = {}


def record(name: Any, seconds: Optional[float]) -> None:
    """A hold of ``name`` that lasted ``seconds`` ended with its release."""
    if seconds is None or not cacheable(name):
        return
    recent = _durations.get(name)
    if recent is None:
        if len(_durations) >= NAMES:
            _durations.clear()
        recent = _durations.setdefault(name, deque(maxlen=RECENT))
    recent.append(seconds)


def retry_after(name: Any, ttl_seconds: Optional[int]) -> Optional[int]:
    """Seconds a refused caller should wait: the typical recent hold of ``name``, at most
    ``ttl_seconds`` (the holder's remaining TTL, rounded up; ``None``: no expiry or unknown)."""
    recent = list(_durations.get(name) or ())
    if not recent:
        return ttl_seconds
    typical = max(1, math.ceil(statistics.median(recent)))
    return typical if ttl_seconds is None else min(ttl_seconds, typical)


def clear() -> None:
    """Forget every recorded duration (tests start from none)."""
    _durations.clear()
