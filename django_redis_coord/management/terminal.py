"""Text meant for an operator's terminal: what a name or label holds must not steer it.

A lock name, label, host or thread name is whatever a caller (or a request filling a key
template) made it: an ESC starts a terminal control sequence (clear the screen, set the title,
hide text), CR and LF forge lines, a bidi override reorders them.  :func:`printable` writes every
character that is not printable as its Python escape, so one holder is one line and shows what
it is.  (JSON output needs nothing more: ``json.dumps`` escapes control characters.)

The tables and details ``manage.py locks`` prints are made here too, every cell through it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from ..core.holders import HolderInfo, format_ms

if TYPE_CHECKING:
    from ..core.listing import Waiter

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: Optional[str]) -> str:
    """``text`` with each non-printable character (``str.isprintable``) written as its escape."""
    if not text:
        return text or ""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def quoted(text: str) -> str:
    """``text`` :func:`printable`, in quotes (as ``repr`` shows a name, without doubling escapes)."""
    return f"'{printable(text)}'"


# -- the tables of ``manage.py locks`` -------------------------------------------------------------
def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces; each cell :func:`printable`."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(headers, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines)


def holders_table(holders: Sequence[HolderInfo]) -> str:
    """One row per holder (``locks list``)."""
    headers = ["NAME", "KIND", "FENCE", "TTL", "HELD FOR", "OWNER", "ROLE", "LABEL / VIEW", "WAITING", "USAGE",
               "TOKEN"]
    rows = [
        [h.short_name, h.kind_summary, str(h.fence), h.ttl, h.held_for, h.owner, h.role_summary or "-",
         h.label_view or "-", str(h.waiters), h.usage or "-", h.masked_token]
        for h in holders
    ]
    return render_table(headers, rows)


def holder_details(holder: HolderInfo) -> str:
    """One holder, a field a line (``locks show``)."""
    acquired = holder.acquired_at.isoformat(timespec="milliseconds") if holder.acquired_at else "?"
    details = [
        ("fence", str(holder.fence)),
        ("remaining", holder.ttl),
        ("acquired at", f"{acquired} (server time), held for {format_ms(holder.held_for_ms)}"),
        ("host", holder.host or "?"),
        ("pid", str(holder.pid) if holder.pid is not None else "?"),
        ("thread/task", holder.thread or "?"),
        ("label", holder.label or "-"),
        ("view", holder.view or "-"),
        ("token", holder.masked_token),
    ]
    details += [(key, value if isinstance(value, str) else json.dumps(value)) for key, value in holder.role_details]
    width = max(len(key) for key, _ in details)
    return "\n".join(f"  {printable(key).ljust(width)}  {printable(value)}" for key, value in details)


def waiters_table(waiters: Sequence[Waiter], now_ms: int) -> str:
    """One row per queued caller (``locks show`` and ``locks waiters``); a read-write lock's with
    the mode each asks for."""
    modes = any(waiter.mode for waiter in waiters)
    rows = []
    for waiter in waiters:
        lease_ms = waiter.as_dict(now_ms)["lease_ms"]
        owner = " ".join(str(part) for part in (waiter.host or "?", f"pid {waiter.pid}" if waiter.pid else None,
                                                waiter.thread) if part)
        row = [str(waiter.position), owner, waiter.label or "-",
               format_ms(lease_ms) if lease_ms is not None else "?", waiter.masked_token]
        rows.append([*row[:1], waiter.mode or "-", *row[1:]] if modes else row)
    headers = ["#", "OWNER", "LABEL", "PLACE KEPT FOR", "TOKEN"]
    return render_table([*headers[:1], "MODE", *headers[1:]] if modes else headers, rows)
