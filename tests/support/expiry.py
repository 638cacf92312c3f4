"""Keys that end: what a server holds without expiry, its longest TTL, and the end of a dead holder's
key (checked against the documented bound, not this machine's speed)."""

from __future__ import annotations

import time
from typing import Any


def keys_without_expiry(client: Any) -> list[bytes]:
    """The keys of ``client``'s database that never expire."""
    return [key for key in client.scan_iter(count=1000) if client.pttl(key) == -1]


def longest_ttl(client: Any) -> int:
    """The longest PTTL among the keys of ``client``'s database (0 when it is empty)."""
    return max((client.pttl(key) for key in client.scan_iter(count=1000)), default=0)


def sleep_out_ttl(client: Any, key: str, bound_ms: int) -> int:
    """Wait until ``key``, whose holder has just died, is gone: each PTTL read must be within
    ``bound_ms`` (the TTL a renewal sets), and sleeping that long ends it on Redis's clock too.

    A renewal the holder sent before it died may reach Redis after the first read (Redis serves
    connections in any order): one at most, the watchdog sends the next only after a reply.  So
    the key is read at most twice while it lives.  Returns the last PTTL read (-2: gone)."""
    for _ in range(2):
        remaining = client.pttl(key)
        if remaining == -2:
            return remaining
        # 0: less than a millisecond left (Redis rounds down); -1 (no expiry) fails.
        assert 0 <= remaining <= bound_ms, f"{key!r}: PTTL {remaining} ms, outside 0..{bound_ms} ms"
        time.sleep((remaining + 1) / 1000)
    remaining = client.pttl(key)
    assert remaining == -2, f"{key!r} still lives after the TTL of its holder's last renewal: PTTL {remaining}"
    return remaining
