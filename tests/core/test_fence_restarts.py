"""What a fence promises across a restart of redis-server (see docs/safety.md, "Fences across
restarts"): the fence is ``max(stored counter + 1, server TIME in µs)``.

A server clock that steps back cannot be made on loopback without root; what it does to fences
is played here by its equivalent: a counter ahead of the clock (the fences a clock 1,000 s ahead
issued before it was set back).  Without persistence the restart forgets the counter and the next
fence comes from the clock alone: lower than the last one issued.  With an append-only file
fsynced at every write, the counter survives and the next fence is above it.
"""

from __future__ import annotations

from django_redis_coord import Lock
from django_redis_coord.core.keys import keys_for

AHEAD_US = 1_000 * 1_000_000  # the clock stepped back by 1,000 s


def last_fence_then_fence_after_restart(server) -> tuple[int, int, int]:
    client = server.client()
    with Lock(client, "ledger", timeout=5) as held:
        clock_fence = held.fence
    # The counter as fences issued by a clock 1,000 s ahead left it.
    client.hset(keys_for(b"ledger").meta, "fence", clock_fence + AHEAD_US)
    with Lock(client, "ledger", timeout=5) as held:
        last = held.fence
    assert last == clock_fence + AHEAD_US + 1  # the counter, not the clock, is the floor
    client.close()
    server.restart()  # SIGKILL and start again on the same port and directory
    client = server.client()
    with Lock(client, "ledger", timeout=5) as held:
        after = held.fence
    client.close()
    return clock_fence, last, after


def test_without_persistence_a_fence_ahead_of_the_clock_is_forgotten(redis_servers):
    (server,) = redis_servers(1)
    clock_fence, last, after = last_fence_then_fence_after_restart(server)
    # Still above what the clock issued before (the clock went on), but below the last fence.
    assert clock_fence < after < last


def test_with_aof_fsynced_always_the_counter_survives(redis_servers):
    (server,) = redis_servers(1, args=["--appendonly", "yes", "--appendfsync", "always"])
    _, last, after = last_fence_then_fence_after_restart(server)
    assert after == last + 1
