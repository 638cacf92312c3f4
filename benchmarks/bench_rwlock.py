"""Read-write lock: read throughput next to a plain lock, and a writer's wait behind looping readers.

* ``lock`` — ``django_redis_coord.Lock``: the plain lock, the reference of every ratio here;
* ``read`` / ``write`` — the two holds of ``django_redis_coord.ReadWriteLock``;
* ``reader count`` — what is often written by hand for comparison: a reader count (``INCR`` /
  ``DECR``) and a writer key, each step one Lua script, polled every 1 ms; a writer gets in when
  the count is 0 (readers first).

Three measurements, in one run on one server: uncontended acquire+release pairs of each (one
client, the libraries taking turns); ``procs`` processes each looping on one name (hold 1 ms,
think 1 ms), the read hold next to the plain lock: holds per second; and ``N`` processes looping on
read holds (20-100 ms each, no pause between) while a writer process asks for the write hold
now and then: how long the writer waits, next to the longest reader hold.  A FIFO lock makes the
writer wait for the readers that held when it asked only; a readers-first lock can keep it waiting
for ever (its writes give up after ``writer_patience``).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Optional

from benchmarks.common import FORK, Context, Section, interleaved_pairs, percentile, run_workers, sleep_until_ns

#: Target: p99 of the writer's wait behind looping readers <= the longest reader hold + this (s).
MARGIN = 0.1


@dataclass(frozen=True)
class Sizes:
    pair_seconds: float = 1.0
    pair_rounds: int = 5
    procs: int = 8
    contention_seconds: float = 4.0
    readers: tuple[int, ...] = (4, 16)
    reader_hold: tuple[float, float] = (0.02, 0.1)
    writes: int = 30
    writer_patience: float = 3.0
    writer_libs: tuple[str, ...] = ("ours", "reader count")


FULL = Sizes()
QUICK = Sizes(pair_seconds=0.2, pair_rounds=1, procs=4, contention_seconds=0.6, readers=(4,), writes=4,
              writer_patience=1.0)


class ReaderCountLock:
    """Readers first, by hand: a count of readers and a writer key, each step one script, 1 ms polling."""

    READ = ("if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end "
            "redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return 1")
    WRITE = ("if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then return 0 end "
             "if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[1]) then return 1 end return 0")
    POLL = 0.001

    def __init__(self, client: Any, name: str, ttl: float) -> None:
        self.keys = [f"{{{name}}}:readers", f"{{{name}}}:writer"]
        self.px = int(ttl * 1000)
        self.client = client
        self.read_script = client.register_script(self.READ)
        self.write_script = client.register_script(self.WRITE)

    def acquire(self, mode: str, patience: Optional[float] = None) -> bool:
        script = self.read_script if mode == "read" else self.write_script
        give_up = None if patience is None else time.monotonic() + patience
        while not script(keys=self.keys, args=[self.px, "w"]):
            if give_up is not None and time.monotonic() >= give_up:
                return False
            time.sleep(self.POLL)
        return True

    def release(self, mode: str) -> None:
        if mode == "read":
            self.client.decr(self.keys[0])
        else:
            self.client.delete(self.keys[1])


class Holds:
    """One process's way to take and give back a hold of ``mode`` in a library."""

    def __init__(self, lib: str, client: Any, name: str) -> None:
        from django_redis_coord import Lock
        from django_redis_coord.core.rwlock.sync import ReadWriteLock

        self.lib = lib
        if lib == "lock":
            self.lock: Any = Lock(client, name, timeout=10)
        elif lib == "reader count":
            self.lock = ReaderCountLock(client, name, 10.0)
        else:
            self.lock = ReadWriteLock(client, name, timeout=10)

    def acquire(self, mode: str, patience: Optional[float] = None) -> bool:
        """Wait up to ``patience`` seconds (``None``: for ever; 0: do not wait)."""
        if self.lib == "reader count":
            return bool(self.lock.acquire(mode, patience))
        hold = self.lock if self.lib == "lock" else self.lock.hold(mode)
        if patience == 0:
            return bool(hold.acquire(blocking=False))
        return bool(hold.acquire(blocking_timeout=patience))

    def release(self, mode: str) -> None:
        if self.lib == "lock":
            self.lock.release()
        elif self.lib == "reader count":
            self.lock.release(mode)
        else:
            self.lock.hold(mode).release()


# -- 1. uncontended pairs --------------------------------------------------------------------------------
def pair_functions(client: Any) -> dict[str, Any]:
    holds = {"lock": Holds("lock", client, "bench:rw:lock"), "read": Holds("ours", client, "bench:rw:read"),
             "write": Holds("ours", client, "bench:rw:write")}

    def pair(lib: str) -> Any:
        hold, mode = holds[lib], "write" if lib != "read" else "read"

        def run() -> None:
            if not hold.acquire(mode, 0):
                raise RuntimeError(f"an uncontended {lib} acquire failed")
            hold.release(mode)

        return run

    return {lib: pair(lib) for lib in holds}


# -- 2. many processes: read holds next to the plain lock -----------------------------------------------------
def loop_holds(lib: str, mode: str, url: str, name: str, ready: Any, seconds: float) -> tuple[int, float]:
    """One process: one hold to warm up (its connection, the scripts, what a first call imports), then,
    once every process has (``ready``: a barrier), acquire, hold 1 ms, release, think 1 ms for
    ``seconds``; returns its holds acquired in that window and the window's length (s).

    The window opens after the warm-up, not at a guessed instant: a process that started late (a
    loaded machine) would otherwise spend the window starting, and report no hold.  It stays open
    until the process's first hold, so that its rate is measured on at least one hold."""
    import redis

    holds = Holds(lib, redis.Redis.from_url(url), name)
    if not holds.acquire(mode, 30):
        raise RuntimeError("a blocking acquire gave up")
    holds.release(mode)
    ready.wait(60)
    start_ns = time.monotonic_ns()
    end_ns = start_ns + int(seconds * 1e9)
    count, last_ns = 0, end_ns
    while True:
        if not holds.acquire(mode, 30):
            raise RuntimeError("a blocking acquire gave up")
        acquired_ns = time.monotonic_ns()
        if acquired_ns < end_ns or not count:
            count += 1
            last_ns = max(last_ns, acquired_ns)
        time.sleep(0.001)
        holds.release(mode)
        time.sleep(0.001)
        if time.monotonic_ns() >= end_ns:
            return count, (last_ns - start_ns) / 1e9


def holds_per_second(ctx: Context, lib: str, mode: str, sizes: Sizes) -> float:
    """The holds per second of ``sizes.procs`` processes together: the sum of their rates."""
    name = f"bench:rw:many:{lib}:{mode}"
    ready = FORK.Barrier(sizes.procs)
    found = run_workers(loop_holds, [(lib, mode, ctx.server.url, name, ready, sizes.contention_seconds)] * sizes.procs,
                        timeout=sizes.contention_seconds + 120)
    return sum(count / seconds for count, seconds in found)


# -- 3. a writer behind looping readers ----------------------------------------------------------------------
def loop_reads(lib: str, url: str, name: str, seed: int, hold: tuple[float, float], start_ns: int,
               end_ns: int) -> list[tuple[int, int]]:
    """One reader process: read holds back to back until ``end_ns``; returns them (monotonic ns)."""
    import redis

    holds = Holds(lib, redis.Redis.from_url(url), name)
    rng = random.Random(seed)
    spans = []
    sleep_until_ns(start_ns)
    while time.monotonic_ns() < end_ns:
        if not holds.acquire("read", 60):
            raise RuntimeError("a reader gave up")
        got = time.monotonic_ns()
        time.sleep(rng.uniform(*hold))
        spans.append((got, time.monotonic_ns()))
        holds.release("read")
    return spans


def write_now_and_then(lib: str, url: str, name: str, writes: int, patience: float, start_ns: int,
                       end_ns: int) -> list[Optional[float]]:
    """The writer: after the readers started, ``writes`` write holds at random moments; returns each
    wait in seconds (``None``: gave up after ``patience``)."""
    import redis

    holds = Holds(lib, redis.Redis.from_url(url), name)
    rng = random.Random(1)
    waits: list[Optional[float]] = []
    sleep_until_ns(start_ns + int(0.3e9))
    for _ in range(writes):
        if time.monotonic_ns() + patience * 1e9 > end_ns:
            break
        asked = time.monotonic()
        if holds.acquire("write", patience):
            waits.append(time.monotonic() - asked)
            time.sleep(0.005)
            holds.release("write")
        else:
            waits.append(None)
        time.sleep(rng.uniform(0.05, 0.15))
    return waits


def writer_behind_readers(ctx: Context, lib: str, readers: int, sizes: Sizes) -> dict[str, Any]:
    name = f"bench:rw:writer:{lib}:{readers}"
    start_ns = time.monotonic_ns() + int(0.3e9 + readers * 0.03e9)
    seconds = sizes.writes * 0.25 + 2 * sizes.writer_patience
    end_ns = start_ns + int(seconds * 1e9)
    args: list[tuple] = [(lib, ctx.server.url, name, seed, sizes.reader_hold, start_ns, end_ns)
                         for seed in range(readers)]
    results = run_workers(_role, [("write", (lib, ctx.server.url, name, sizes.writes, sizes.writer_patience,
                                             start_ns, end_ns))] + [("read", a) for a in args],
                          timeout=seconds + 120)
    waits, spans = results[0], [span for result in results[1:] for span in result]
    done = [w for w in waits if w is not None]
    return {"waits_ms": [w * 1000 for w in done], "gave_up": len(waits) - len(done), "asked": len(waits),
            "longest_hold_ms": max(b - a for a, b in spans) / 1e6 if spans else float("nan")}


def _role(role: str, args: tuple) -> Any:
    return write_now_and_then(*args) if role == "write" else loop_reads(*args)


# -- the report -------------------------------------------------------------------------------------------
def run(ctx: Context, sizes: Optional[Sizes] = None) -> Section:
    sizes = sizes or (QUICK if ctx.quick else FULL)
    section = Section("rwlock", "Read-write lock benchmark: read holds next to the plain lock, writers behind readers")
    section.text(__doc__.split("\n\n", 1)[1])
    ctx.flush()

    ctx.log("uncontended acquire+release pairs")
    client = ctx.client()
    pairs = pair_functions(client)
    for pair in pairs.values():  # load the scripts
        pair()
    result = interleaved_pairs(ctx, pairs, sizes.pair_seconds, sizes.pair_rounds, floor="lock")
    client.close()
    section.heading("Uncontended acquire + release")
    rows = []
    for lib in pairs:
        rate = section.figure(f"pairs_per_s.{lib}", statistics.median(result["rates"][lib]))
        ratio = section.figure(f"pairs_ratio.{lib}", statistics.median(result["ratios"][lib]), f"{lib} / lock")
        rows.append([lib, rate, f"{ratio:.2f}x", f"{result['typical_ratio'][lib]:.2f}x"])
    section.table(["hold", "pairs/s", "x lock (median of rounds)", "x lock (typical)"], rows)
    section.text("A read or write hold costs more Redis work than the plain lock's (a sorted set of holds, a "
                 "record per hold: the semaphore's layout), still one round trip each way.")

    section.heading(f"{sizes.procs} processes on one name: read holds next to the plain lock")
    ctx.log(f"{sizes.procs} processes, plain lock then read holds")
    lock_rate = section.figure("many.lock.holds_per_s", holds_per_second(ctx, "lock", "write", sizes))
    read_rate = section.figure("many.read.holds_per_s", holds_per_second(ctx, "ours", "read", sizes))
    ratio = section.figure("many.read_over_lock", read_rate / lock_rate, "read holds/s ÷ lock holds/s")
    section.table(["hold", "holds/s", "x lock"], [["lock", lock_rate, "1.00x"], ["read", read_rate, f"{ratio:.2f}x"]])
    section.check(f"{sizes.procs} processes: read holds/s >= 2x the plain lock's", ratio, ">=", 2.0)

    section.heading("A writer behind looping readers")
    rows = []
    for readers in sizes.readers:
        for lib in sizes.writer_libs:
            ctx.log(f"writer behind {readers} readers: {lib}")
            ctx.flush()
            found = writer_behind_readers(ctx, lib, readers, sizes)
            key = f"writer.{lib.replace(' ', '-')}.{readers}"
            waits = found["waits_ms"]
            p50 = section.figure(f"{key}.wait_p50_ms", percentile(waits, 50))
            p99 = section.figure(f"{key}.wait_p99_ms", percentile(waits, 99))
            longest = section.figure(f"{key}.longest_reader_hold_ms", found["longest_hold_ms"])
            section.figure(f"{key}.gave_up", found["gave_up"])
            rows.append([lib, readers, found["asked"], found["gave_up"], p50, p99,
                         max(waits) if waits else float("nan"), longest])
            if lib == "ours":
                section.check(f"{readers} readers: ours, writer wait p99 <= longest reader hold + "
                              f"{MARGIN * 1000:.0f} ms (ms)", p99, "<=", longest + MARGIN * 1000)
                section.check(f"{readers} readers: ours, writes that gave up", found["gave_up"], "==", 0)
    section.table(["library", "readers", "writes asked", f"gave up after {sizes.writer_patience:g} s",
                   "wait p50 ms", "wait p99 ms", "wait max ms", "longest reader hold ms"], rows)
    return section
