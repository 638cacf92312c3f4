"""The live rate limits in Redis, for the admin page and ``manage.py ratelimits``: read when asked,
never on a decision (a decision writes its one key and nothing else).

The keys are found with ``SCAN`` (``MATCH *:dcoord:gcra*`` and ``*:dcoord:window*``), at most
:data:`SCAN_LIMIT` keys of each kind, then read in one pipeline: ``PTTL`` of each (the key of a
GCRA limit expires when the limit is entirely free again, so its TTL is the backlog), ``GET`` of
each GCRA key (its theoretical arrival time) and ``ZCARD`` of each sliding window (the calls
admitted in it, until its next decision trims those past the window).  Only the names under
``KEY_PREFIX`` are shown, without it.

Each limit is listed by its **reference**, what an operator types to show or reset it
(:func:`reference_of`, read back by :func:`keys_of`): its name when the name is printable UTF-8,
else its key, with ``\\xNN`` for each byte that is not UTF-8 (or not printable) and ``\\\\`` for a
backslash.  A name cannot contain ``:dcoord:`` and every key does, so the two never meet.  A name
over 1,024 bytes is stored under its digest and cannot be read back: such a limit is listed by its
key whatever ``KEY_PREFIX`` is (the digest does not tell which prefix it had).

A limit's rate is not stored in Redis (the GCRA key holds a time, the window its admissions): what
remains of it is worked out from what is stored once the rate is known (:func:`gcra_remaining`,
:func:`window_counts`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..exceptions import InvalidLockArgument
from ..keys import MARKER, encode_name
from .rules import Rate, ratelimit_key, window_key

__all__ = [
    "LimitUsage", "busiest", "usage_of", "usages_of_keys", "name_of_key", "kind_of_key", "reference_of", "keys_of",
    "gcra_remaining", "window_counts", "server_time_us", "SCAN_LIMIT", "KINDS", "KIND_TITLES",
]

#: Keys of each kind looked at, at most, by one :func:`busiest`.
SCAN_LIMIT = 10_000
#: The kinds of limit: ``gcra`` (:class:`~django_redis_coord.core.ratelimit.sync.RateLimit`) and ``window``
#: (:class:`~django_redis_coord.core.ratelimit.sync.SlidingWindowLimit`), with their key's marker.
KINDS = {"gcra": b":dcoord:gcra", "window": b":dcoord:window"}
#: Each kind as operators call it (the admin page, ``manage.py ratelimits``, docs/ratelimits.md).
KIND_TITLES = {"gcra": "Token bucket (GCRA)", "window": "Sliding window"}
#: The key of a limit whose name is over 1,024 bytes: its slot's tag, the kind, the name's SHA-256.
_DIGEST_KEY = re.compile(rb"\{[0-9a-f]+\}:dcoord:(gcra|window):#[0-9a-f]{64}")


@dataclass(frozen=True)
class LimitUsage:
    """One live limit: its reference (``name``: the name without ``KEY_PREFIX``, or the key when the
    name cannot be typed back, see :func:`reference_of`), key and kind, the milliseconds until it is
    entirely free again (its key's TTL) and, for a sliding window, the calls in its sorted set."""

    name: str
    key: str
    kind: str
    free_in_ms: int
    in_window: Optional[int] = None
    #: The key as Redis has it (bytes: a name need not be UTF-8).
    raw_key: bytes = b""
    #: The full name (``KEY_PREFIX`` included), ``None`` when the key holds its digest.
    raw_name: Optional[bytes] = None
    #: A GCRA limit's theoretical arrival time (µs on the server's clock), as stored.
    stored_us: Optional[int] = None

    @property
    def kind_title(self) -> str:
        return KIND_TITLES[self.kind]

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
    try:
        expected = ratelimit_key(name) if kind == "gcra" else window_key(name)
    except InvalidLockArgument:  # not a name a limit can have
        return None
    return name if expected == key else None


def kind_of_key(key: bytes) -> Optional[tuple[str, Optional[bytes]]]:
    """The kind of limit ``key`` belongs to and its name (``None``: a digest), else ``None``: not
    the key of a rate limit."""
    digest = _DIGEST_KEY.fullmatch(key)
    if digest is not None:
        return digest.group(1).decode(), None
    for kind in KINDS:
        name = name_of_key(key, kind)
        if name is not None:
            return kind, name
    return None


# -- references: what the listing prints, and what show / reset read back -------------------------------
def _escaped_key(key: bytes) -> str:
    out = []
    for char in key.decode("utf-8", "surrogateescape"):
        if char == "\\":
            out.append("\\\\")
        elif char.isprintable():
            out.append(char)
        else:  # a byte that is not UTF-8 (a surrogate here), or a character that must not reach a terminal
            raw = char.encode("utf-8", "surrogateescape")
            out.extend(f"\\x{byte:02x}" for byte in raw)
    return "".join(out)


def _unescaped_key(text: str) -> bytes:
    out = bytearray()
    position = 0
    while position < len(text):
        char = text[position]
        if char != "\\":
            out += char.encode("utf-8", "surrogateescape")  # an argv byte that was not UTF-8 comes back as it was
            position += 1
            continue
        escape = text[position + 1:position + 2]
        if escape == "\\":
            out.append(0x5C)
            position += 2
        elif escape == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[position + 2:position + 4]):
            out.append(int(text[position + 2:position + 4], 16))
            position += 4
        else:
            raise InvalidLockArgument(f"{text!r} is not the key of a rate limit: in a key, a backslash starts "
                                      "\\xNN (a byte) or \\\\ (a backslash)")
    return bytes(out)


def reference_of(raw_name: Optional[bytes], raw_key: bytes, prefix: str = "") -> Optional[str]:
    """What a limit is listed by: its name without ``prefix`` when that is printable UTF-8, else
    its key escaped (see the module's docstring); ``None`` when the name is not under ``prefix``."""
    if raw_name is None:
        return _escaped_key(raw_key)
    head = (prefix + ":").encode() if prefix else b""
    if head and not raw_name.startswith(head):
        return None
    try:
        name = raw_name[len(head):].decode("utf-8")
    except UnicodeDecodeError:
        return _escaped_key(raw_key)
    return name if name and name.isprintable() else _escaped_key(raw_key)


def keys_of(reference: str, prefix: str = "", *, keys: bool = True) -> list[tuple[str, bytes]]:
    """The ``(kind, key)`` pairs a reference stands for: a limit's name (without ``prefix``) stands
    for both kinds of limit of that name, a key (it has ``:dcoord:``; unless ``keys`` is false) for
    itself.  A reference no limit can have raises
    :class:`~django_redis_coord.exceptions.InvalidLockArgument` with the reason."""
    if not isinstance(reference, str):
        raise InvalidLockArgument(f"a rate limit's name must be a str, not {type(reference).__name__}")
    if keys and MARKER.decode() in reference:
        key = _unescaped_key(reference)
        found = kind_of_key(key)
        if found is None:
            raise InvalidLockArgument(
                f"{reference!r} is not the key of a rate limit: a name must not contain ':dcoord:', and a limit's "
                "key is '{<tag>}:dcoord:gcra...' or '{<tag>}:dcoord:window...' as the listing prints it")
        return [(found[0], key)]
    name = encode_name(((prefix + ":") if prefix else "") + reference)  # the size and marker rules of every name
    return [("gcra", ratelimit_key(name)), ("window", window_key(name))]


# -- reading -------------------------------------------------------------------------------------------------
def _scan(client: Any, kind: str) -> list[bytes]:
    keys: list[bytes] = []
    for key in client.scan_iter(match=b"*" + KINDS[kind] + b"*", count=1000):
        keys.append(key if isinstance(key, bytes) else str(key).encode())
        if len(keys) >= SCAN_LIMIT:
            break
    return keys


def busiest(client: Any, prefix: str = "", *, limit: int = 50) -> list[LimitUsage]:
    """The ``limit`` busiest live limits under ``prefix``: the GCRA limits with the longest time
    until they are free again, then the sliding windows with the most calls in their window."""
    found: list[tuple[str, bytes, str, Optional[bytes]]] = []
    for kind in KINDS:
        for key in _scan(client, kind):
            known = kind_of_key(key)
            if known is None or known[0] != kind:
                continue
            reference = reference_of(known[1], key, prefix)
            if reference is not None:
                found.append((reference, key, kind, known[1]))
    usages = _read(client, found)
    usages.sort(key=lambda u: (u.kind != "gcra", -(u.in_window or 0), -u.free_in_ms, u.name))
    return usages[:limit]


def usage_of(client: Any, name: Union[str, bytes], prefix: str = "") -> list[LimitUsage]:
    """The live limits a reference stands for (:func:`keys_of`; a str without ``prefix``), or of the
    full name ``name`` (bytes, ``KEY_PREFIX`` included): none, or its GCRA limit and/or its window."""
    if isinstance(name, bytes):
        raw = encode_name(name)
        return usages_of_keys(client, [ratelimit_key(raw), window_key(raw)], prefix)
    return usages_of_keys(client, [key for _kind, key in keys_of(name, prefix)], prefix)


def usages_of_keys(client: Any, keys: Sequence[bytes], prefix: str = "") -> list[LimitUsage]:
    """The live limits among ``keys`` (keys of limits: :func:`kind_of_key` knows each), listed by
    their references under ``prefix``."""
    found = []
    for key in keys:
        known = kind_of_key(key)
        if known is None:
            raise InvalidLockArgument(f"{_escaped_key(key)!r} is not the key of a rate limit")
        found.append((reference_of(known[1], key, prefix) or _escaped_key(key), key, known[0], known[1]))
    return _read(client, found)


def _read(client: Any, found: list[tuple[str, bytes, str, Optional[bytes]]]) -> list[LimitUsage]:
    if not found:
        return []
    with client.pipeline(transaction=False) as pipe:
        for _name, key, kind, _raw in found:
            pipe.pttl(key)
            if kind == "window":
                pipe.zcard(key)
            else:
                pipe.get(key)
        replies = iter(pipe.execute())
    usages = []
    for name, key, kind, raw_name in found:
        pttl = int(next(replies))
        second = next(replies)
        if pttl == -2:  # gone since the scan
            continue
        in_window = int(second) if kind == "window" else None
        stored = int(second) if kind == "gcra" and second is not None else None
        usages.append(LimitUsage(name=name, key=_text(key), kind=kind, free_in_ms=pttl, in_window=in_window,
                                 raw_key=key, raw_name=raw_name, stored_us=stored))
    return usages


# -- what remains, once the rate is known ---------------------------------------------------------------------
def server_time_us(client: Any) -> int:
    """The server's clock, in µs since the epoch (``TIME``)."""
    seconds, micros = client.time()
    return int(seconds) * 1_000_000 + int(micros)


def gcra_remaining(stored_us: Optional[int], now_us: int, rate: Rate, burst: int) -> int:
    """Cost units a GCRA limit of ``rate`` and ``burst`` whose key holds ``stored_us`` would admit
    now: the arithmetic of its decision (``(tolerance - (TAT - now)) // interval``, at least 0)."""
    interval = rate.interval_us
    backlog = (stored_us or 0) - now_us
    remaining = (burst * interval - max(backlog, 0)) // interval
    return max(remaining, 0)


def window_counts(client: Any, windows: list[tuple[bytes, Rate]], now_us: int) -> list[int]:
    """The admissions in each sliding window ``(key, rate)`` now: those in ``(now - period, now]``
    (``ZCOUNT``, one pipeline), as its next decision counts them."""
    if not windows:
        return []
    with client.pipeline(transaction=False) as pipe:
        for key, rate in windows:
            pipe.zcount(key, f"({now_us - round(rate.period * 1_000_000)}", "+inf")
        return [int(count) for count in pipe.execute()]
