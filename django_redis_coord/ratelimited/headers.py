"""The rate-limit fields of a response: ``Retry-After`` on a refusal and, on every decided
response, ``RateLimit-Policy`` and ``RateLimit`` as the IETF httpapi draft defines them
(draft-ietf-httpapi-ratelimit-headers, structured fields):

    RateLimit-Policy: "api:{user.pk}";q=20;w=12
    RateLimit: "api:{user.pk}";r=19;t=1

* the policy's name is a Structured Field String: the ``policy=`` of the decorator, by default
  its key template (never the key filled in: nothing of the request is echoed);
* ``q`` is the limit's capacity (the burst, or the window's count) and ``w`` the seconds an idle
  limit takes to refill it, rounded up (GCRA: ``burst * period / count``, the period itself when
  the burst is the count; the sliding window: its period): so ``q / w`` is the sustained rate;
* ``r`` is what remains now, and ``t`` the seconds until the limit is entirely free again
  (``reset_after``, rounded up); on a refusal ``t`` is the ``Retry-After``, which the draft wants
  no earlier than the end of ``t``;
* ``Retry-After`` is ``retry_after`` rounded up to whole seconds (at least 1): a client that
  comes back then is admitted (unless others used the limit meanwhile).

Decorators stacked on one view add their items to the same fields (a Structured Field List).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["sf_string", "policy_field", "limit_field", "retry_after_seconds", "add_fields"]


def sf_string(text: str) -> str:
    """``text`` as a Structured Field String (RFC 9651): quoted, ``\\`` and ``"`` escaped, and
    characters outside printable ASCII percent-encoded (a String cannot hold them)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    return '"' + "".join(out) + '"'


def retry_after_seconds(retry_after: float) -> int:
    """``Retry-After``: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(retry_after - 1e-9))


def policy_field(name: str, capacity: int, window: float) -> str:
    """One item of ``RateLimit-Policy``: ``"name";q=<capacity>;w=<window rounded up>``."""
    return f"{sf_string(name)};q={capacity};w={max(1, math.ceil(window - 1e-9))}"


def limit_field(name: str, reply: Any) -> str:
    """One item of ``RateLimit`` for ``reply`` (a ``RateLimitReply``)."""
    seconds = retry_after_seconds(reply.retry_after) if not reply.allowed else math.ceil(reply.reset_after - 1e-9)
    return f"{sf_string(name)};r={max(0, int(reply.remaining))};t={max(0, seconds)}"


def add_fields(response: Any, fields: dict[str, str]) -> None:
    """Set ``fields`` on ``response``, appending to a field already there (stacked decorators)."""
    for field, value in fields.items():
        if field in response and field != "Retry-After":
            response[field] = f"{response[field]}, {value}"
        else:
            response[field] = value
