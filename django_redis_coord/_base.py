"""Compatibility home of names that moved out, by concern: :mod:`._arguments` (argument checks
and durations), :mod:`._holds` (hold state), :mod:`._grants` (an acquire's outcome),
:mod:`._queued_base` and :mod:`._lock_base`.  Import from those; this module keeps the old
``from django_redis_coord._base import ...`` working, and :class:`HolderInfo`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from ._arguments import MAX_SECONDS, Number, as_bytes, check_number, encode_token, new_token, to_ms
from ._grants import Grant
from ._holds import SharedHold, ThreadHold, first_of, first_time
from ._lock_base import LockBase, ReleaseOnExit
from ._queued_base import DEFAULT_WAITER_LEASE, META_RETENTION_MS, NO_REPLY, OWN_TOKEN, QueuedBase

__all__ = [
    "DEFAULT_WAITER_LEASE", "Grant", "HolderInfo", "LockBase", "MAX_SECONDS", "META_RETENTION_MS", "NO_REPLY",
    "Number", "OWN_TOKEN", "QueuedBase", "ReleaseOnExit", "SharedHold", "ThreadHold", "as_bytes",
    "check_number", "encode_token", "first_of", "first_time", "new_token", "to_ms",
]


@dataclass(frozen=True)
class HolderInfo:
    """A live holder of a named lock (see :func:`django_redis_coord.holders`)."""

    name: str
    kind: str
    #: The holder's secret: kept out of ``repr`` (and so out of logs); show ``masked_token``.
    token: bytes = field(repr=False)
    fence: int
    ttl_ms: Optional[int]
    acquired_at_ms: Optional[int]
    host: Optional[str]
    pid: Optional[int]
    thread: Optional[str]
    label: Optional[str]
    extra: dict
    waiters: int

    @property
    def masked_token(self) -> str:
        text = self.token.decode("utf-8", "replace")
        return text[:4] + "…" if len(text) > 4 else "…"

    @classmethod
    def from_inspect(cls, name: bytes, kind: str, reply: Any) -> Optional[HolderInfo]:
        token, pttl, fence, info, since, waiters = reply[:6]
        token = as_bytes(token)
        if token is None:
            return None
        meta: dict = {}
        if info:
            try:
                meta = json.loads(info)
            except ValueError:
                meta = {}
        pttl = int(pttl)
        return cls(
            name=name.decode("utf-8", "replace"),
            kind=kind,
            token=token,
            fence=int(fence or 0),
            ttl_ms=pttl if pttl >= 0 else None,
            acquired_at_ms=int(since) if since else None,
            host=meta.pop("host", None),
            pid=meta.pop("pid", None),
            thread=meta.pop("thread", None),
            label=meta.pop("label", None),
            extra=meta,
            waiters=int(waiters),
        )
