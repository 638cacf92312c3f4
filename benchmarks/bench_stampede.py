"""Cache stampede: 200 callers on a cold key whose value takes 50 ms to produce.

Each round makes a new cold key and starts 200 callers at the same instant: 50 threads in each of
4 OS processes, processes and threads started once and warmed up by a round that is not counted,
as a server's workers are (each has also found the library's hash tag of every Redis Cluster slot,
which a process otherwise finds as it meets new slots: about 75 ms in all); callers wait both
across processes and within one.  Every caller asks the
same django-redis cache for the key through one of three helpers, the helpers taking turns round by
round (all of them see the same background load):

* **ours**: ``django_redis_coord.get_or_set`` (one producer, holding the write side of
  the fill's read-write lock; the others queue for its read side, one per process, all granted at
  once when the write ends, and the rest of each process waits for that one);
* **python-redis-lock**: its cache backend's ``locked_get_or_set`` (``redis_lock.django_cache``):
  a lock around get / produce / set, waiters blocked in ``BLPOP`` and woken one per release;
* **plain**: Django's ``cache.get_or_set`` (no lock: every caller that misses produces);
* **floor**: no cache at all, each caller sleeps the production time: what the machine's
  scheduling alone adds to a 50 ms wait of 200 threads (the best any helper could do).

Figures: how many times the producer ran per round, and the *wait* of the callers that did not
produce (from their call to its return).  Targets: ours produces once per round, and its waiters'
p99 is at most the production time + 5 ms, and at most the floor's p99 (same run) + 5 ms.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.common import FORK, Context, Section, percentile, summary

PRODUCTION = 0.050
#: Target: the waiters' p99 wait at most the production time plus this (seconds).
MARGIN = 0.005
LIBS = ("ours", "python-redis-lock", "plain", "floor")


@dataclass(frozen=True)
class Sizes:
    processes: int = 4
    threads: int = 50
    rounds: int = 12  # per library
    settle: float = 0.4  # seconds between the forks and the start instant


QUICK = Sizes(processes=2, threads=10, rounds=2)


def _caches(url: str) -> dict[str, Any]:
    location = url.rsplit("/", 1)[0] + "/1"
    return {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location},
        "python-redis-lock": {"BACKEND": "redis_lock.django_cache.RedisCache", "LOCATION": location},
    }


def configure_caches(caches: dict[str, Any]) -> Any:
    """Django settings with ``caches`` as ``CACHES``; returns an override to disable afterwards (or None)."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(DEBUG=False, SECRET_KEY="benchmark-only", INSTALLED_APPS=[], DATABASES={},
                           CACHES=caches)
        django.setup()
        return None
    from django.test import override_settings

    override = override_settings(CACHES=caches)
    override.enable()
    return override


def _call(lib: str, key: str, producer: Any) -> Any:
    from django.core.cache import caches

    if lib == "floor":  # the value after exactly the production time, with no helper and no Redis
        time.sleep(PRODUCTION)
        return {"key": key}
    if lib == "ours":
        from django_redis_coord.integrations.cache_fill.sync import get_or_set

        return get_or_set(key, producer, 300)
    if lib == "python-redis-lock":
        return caches["python-redis-lock"].locked_get_or_set(key, producer, expire=10, timeout=300)
    return caches["default"].get_or_set(key, producer, 300)


def _caller(lib: str, key: str, start_at: float) -> tuple[float, bool]:
    """One call at ``start_at``: (wait s, whether this caller ran the producer)."""
    produced = []

    def producer() -> dict[str, Any]:
        produced.append(True)
        time.sleep(PRODUCTION)
        return {"key": key, "rows": list(range(20))}

    time.sleep(max(0.0, start_at - time.monotonic()))
    started = time.monotonic()
    value = _call(lib, key, producer)
    waited = time.monotonic() - started
    if value["key"] != key:
        raise AssertionError(f"{lib}: wrong value {value!r}")
    return waited, bool(produced)


def _worker(threads: int, jobs: Any, out: Any) -> None:
    """A long-lived process with ``threads`` long-lived threads, as a server's worker is: each
    round it is sent, ``(lib, key, start_at)``, is one call per thread; None stops it."""
    import queue
    import traceback

    inboxes: list[queue.Queue] = [queue.Queue() for _ in range(threads)]
    results: queue.Queue = queue.Queue()

    def thread_loop(inbox: queue.Queue) -> None:
        while True:
            job = inbox.get()
            if job is None:
                return
            try:
                results.put(_caller(*job))
            except BaseException:
                results.put(traceback.format_exc())

    pool = [threading.Thread(target=thread_loop, args=(inbox,), daemon=True) for inbox in inboxes]
    for thread in pool:
        thread.start()
    # The hash tags of every Redis Cluster slot (keys.slot_tag): a process finds them as it meets new
    # slots, about 75 ms in all.  A long-running server has met them; each round's new key would
    # otherwise pay a few ms for its slot, and the whole table sooner or later.
    from django_redis_coord.core.keys import SLOTS, slot_tag

    for slot in range(SLOTS):
        slot_tag(slot)
    out.put("ready")
    while True:
        job = jobs.get()
        if job is None:
            break
        for inbox in inboxes:
            inbox.put(job)
        out.put([results.get() for _ in inboxes])
    for inbox in inboxes:
        inbox.put(None)


class Workers:
    """``count`` worker processes, each with a job queue of its own, and one queue for results."""

    def __init__(self, count: int, threads: int) -> None:
        self.out = FORK.Queue()
        self.jobs = [FORK.Queue() for _ in range(count)]
        self.procs = [FORK.Process(target=_worker, args=(threads, jobs, self.out), daemon=True) for jobs in self.jobs]
        for proc in self.procs:
            proc.start()
        for _ in self.procs:
            self._get(60)

    def round(self, lib: str, key: str, settle: float) -> list[tuple[float, bool]]:
        start_at = time.monotonic() + settle
        for jobs in self.jobs:
            jobs.put((lib, key, start_at))
        results = [item for _ in self.jobs for item in self._get(120)]
        failed = [item for item in results if isinstance(item, str)]
        if failed:
            raise RuntimeError(f"{len(failed)} callers failed; the first:\n{failed[0]}")
        return results

    def _get(self, timeout: float) -> Any:
        return self.out.get(timeout=timeout)

    def stop(self) -> None:
        for jobs in self.jobs:
            jobs.put(None)
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


def measure(sizes: Sizes, log: Any, libs: tuple[str, ...] = LIBS, name: str = "stampede") -> dict[str, dict[str, list]]:
    """Per library and round: the producer runs, the waits of the callers that did not produce and
    the call times of all callers (seconds)."""
    found: dict[str, dict[str, list]] = {lib: {"runs": [], "waits": [], "calls": []} for lib in libs}
    workers = Workers(sizes.processes, sizes.threads)
    try:
        for lib in libs:  # each thread's cache objects and connections, each process's waiting connection
            workers.round(lib, f"{name}:warm-up:{lib}", sizes.settle)
        for round_no in range(sizes.rounds):
            for index in range(len(libs)):
                lib = libs[(round_no + index) % len(libs)]
                results = workers.round(lib, f"{name}:{lib}:{round_no}", sizes.settle)  # a new cold key
                found[lib]["runs"].append(sum(produced for _, produced in results))
                found[lib]["waits"].append([waited for waited, produced in results if not produced])
                found[lib]["calls"].append([waited for waited, _ in results])
            log(f"  round {round_no + 1}/{sizes.rounds}: producer runs " +
                ", ".join(f"{lib} {found[lib]['runs'][-1]}" for lib in libs))
    finally:
        workers.stop()
    return found


def run(ctx: Context, sizes: Sizes = Sizes()) -> Section:
    if ctx.quick:
        sizes = QUICK
    callers = sizes.processes * sizes.threads
    section = Section("stampede", f"Cache stampede: {callers} callers on a cold key, a 50 ms producer")
    ctx.flush()
    override = configure_caches(_caches(ctx.server.url))
    try:
        found = measure(sizes, ctx.log)
        # The same processes with one thread each: what the lock and the wake-ups cost without the threads.
        single = measure(dataclasses.replace(sizes, threads=1), ctx.log, libs=("ours",), name="single")
    finally:
        if override is not None:
            override.disable()
    production_ms = PRODUCTION * 1000
    rows = []
    stats = {}
    for lib in LIBS:
        runs = found[lib]["runs"]
        waits = [value * 1000 for each in found[lib]["waits"] for value in each]
        calls = [value * 1000 for each in found[lib]["calls"] for value in each]
        stats[lib] = summary(waits)
        rounds_p99 = [percentile([value * 1000 for value in each], 99) for each in found[lib]["waits"] if each]
        section.figure(f"runs_per_round.{lib}", sum(runs) / len(runs), f"producer runs per round, {lib}")
        section.figure(f"wait_p99_ms.{lib}", stats[lib]["p99"], f"waiters' wait p99 (ms), {lib}")
        section.figure(f"call_p99_ms.{lib}", percentile(calls, 99), f"every caller's call p99 (ms), {lib}")
        rows.append([lib, f"{min(runs)}–{max(runs)}", f"{stats[lib]['p50']:.1f}", f"{stats[lib]['p90']:.1f}",
                     f"{stats[lib]['p99']:.1f}", f"{stats[lib]['max']:.1f}",
                     f"{statistics.median(rounds_p99):.1f}" if rounds_p99 else "–", f"{percentile(calls, 99):.1f}"])
    ours = stats["ours"]["p99"]
    peer = stats["python-redis-lock"]["p99"]
    plain_runs = sum(found["plain"]["runs"]) / len(found["plain"]["runs"])
    section.figure("wait_p99_ratio.python-redis-lock_over_ours", peer / ours,
                   "python-redis-lock waiters' p99 ÷ ours (same run)")
    section.figure("runs_ratio.plain_over_ours", plain_runs / (sum(found["ours"]["runs"]) / sizes.rounds),
                   "plain get_or_set producer runs ÷ ours")
    section.check("ours: producer runs in the worst round", max(found["ours"]["runs"]), "==", 1)
    section.check(f"ours: waiters' p99 wait <= production + {MARGIN * 1000:.0f} ms (ms)", ours, "<=",
                  production_ms + MARGIN * 1000)
    floor = stats["floor"]["p99"]
    section.figure("wait_p99_over_floor_ms.ours", ours - floor, "ours waiters' p99 - the floor's p99 (ms)")
    section.check(f"ours: waiters' p99 wait - the floor's p99 <= {MARGIN * 1000:.0f} ms (ms)", ours - floor, "<=",
                  MARGIN * 1000)
    single_waits = [value * 1000 for each in single["ours"]["waits"] for value in each]
    section.figure("wait_p99_ms.ours_one_thread_per_process", percentile(single_waits, 99),
                   f"ours, {sizes.processes} processes of one thread: waiters' wait p99 (ms)")
    section.table(["helper", "producer runs per round", "wait p50 ms", "p90 ms", "p99 ms", "max ms",
                   "p99 of the median round ms", "every caller's call p99 ms"], rows)
    section.text(
        f"{sizes.rounds} rounds per helper, interleaved; {callers} callers per round ({sizes.processes} processes "
        f"× {sizes.threads} threads), all on one django-redis cache; production takes {production_ms:.0f} ms "
        f"(a sleep). *Wait*: the callers that did not run the producer, from their call to its return (plain "
        f"`cache.get_or_set` has none: every caller produces). Waiters' p99, python-redis-lock ÷ ours: "
        f"{peer / ours:.1f}×. Producer runs per round, plain `cache.get_or_set` ÷ ours: {plain_runs:.0f}×. A "
        "waiter's wait includes the producer's own reads and lock before production (the callers start at "
        "one instant) and the wake-ups after it: ours wakes the waiting processes together (the end of the "
        "write grants all their reads in one script), python-redis-lock passes its lock once per caller. A round "
        "in which the machine stalls a process moves all of that round's waits, so the p99 over all rounds "
        "follows the worst rounds; the median round's p99 is shown beside it. The floor's callers only "
        f"sleep {production_ms:.0f} ms: its p99 is what the machine's scheduling of {callers} threads adds by "
        f"itself (here {floor - production_ms:+.1f} ms); ours ÷ floor (p99): {ours / floor:.2f}×. The same "
        f"{sizes.processes} processes with one thread each ({sizes.rounds} more rounds, ours only): waiters' p50 "
        f"{percentile(single_waits, 50):.1f} ms, p99 {percentile(single_waits, 99):.1f} ms: the lock and the wake-ups "
        "alone."
    )
    return section
