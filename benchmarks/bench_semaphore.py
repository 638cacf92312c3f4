"""Semaphore: uncontended speed next to the raw floor, and 16 processes sharing 4 permits.

* ``raw`` — the floor, the same as the lock benchmark's: ``SET name token NX PX`` and a Lua
  compare-and-delete by EVALSHA (one round trip each);
* ``ours`` — ``django_redis_coord.Semaphore`` (limit 4, lease 10 s): one Lua script to acquire
  (reclaim expired permits, serve the FIFO queue, grant with a fence) and one to release;
* ``client clock`` — a textbook counting semaphore for comparison under contention: a ZSET scored by
  the client's clock, one MULTI/EXEC per attempt, polling every 1 ms while all permits are taken.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from benchmarks.bench_lock import RawLock
from benchmarks.common import (
    PAIR_BLOCK,
    PAIR_SLICE,
    Context,
    Section,
    commands_delta,
    commandstats,
    counting_client,
    interleaved_pairs,
    percentile,
    run_workers,
    sent_commands,
    sleep_until_ns,
)

LIMIT = 4
TARGET_RATIO = 0.9


@dataclass(frozen=True)
class Sizes:
    pair_seconds: float = 1.5       # per library per round
    pair_rounds: int = 5            # rounds of interleaved slices; medians are reported
    cpu_pairs: int = 3000           # pairs timed for the CPU cost per pair
    procs: int = 16
    contention_seconds: float = 5.0
    hold_s: float = 0.001
    think_s: float = 0.001
    contenders: tuple[str, ...] = ("ours", "client clock")


FULL = Sizes()
QUICK = Sizes(pair_seconds=0.2, pair_rounds=1, cpu_pairs=200, procs=6, contention_seconds=0.6)


# -- the semaphores ------------------------------------------------------------------------------
class ClientClockSemaphore:
    """A counting semaphore on the client's clock: a ZSET, rank check in one MULTI/EXEC, 1 ms polling."""

    def __init__(self, client: Any, name: str, limit: int, timeout: float, poll: float = 0.001) -> None:
        self.client, self.name, self.limit, self.timeout, self.poll = client, name, limit, timeout, poll
        self.identifier: Optional[str] = None

    def acquire(self) -> bool:
        identifier = str(uuid.uuid4())
        while True:
            now = time.time()
            pipe = self.client.pipeline(transaction=True)
            pipe.zremrangebyscore(self.name, "-inf", now - self.timeout)
            pipe.zadd(self.name, {identifier: now})
            pipe.zrank(self.name, identifier)
            if pipe.execute()[-1] < self.limit:
                self.identifier = identifier
                return True
            self.client.zrem(self.name, identifier)
            time.sleep(self.poll)

    def release(self) -> bool:
        return bool(self.client.zrem(self.name, self.identifier))


def make_semaphore(lib: str, client: Any, name: str) -> Any:
    if lib == "ours":
        from django_redis_coord import Semaphore

        return Semaphore(client, name, limit=LIMIT, timeout=10, blocking=True)
    if lib == "client clock":
        return ClientClockSemaphore(client, name, LIMIT, 10.0)
    raise ValueError(f"unknown library {lib!r}")


def server_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- 1. uncontended pairs ----------------------------------------------------------------------------
def pair_functions(client: Any) -> dict[str, Any]:
    from django_redis_coord import Semaphore

    raw = RawLock(client, "bench:sem:raw", 10.0)
    ours = Semaphore(client, "bench:sem:ours", limit=LIMIT, timeout=10)

    def raw_pair() -> None:
        if not raw.acquire(blocking=False):
            raise RuntimeError("an uncontended raw acquire failed")
        raw.release()

    def ours_pair() -> None:
        if not ours.acquire():
            raise RuntimeError("an uncontended acquire failed")
        ours.release()

    return {"raw": raw_pair, "ours": ours_pair}


def measure_pairs(ctx: Context, sizes: Sizes) -> dict[str, Any]:
    """Pairs per second (see :func:`interleaved_pairs`), then the CPU each pair costs."""
    client = ctx.client()
    pairs = pair_functions(client)
    for pair in pairs.values():  # load the scripts
        for _ in range(20):
            pair()
    result = interleaved_pairs(ctx, pairs, sizes.pair_seconds, sizes.pair_rounds)
    # CPU per pair (client process time + redis-server CPU): what a busy machine cannot blur.
    cpu: dict[str, tuple[float, float]] = {}
    for lib in pairs:
        server_before, client_before = server_cpu(client), time.process_time()
        for _ in range(sizes.cpu_pairs):
            pairs[lib]()
        client_us = (time.process_time() - client_before) / sizes.cpu_pairs * 1e6
        server_us = (server_cpu(client) - server_before) / sizes.cpu_pairs * 1e6
        cpu[lib] = (client_us, server_us)
    client.close()
    return {**result, "cpu": cpu}


# -- 2. contention -------------------------------------------------------------------------------------
def contend(lib: str, host: str, port: int, name: str, start_ns: int, end_ns: int, hold_s: float,
            think_s: float) -> dict[str, Any]:
    """One process: acquire (blocking), hold, release, think, until ``end_ns``."""
    sent_commands(reset=True)
    client = counting_client(host, port)
    semaphore = make_semaphore(lib, client, name)
    client.ping()
    waits: list[int] = []
    holds: list[tuple[int, int]] = []
    sleep_until_ns(start_ns)
    while time.monotonic_ns() < end_ns:
        asked = time.monotonic_ns()
        if not semaphore.acquire():
            raise RuntimeError("a blocking acquire returned False")
        got = time.monotonic_ns()
        time.sleep(hold_s)
        left = time.monotonic_ns()
        if not semaphore.release():
            raise RuntimeError("a permit was lost before its release")
        waits.append(got - asked)
        holds.append((got, left))
        time.sleep(think_s)
    return {"pid": os.getpid(), "waits": waits, "holds": holds, "sent": sent_commands()}


def concurrency_profile(holds: list[tuple[int, int]], start_ns: int, end_ns: int) -> tuple[int, float]:
    """Most holds open at one instant, and the time-average number of holds open in the window."""
    events = sorted([(a, 1) for a, _ in holds] + [(b, -1) for _, b in holds])
    current = peak = 0
    area = 0.0
    last = start_ns
    for instant, step in events:
        clipped = min(max(instant, start_ns), end_ns)
        area += current * (clipped - last)
        last = clipped
        current += step
        peak = max(peak, current)
    area += current * (end_ns - last)
    return peak, area / (end_ns - start_ns)


def measure_contention(ctx: Context, lib: str, sizes: Sizes) -> dict[str, Any]:
    name = "bench:sem:" + lib.replace(" ", "-")
    admin = ctx.client()
    before = commandstats(admin)
    start_ns = time.monotonic_ns() + int(0.3e9 + sizes.procs * 0.03e9)
    end_ns = start_ns + int(sizes.contention_seconds * 1e9)
    args = [(lib, ctx.server.host, ctx.server.port, name, start_ns, end_ns, sizes.hold_s, sizes.think_s)
            for _ in range(sizes.procs)]
    results = run_workers(contend, args, timeout=sizes.contention_seconds + 120)
    after = commandstats(admin)
    admin.close()
    window = (end_ns - start_ns) / 1e9
    holds = [hold for r in results for hold in r["holds"]]
    per_process = [sum(1 for a, _ in r["holds"] if start_ns <= a < end_ns) for r in results]
    waits_ms = [w / 1e6 for r in results for (a, _), w in zip(r["holds"], r["waits"]) if start_ns <= a < end_ns]
    total = sum(len(r["holds"]) for r in results)
    sent = sum(sum(r["sent"].values()) for r in results)
    peak, average = concurrency_profile(holds, start_ns, end_ns)
    return {
        "acq_per_s": sum(per_process) / window,
        "p50": percentile(waits_ms, 50),
        "p99": percentile(waits_ms, 99),
        "max": max(waits_ms) if waits_ms else float("nan"),
        "fairness": min(per_process) / max(per_process) if max(per_process) else 0.0,
        "fewest": min(per_process),
        "most": max(per_process),
        "server_cmds": commands_delta(before, after) / total if total else float("nan"),
        "sent_cmds": sent / total if total else float("nan"),
        "peak": peak,
        "in_use": average,
    }


# -- the report -------------------------------------------------------------------------------------------
def run(ctx: Context, sizes: Optional[Sizes] = None) -> Section:
    sizes = sizes or (QUICK if ctx.quick else FULL)
    section = Section("semaphore", "Semaphore benchmark: django_redis_coord.Semaphore next to the raw floor")
    section.text(__doc__.split("\n\n", 1)[1])
    ctx.flush()

    ctx.log("uncontended acquire+release pairs")
    pairs = measure_pairs(ctx, sizes)
    section.heading("Uncontended acquire + release")
    section.text(f"One client; the two take turns in {PAIR_SLICE * 1000:g} ms slices, {sizes.pair_seconds:g} s "
                 f"each per round, {sizes.pair_rounds} rounds (as in the lock benchmark). *pairs/s* is the median "
                 "of the rounds' throughput and *x floor* the median of each round's ratio to the floor in that "
                 f"round; *typical* is the rate from the median time of a pair (timed in blocks of {PAIR_BLOCK}), "
                 "which bursts of other processes on a shared machine disturb least. *CPU µs/pair* is the "
                 f"client's process time and redis-server's CPU time per pair over {sizes.cpu_pairs} pairs.")
    rows = []
    for lib in ("raw", "ours"):
        rate = statistics.median(pairs["rates"][lib])
        section.figure(f"pairs_per_s.{lib}", rate)
        typical = section.figure(f"pairs_typical_per_s.{lib}", pairs["typical"][lib])
        client_us, server_us = pairs["cpu"][lib]
        section.figure(f"cpu_us_per_pair.client.{lib}", client_us)
        section.figure(f"cpu_us_per_pair.server.{lib}", server_us)
        rows.append([lib, rate, f"{min(pairs['rates'][lib]):.0f}–{max(pairs['rates'][lib]):.0f}",
                     f"{statistics.median(pairs['ratios'][lib]):.2f}x", typical, f"{1e6 / typical:.0f}",
                     f"{pairs['typical_ratio'][lib]:.2f}x", client_us, server_us])
    section.table(["library", "pairs/s", "pairs/s range", "x floor", "typical pairs/s", "typical µs/pair",
                   "typical x floor", "client CPU µs/pair", "server CPU µs/pair"], rows)
    ratio = section.figure("pairs_ratio.ours", statistics.median(pairs["ratios"]["ours"]),
                           "ours / raw, median of rounds")
    typical_ratio = section.figure("pairs_typical_ratio.ours", pairs["typical_ratio"]["ours"], "ours / raw, typical")
    section.text("ours / raw per round: " + ", ".join(f"{r:.2f}" for r in pairs["ratios"]["ours"]) + ".")
    section.check(f"uncontended ours >= {TARGET_RATIO}x floor (typical)", typical_ratio, ">=", TARGET_RATIO)
    section.check(f"uncontended ours >= {TARGET_RATIO}x floor (median of rounds)", ratio, ">=", TARGET_RATIO)

    section.heading(f"{sizes.procs} processes on limit={LIMIT}")
    section.text(f"{sizes.procs} processes loop on one semaphore of {LIMIT} permits: acquire (blocking), hold "
                 f"{sizes.hold_s * 1000:g} ms, release, think {sizes.think_s * 1000:g} ms, for "
                 f"{sizes.contention_seconds:g} s. *wait* is acquire's duration; *fairness* the fewest / most "
                 "acquisitions of any process; *cmds/acq* what the clients sent (EVALSHA, SUBSCRIBE, MULTI/EXEC "
                 "each 1); *server cmds/acq* the INFO commandstats delta (on Redis 6 it also counts every "
                 "command run inside a Lua script); *max holders* the most hold intervals (time.monotonic_ns "
                 "in each process, acquire's return to release's call) open at one instant, computed here from "
                 "the recorded history; *permits in use* their time-average.")
    rows = []
    for lib in sizes.contenders:
        ctx.log(f"contention: {lib}, {sizes.procs} processes")
        ctx.flush()
        result = measure_contention(ctx, lib, sizes)
        key = lib.replace(" ", "-")
        for figure in ("p50", "p99", "max", "fairness", "sent_cmds", "server_cmds", "peak", "in_use", "acq_per_s"):
            section.figure(f"contention.{key}.{figure}", result[figure])
        rows.append([lib, result["acq_per_s"], result["p50"], result["p99"], result["max"],
                     f"{result['fairness']:.2f} ({result['fewest']}/{result['most']})", result["sent_cmds"],
                     result["server_cmds"], result["peak"], result["in_use"]])
        if lib == "ours":
            section.check(f"{sizes.procs} processes: ours max concurrent holders", result["peak"], "==", LIMIT)
    section.table(["library", "acq/s", "wait p50 ms", "wait p99 ms", "wait max ms", "fairness (fewest/most)",
                   "cmds/acq", "server cmds/acq", "max holders", "permits in use"], rows)
    return section

