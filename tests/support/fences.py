"""Fences checked where they are granted: every grant's fence is above every earlier one, even
when the counter a name keeps is ahead of the server clock (so the clock cannot be what makes
them grow; see test_fence_restarts.py for why a counter gets ahead of the clock)."""

from __future__ import annotations

from collections.abc import Iterable

#: How far ahead of the server clock the counter is put (fences issued by a clock 1,000 s ahead).
AHEAD_US = 1_000 * 1_000_000


def counter_ahead_of_the_clock(client, meta: bytes) -> int:
    """Put the fence counter kept in ``meta`` (a primitive's ``keys.meta``) ahead of the server
    clock in µs; returns it: every later fence of that name must be above it."""
    seconds, micros = client.time()
    counter = seconds * 1_000_000 + micros + AHEAD_US
    client.hset(meta, "fence", counter)
    return counter


def assert_each_above_the_last(floor: int, fences: Iterable[int]) -> None:
    """Each of ``fences`` (in grant order) is above the one before it, the first above ``floor``."""
    last = floor
    for fence in fences:
        assert fence > last, f"fence {fence} granted after {last}"
        last = fence
