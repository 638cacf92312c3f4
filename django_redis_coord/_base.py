"""Compatibility home of names that moved out, by concern: :mod:`._arguments` (argument checks
and durations), :mod:`._holds` (hold state), :mod:`._grants` (an acquire's outcome),
:mod:`._queued_base` and :mod:`._lock_base`.  Import from those; this module keeps the old
``from django_redis_coord._base import ...`` working (:class:`HolderInfo` lives in :mod:`.holders`).
"""

from __future__ import annotations

from ._arguments import MAX_SECONDS, Number, as_bytes, check_number, encode_token, new_token, to_ms
from ._grants import Grant
from ._holds import SharedHold, ThreadHold, first_of, first_time
from ._lock_base import LockBase, ReleaseOnExit
from ._queued_base import DEFAULT_WAITER_LEASE, META_RETENTION_MS, NO_REPLY, OWN_TOKEN, QueuedBase
from .holders import HolderInfo

__all__ = [
    "DEFAULT_WAITER_LEASE", "Grant", "HolderInfo", "LockBase", "MAX_SECONDS", "META_RETENTION_MS", "NO_REPLY",
    "Number", "OWN_TOKEN", "QueuedBase", "ReleaseOnExit", "SharedHold", "ThreadHold", "as_bytes",
    "check_number", "encode_token", "first_of", "first_time", "new_token", "to_ms",
]


