"""What a holder record shows, and how: the kinds of primitive, the ids of holds, the masking of
the holder's token wherever it appears, durations for people.  Nothing here talks to Redis;
:mod:`django_redis_coord.holders` (which re-exports these names) builds the records."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Optional

from .exceptions import InvalidLockArgument

__all__ = [
    "KINDS", "MANY_HOLDERS", "format_ms", "hold_digest", "holder_id", "mask_token", "masked_record", "owner_fields",
    "parse_holder_id", "parse_info", "text", "token_mode",
]

#: Kinds of primitive a holder can hold (as in the key layout), with a human title.
KINDS: dict[str, str] = {"lock": "Lock", "sem": "Semaphore", "rw": "Read-write lock"}
#: Kinds whose name can have several holders at once (a semaphore's permits, a read-write lock's
#: readers); each holder's id names its fence too (:attr:`HolderInfo.id`).
MANY_HOLDERS = ("sem", "rw")


#: The mode of a read-write lock's hold (or waiter), by the first letter of its token.
_TOKEN_MODES = {b"r": "read", b"w": "write"}


def token_mode(kind: str, token: Optional[bytes]) -> Optional[str]:
    """``"read"`` or ``"write"`` for a hold (or a queued waiter) of a read-write lock (``kind``
    ``"rw"``), told by its token, which the holder cannot choose; ``None`` for any other kind."""
    return _TOKEN_MODES.get(token[:1]) if kind == "rw" and token else None


def text(value: Any) -> str:
    """``value`` as text (bytes decoded as UTF-8, undecodable bytes replaced)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def format_ms(ms: Optional[int]) -> str:
    """A duration for people: ``850ms``, ``12.3s``, ``5m03s``, ``2h05m``; ``∞`` for ``None``."""
    if ms is None:
        return "∞"
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def mask_token(token: bytes) -> str:
    """The first characters of a token only: enough to tell holders apart, not to forge one."""
    shown = text(token)
    return shown[:4] + "…" if len(shown) > 8 else "…"


def hold_digest(token: bytes) -> str:
    """What a form carries to name one hold besides its fence (the admin's force release): a
    digest of its token (which cannot be recovered from it), so a fence issued again (see
    docs/safety.md) cannot stand for another hold."""
    return hashlib.sha256(b"django_redis_coord hold:" + token).hexdigest()[:32]


def holder_id(kind: str, name: bytes) -> str:
    """A URL-safe identifier of ``kind`` + raw ``name`` (any bytes round-trip)."""
    return base64.urlsafe_b64encode(kind.encode() + b":" + name).decode().rstrip("=")


def parse_holder_id(value: str) -> tuple[str, bytes]:
    """Inverse of :func:`holder_id`; raises :class:`InvalidLockArgument` on garbage.  The id of
    one semaphore permit (``<id>.<fence>``, see :attr:`HolderInfo.id`) gives its semaphore."""
    head, dot, fence = value.partition(".")
    if dot and fence.isdigit() and fence.isascii():
        value = head
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (ValueError, TypeError):
        raise InvalidLockArgument(f"not a holder id: {value!r}")
    kind, sep, name = raw.partition(b":")
    if not sep or kind.decode("ascii", "replace") not in KINDS or not name:
        raise InvalidLockArgument(f"not a holder id: {value!r}")
    return kind.decode(), name


def parse_info(info: Any) -> dict:
    """A holder info JSON object (``{}`` when missing or not a JSON object)."""
    if not info:
        return {}
    try:
        meta = json.loads(info)
    except (TypeError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def masked_record(meta: dict, token: Optional[bytes], raw: Any = None) -> dict:
    """The one masking rule of what a holder record shows: wherever the holder's token appears in
    it (its label, view, any field of ``extra``, nested values too), it is replaced by
    :func:`mask_token` of it, as the token itself is shown.  (A token of 8 characters or fewer is
    masked only where it is a whole value: it may be part of any text.)

    ``raw``: the JSON ``meta`` was decoded from, when at hand: without an escape sequence and
    without the token in it, no value can hold the token (the listing's common case, one scan)."""
    if not token or not meta:
        return meta
    if isinstance(raw, bytes) and b"\\" not in raw and token not in raw:
        return meta
    secret = text(token)
    return _masked(meta, secret, mask_token(token), len(secret) > 8)


def _masked(value: Any, secret: str, shown: str, inside: bool) -> Any:
    if isinstance(value, str):
        if value == secret or (inside and secret in value):
            return value.replace(secret, shown)
        return value
    if isinstance(value, dict):
        return {key: _masked(item, secret, shown, inside) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item, secret, shown, inside) for item in value]
    return value


def owner_fields(meta: dict, token: Optional[bytes] = None, raw: Any = None) -> dict[str, Any]:
    """The :class:`HolderInfo` fields of a decoded holder info: who holds, and ``extra`` (the rest),
    through :func:`masked_record`."""
    meta = masked_record(meta, token, raw)
    return {
        "host": meta.pop("host", None),
        "pid": meta.pop("pid", None),
        "thread": meta.pop("thread", None),
        "label": meta.pop("label", None),
        "view": meta.pop("view", None),
        "extra": meta,
    }
