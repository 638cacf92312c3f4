"""Redlock: acquire+release pairs/s over 3 independent masters, next to pottery's Redlock.

Both locks use the same three private redis-server processes (started for this module):

* ``pottery`` — ``pottery.Redlock(key=..., masters=...)``: one thread pool per call, the masters
  are asked through their clients;
* ``ours`` — ``django_redis_coord.Redlock``: each round goes to all masters in parallel (one
  redis-py pipeline per master, on a per-process thread pool), plus one round that records the
  fence on the masters of the quorum;
* ``ours asyncio`` — ``django_redis_coord.asyncio.Redlock`` (``asyncio.gather`` over the masters).

Also measured for ``ours``: the time an acquire takes to fail when 2 of 3 masters are down (one
killed, one paused with SIGSTOP), and to succeed when 1 of 3 is paused, with ``node_timeout``
0.05 s.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.common import PAIR_SLICE, Context, Section, interleaved_blocks, percentile

LIBS = ("pottery", "ours", "ours asyncio")
DESCRIPTIONS = {
    "pottery": "pottery.Redlock (thread pool per call)",
    "ours": "django_redis_coord.Redlock (a pipeline per master, in parallel)",
    "ours asyncio": "django_redis_coord.asyncio.Redlock (asyncio.gather)",
}
#: Target (issue text): ours >= 2x pottery with the same 3 masters.
TARGET_RATIO = 2.0
BLOCK = 5     # pairs timed together


@dataclass(frozen=True)
class Sizes:
    pair_seconds: float = 3.0   # per library per round
    rounds: int = 5
    failure_trials: int = 10


QUICK = Sizes(pair_seconds=0.3, rounds=1, failure_trials=2)


class _Loop:
    """Runs the asyncio contender's blocks on one event loop."""

    def __init__(self, clients: list[Any]) -> None:
        from django_redis_coord.asyncio import Redlock as AsyncRedlock

        self.loop = asyncio.new_event_loop()
        self.clients = clients
        self.lock = AsyncRedlock(clients, "bench:redlock:aio", timeout=10)

    def block(self, count: int) -> None:
        async def pairs() -> None:
            for _ in range(count):
                if not await self.lock.acquire(blocking=False):
                    raise RuntimeError("an uncontended asyncio Redlock acquire failed")
                await self.lock.release()

        self.loop.run_until_complete(pairs())

    def close(self) -> None:
        async def close_all() -> None:
            for client in self.clients:
                await client.aclose()

        self.loop.run_until_complete(close_all())
        self.loop.close()


def measure_pairs(ctx: Context, servers: list[Any], sizes: Sizes) -> dict[str, Any]:
    from pottery import Redlock as PotteryRedlock

    from django_redis_coord import Redlock

    clients = [server.client() for server in servers]
    ours = Redlock(clients, "bench:redlock:ours", timeout=10)
    pottery = PotteryRedlock(key="bench:redlock:pottery", masters=clients, auto_release_time=10)
    aio = _Loop([server.async_client() for server in servers])

    def sync_block(lock: Any, count: int) -> None:
        for _ in range(count):
            if not lock.acquire(blocking=False):
                raise RuntimeError("an uncontended Redlock acquire failed")
            lock.release()

    runners = {
        "pottery": lambda: sync_block(pottery, BLOCK),
        "ours": lambda: sync_block(ours, BLOCK),
        "ours asyncio": lambda: aio.block(BLOCK),
    }
    for run_block in runners.values():  # connections and scripts in place before timing
        run_block()
    result = interleaved_blocks(ctx, runners, BLOCK, sizes.pair_seconds, sizes.rounds, floor="pottery")
    aio.close()
    for client in clients:
        client.close()
    return {**result, "ratios": result["ratios"]["ours"]}


def measure_failures(ctx: Context, servers: list[Any], sizes: Sizes) -> dict[str, list[float]]:
    """Acquire time with 1 of 3 masters paused, and time to fail with 2 of 3 down."""
    from django_redis_coord import Redlock
    from django_redis_coord.core.redlock.sync import QuorumUnavailable

    clients = [server.client() for server in servers]
    lock = Redlock(clients, "bench:redlock:faults", timeout=10, node_timeout=0.05)
    degraded: list[float] = []
    failing: list[float] = []
    servers[0].pause()
    try:
        for _ in range(sizes.failure_trials):
            started = time.perf_counter()
            if not lock.acquire(blocking=False):
                raise RuntimeError("acquire with 2 of 3 masters up failed")
            degraded.append(time.perf_counter() - started)
            lock.release()
        servers[1].kill()
        for _ in range(sizes.failure_trials):
            started = time.perf_counter()
            try:
                lock.acquire(blocking=False)
            except QuorumUnavailable:
                failing.append(time.perf_counter() - started)
            else:
                raise RuntimeError("acquire with 1 of 3 masters up succeeded")
    finally:
        servers[0].resume()
        for client in clients:
            client.close()
    ctx.log(f"redlock with 1 paused master: p50 {statistics.median(degraded) * 1000:.1f} ms; "
            f"2 of 3 down fails after p50 {statistics.median(failing) * 1000:.1f} ms")
    return {"degraded": degraded, "failing": failing}


def run(ctx: Context, sizes: Sizes | None = None) -> Section:
    sizes = sizes or (QUICK if ctx.quick else Sizes())
    section = Section("redlock", "Redlock over 3 masters: django_redis_coord vs pottery")
    servers = ctx.extra_servers(3)
    pairs = measure_pairs(ctx, servers, sizes)
    rows = []
    for lib in LIBS:
        rate = statistics.median(pairs["rates"][lib])
        section.figure(f"pairs_per_s.{lib}", rate, f"{lib}: acquire+release pairs/s (median of rounds)")
        times = pairs["pair_times"][lib]
        rows.append([lib, DESCRIPTIONS[lib], rate, min(pairs["rates"][lib]), max(pairs["rates"][lib]),
                     percentile(times, 50) * 1000, percentile(times, 99) * 1000])
    section.table(["library", "what", "pairs/s (median)", "min round", "max round", "pair p50 ms", "pair p99 ms"],
                  rows)
    ratio = statistics.median(pairs["ratios"])
    section.figure("ratio.ours_vs_pottery", ratio, "ours / pottery pairs/s (median of per-round ratios)")
    section.check("ours >= 2x pottery (same 3 masters)", ratio, ">=", TARGET_RATIO)
    section.text(
        f"{sizes.rounds} rounds; in each, the libraries take turns in {PAIR_SLICE * 1000:.0f} ms slices (order "
        f"rotating) for {sizes.pair_seconds:g} s each, so that all see the same background load. The ratio is "
        "the median of the per-round ratios. A pair of ours is three rounds to the masters (grant, fence record, "
        "release), each sent to all masters in parallel (a pipeline per master); pottery's is two, each through a new "
        "thread pool."
    )
    faults = measure_failures(ctx, servers, sizes)
    section.heading("Masters down (ours, node_timeout 50 ms)", level=3)
    section.table(
        ["situation", "p50 ms", "max ms"],
        [
            ["1 of 3 paused: acquire succeeds", percentile(faults["degraded"], 50) * 1000,
             max(faults["degraded"]) * 1000],
            ["2 of 3 down (1 killed, 1 paused): QuorumUnavailable", percentile(faults["failing"], 50) * 1000,
             max(faults["failing"]) * 1000],
        ],
    )
    section.figure("fail_ms.p50", percentile(faults["failing"], 50) * 1000, "2 of 3 down: time to fail, p50 ms")
    section.check("2 of 3 down fails within 2 x node_timeout + 50 ms (p50)",
                  percentile(faults["failing"], 50) * 1000, "<=", 150.0)
    section.text("An attempt that fails is undone on every master that may have granted it: one round for the "
                 "attempt and one for the undo, each bounded by node_timeout.")
    return section

