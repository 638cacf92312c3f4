"""Choosing holds by who holds them and for how long: what an operator's bulk force release takes
(``manage.py locks release --host H --pid P --label-prefix L --older-than DURATION``, the admin's
*Release by filter*).

Every filter given must match (AND).  Text from an operator or a request goes through
:meth:`HoldSelection.parse`, which refuses anything out of bounds with a typed error
(:class:`~django_redis_coord.exceptions.InvalidLockArgument`) before Redis is read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from ..exceptions import InvalidLockArgument
from ..holders import KINDS, HolderInfo, format_ms

__all__ = ["HoldSelection", "parse_duration", "MAX_DURATION_MS", "MAX_FILTER_LENGTH"]

#: The longest ``--older-than`` accepted: ten years.
MAX_DURATION_MS = 10 * 365 * 86400 * 1000
#: The longest text a filter (a host, a label prefix, a duration) may have.
MAX_FILTER_LENGTH = 1000
#: A pid is a positive number below this (Linux caps it at 2**22, other systems lower).
MAX_PID = 2**31

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)(ms|s|m|h|d)")
_NUMBER = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")


def parse_duration(text: str) -> int:
    """Milliseconds in ``text``: ``90`` (seconds), ``90s``, ``500ms``, ``5m``, ``2h``, ``1d``,
    ``1h30m``, ``1.5h``.  Refuses (``InvalidLockArgument``) anything else: signs, exponents,
    spaces inside, empty parts, more than :data:`MAX_DURATION_MS`."""
    if not isinstance(text, str):
        raise InvalidLockArgument(f"a duration is text such as '30m' or '2h', not {type(text).__name__}")
    value = text.strip().lower()
    if not value or len(value) > 64:
        raise InvalidLockArgument(f"not a duration: {text[:64]!r} (examples: 90s, 30m, 2h, 1d, 1h30m)")
    if _NUMBER.fullmatch(value):
        ms = float(value) * 1000
    else:
        ms, position = 0.0, 0
        for part in _PART.finditer(value):
            if part.start() != position:
                break
            ms += float(part.group(1)) * _UNITS_MS[part.group(2)]
            position = part.end()
        if position != len(value):
            raise InvalidLockArgument(f"not a duration: {text!r} (examples: 90s, 30m, 2h, 1d, 1h30m)")
    if not math.isfinite(ms) or ms > MAX_DURATION_MS:
        raise InvalidLockArgument(f"duration {text!r} is longer than ten years")
    return int(ms)


def _text(field: str, value: Optional[str]) -> Optional[str]:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidLockArgument(f"{field} must be text, not {type(value).__name__}")
    if len(value) > MAX_FILTER_LENGTH:
        raise InvalidLockArgument(f"{field} is longer than {MAX_FILTER_LENGTH} characters")
    return value


@dataclass(frozen=True)
class HoldSelection:
    """Which live holds to take: each filter given must match (``None``: not filtered on).

    ``host`` and ``pid`` are compared with the holder record's exactly, ``label_prefix`` with the
    start of its label, ``older_than_ms`` with how long the hold has been held (by the server's
    clock; a hold of unknown age never matches), ``kind`` with ``"lock"`` or ``"sem"``.
    """

    host: Optional[str] = None
    pid: Optional[int] = None
    label_prefix: Optional[str] = None
    older_than_ms: Optional[int] = None
    kind: Optional[str] = None

    def __post_init__(self) -> None:
        _text("host", self.host)
        _text("label prefix", self.label_prefix)
        if self.pid is not None and (isinstance(self.pid, bool) or not isinstance(self.pid, int)
                                     or not 0 < self.pid < MAX_PID):
            raise InvalidLockArgument(f"pid must be a process id (1 to {MAX_PID - 1}), not {self.pid!r}")
        if self.older_than_ms is not None and (
            isinstance(self.older_than_ms, bool) or not isinstance(self.older_than_ms, int)
            or not 0 <= self.older_than_ms <= MAX_DURATION_MS
        ):
            raise InvalidLockArgument(f"older_than_ms must be 0 to {MAX_DURATION_MS} ms, not {self.older_than_ms!r}")
        if self.kind is not None and self.kind not in KINDS:
            raise InvalidLockArgument(f"unknown kind {self.kind!r}; expected one of {', '.join(KINDS)}")

    @classmethod
    def parse(cls, *, host: Optional[str] = None, pid: Optional[str] = None, label_prefix: Optional[str] = None,
              older_than: Optional[str] = None, kind: Optional[str] = None) -> HoldSelection:
        """A selection from text (a command line, a form); empty text means "not filtered on"."""
        pid_text = _text("pid", pid)
        if pid_text is not None and not (pid_text.isascii() and pid_text.isdigit() and len(pid_text) <= 10):
            raise InvalidLockArgument(f"pid must be a process id, not {pid_text[:20]!r}")
        duration = _text("older than", older_than)
        return cls(
            host=_text("host", host),
            pid=int(pid_text) if pid_text is not None else None,
            label_prefix=_text("label prefix", label_prefix),
            older_than_ms=parse_duration(duration) if duration is not None else None,
            kind=_text("kind", kind),
        )

    @property
    def filters_holders(self) -> bool:
        """Whether a filter on the holder (host, pid, label, age) is given: a selection of a
        kind alone, or of nothing, would take every hold and is refused by the bulk release."""
        return any(value is not None for value in (self.host, self.pid, self.label_prefix, self.older_than_ms))

    def matches(self, holder: HolderInfo) -> bool:
        if self.kind is not None and holder.kind != self.kind:
            return False
        if self.host is not None and holder.host != self.host:
            return False
        if self.pid is not None and holder.pid != self.pid:
            return False
        if self.label_prefix is not None and not (holder.label or "").startswith(self.label_prefix):
            return False
        if self.older_than_ms is not None:
            held = holder.held_for_ms
            if held is None or held < self.older_than_ms:
                return False
        return True

    def describe(self) -> str:
        """The filters, for people: ``host 'web-3' and held for at least 2h00m``."""
        parts = []
        if self.kind is not None:
            parts.append(f"{KINDS[self.kind].lower()}s only")
        if self.host is not None:
            parts.append(f"host {self.host!r}")
        if self.pid is not None:
            parts.append(f"pid {self.pid}")
        if self.label_prefix is not None:
            parts.append(f"label starting with {self.label_prefix!r}")
        if self.older_than_ms is not None:
            parts.append(f"held for at least {format_ms(self.older_than_ms)}")
        return " and ".join(parts) or "every hold"
