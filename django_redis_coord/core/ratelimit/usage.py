"""The live rate limits in Redis, for the admin page and ``manage.py ratelimits``: read when asked,
never on a decision (a decision writes its one key and nothing else).

The keys are found with ``SCAN`` (``MATCH *:dcoord:gcra*`` and ``*:dcoord:window*``), at most
:data:`SCAN_LIMIT` keys of each kind, then read in one pipeline: ``PTTL`` of each (the key of a
GCRA limit expires when the limit is entirely free again, so its TTL is the backlog), and ``ZCARD``
of each sliding window (the calls admitted in the window).  Only the names under ``KEY_PREFIX``
are shown, without it.  A key whose name cannot be read back (a name too long, stored as its
digest) is shown by its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from .rules import ratelimit_key, window_key

__all__ = ["LimitUsage", "busiest", "usage_of", "name_of_key", "SCAN_LIMIT", "KINDS"]

#: Keys of each kind looked at, at most, by one :func:`busiest`.
SCAN_LIMIT = 10_000
#: The kinds of limit: ``gcra`` (:class:`~django_redis_coord.core.ratelimit.sync.RateLimit`) and ``window``
#: (:class:`~django_redis_coord.core.ratelimit.sync.SlidingWindowLimit`), with their key's marker.
KINDS = {"gcra": b":dcoord:gcra", "window": b":dcoord:window"}


@dataclass(frozen=True)
class LimitUsage:
    """One live limit: its name (without ``KEY_PREFIX``), key and kind, the milliseconds until it
    is entirely free again (its key's TTL) and, for a sliding window, the calls in the window."""

    name: str
    key: str
    kind: str
    free_in_ms: int
    in_window: Optional[int] = None
    #: The key as Redis has it (bytes: a name need not be UTF-8).
    raw_key: bytes = b""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "kind": self.kind, "free_in_ms": self.free_in_ms,
                "in_window": self.in_window}


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def name_of_key(key: bytes, kind: str) -> Optional[bytes]:
    """The limit name whose key ``key`` is (``None``: not a key of ``kind``, or a digest)."""
    marker = b"}" + KINDS[kind]
    if not key.startswith(b"{") or marker not in key:
        return None
    tag, _, rest = key[1:].partition(marker)
    name = tag if not rest else rest[1:] if rest.startswith(b":") else None
    if not name:
        return None
    expected = ratelimit_key(name) if kind == "gcra" else window_key(name)
    return name if (expected.encode() if isinstance(expected, str) else expected) == key else None


def _scan(client: Any, kind: str) -> list[bytes]:
    keys: list[bytes] = []
    for key in client.scan_iter(match=b"*" + KINDS[kind] + b"*", count=1000):
        keys.append(key if isinstance(key, bytes) else str(key).encode())
        if len(keys) >= SCAN_LIMIT:
            break
    return keys


def _shown(raw_name: Optional[bytes], key: bytes, prefix: str) -> Optional[str]:
    """The name as the application wrote it, ``None`` when it is not under ``prefix``."""
    head = (prefix + ":").encode() if prefix else b""
    if raw_name is None:
        return _text(key) if not head else None
    if head and not raw_name.startswith(head):
        return None
    return _text(raw_name[len(head):])


def busiest(client: Any, prefix: str = "", *, limit: int = 50) -> list[LimitUsage]:
    """The ``limit`` busiest live limits under ``prefix``: the GCRA limits with the longest time
    until they are free again, then the sliding windows with the most calls in their window."""
    found: list[tuple[str, bytes, str]] = []
    for kind in KINDS:
        for key in _scan(client, kind):
            shown = _shown(name_of_key(key, kind), key, prefix)
            if shown is not None:
                found.append((shown, key, kind))
    usages = _read(client, found)
    usages.sort(key=lambda u: (u.kind != "gcra", -(u.in_window or 0), -u.free_in_ms, u.name))
    return usages[:limit]


def usage_of(client: Any, name: Union[str, bytes]) -> list[LimitUsage]:
    """The live limits of ``name`` (the full name, ``KEY_PREFIX`` included): none, or its GCRA
    limit and/or its sliding window."""
    keys = [(kind, ratelimit_key(name) if kind == "gcra" else window_key(name)) for kind in KINDS]
    shown = _text(name if isinstance(name, bytes) else name.encode())
    found = [(shown, key if isinstance(key, bytes) else key.encode(), kind) for kind, key in keys]
    return _read(client, found)


def _read(client: Any, found: list[tuple[str, bytes, str]]) -> list[LimitUsage]:
    if not found:
        return []
    with client.pipeline(transaction=False) as pipe:
        for _name, key, kind in found:
            pipe.pttl(key)
            if kind == "window":
                pipe.zcard(key)
        replies = iter(pipe.execute())
    usages = []
    for name, key, kind in found:
        pttl = int(next(replies))
        in_window = int(next(replies)) if kind == "window" else None
        if pttl == -2:  # gone since the scan
            continue
        usages.append(LimitUsage(name=name, key=_text(key), kind=kind, free_in_ms=pttl, in_window=in_window,
                                 raw_key=key))
    return usages
