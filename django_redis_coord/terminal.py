"""Text meant for an operator's terminal: what a name or label holds must not steer it.

A lock name, label, host or thread name is whatever a caller (or a request filling a key
template) made it: an ESC starts a terminal control sequence (clear the screen, set the title,
hide text), CR and LF forge lines, a bidi override reorders them.  :func:`printable` writes every
character that is not printable as its Python escape, so one holder is one line and shows what
it is.  (JSON output needs nothing more: ``json.dumps`` escapes control characters.)
"""

from __future__ import annotations

from typing import Optional

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
