"""Soak: longer workloads with faults, our primitives and the unsafe controls, and a report.

    .venv/bin/python -m tests.safety.soak --minutes 10

Runs every scenario in turn until the time is up (each run lasts ``--run-seconds``), checks every
recorded history and writes ``benchmarks/results/soak.md``: histories checked, operations,
faults injected and violations found per scenario.  Our primitives must show 0 violations and
every unsafe control more than 0; the exit status is 1 otherwise.

The servers are private redis-servers on loopback (started and stopped here); the protected set
lives on a second server so that restarting the lock's server does not erase it.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from django_redis_coord.testing.server import RedisServer

from .proxy import Proxy
from .workloads import (
    UNSAFE_KINDS,
    HolderPauseNemesis,
    Nemesis,
    Outcome,
    PauseNemesis,
    ProxyNemesis,
    RestartNemesis,
    Workload,
    run_workload,
)

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "benchmarks" / "results" / "soak.md"


@dataclass
class Scenario:
    """One kind of run: a workload, its fault, and which checkers judge it."""

    title: str
    workload: Workload
    nemesis: Optional[Callable[[Servers, Workload], Nemesis]] = None
    #: Checkers whose verdict counts (None: all).  After a restart without persistence Redis has
    #: forgotten its holders, so exclusion and linearizability are not promised there.
    judged: Optional[tuple[str, ...]] = None
    via_proxy: bool = False

    @property
    def unsafe(self) -> bool:
        return self.workload.kind in UNSAFE_KINDS or not self.workload.fenced


@dataclass
class Tally:
    runs: int = 0
    histories: int = 0
    operations: int = 0
    faults: int = 0
    violations: int = 0
    by_checker: dict[str, int] = field(default_factory=dict)
    undecided: int = 0
    errors: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Servers:
    def __init__(self) -> None:
        self.lock = RedisServer().start()
        self.resource = RedisServer().start()
        self.proxy = Proxy("127.0.0.1", self.lock.port).start()

    def close(self) -> None:
        self.proxy.stop()
        self.lock.cleanup()
        self.resource.cleanup()


def scenarios(seconds: float, processes: int) -> list[Scenario]:
    base = Workload(processes=processes, rounds=0, duration=seconds, ttl=0.25, hold=(0.001, 0.02),
                    stall=0.1, stall_for=0.4, blocking_timeout=2.0, socket_timeout=0.5)
    network = base.with_(stall=0.0, socket_timeout=0.25, blocking_timeout=1.0, ttl=0.3)
    restart = base.with_(stall=0.0, socket_timeout=0.5, blocking_timeout=1.0, ttl=0.3)
    return [
        Scenario("Lock, holders stalling past the TTL", base.with_(kind="lock")),
        Scenario("Lock (reentrant), holders stalling past the TTL", base.with_(kind="lock-reentrant")),
        Scenario("Lock (watchdog), holder processes SIGSTOPped past the TTL", base.with_(kind="lock-renew", stall=0.0),
                 lambda s, w: HolderPauseNemesis(s.lock.url, w.name, every=1.0, pause=0.6)),
        Scenario("Semaphore (limit 2), client processes SIGSTOPped", base.with_(kind="semaphore", limit=2),
                 lambda s, w: PauseNemesis(every=0.5, pause=0.6, seed=w.seed)),
        Scenario("Lock (watchdog), redis-server SIGKILLed and restarted", restart.with_(kind="lock-renew"),
                 lambda s, w: RestartNemesis(s.lock, every=1.5, down_for=0.4), judged=("fences", "lost-updates")),
        Scenario("Semaphore (watchdog), redis-server SIGKILLed and restarted",
                 restart.with_(kind="semaphore-renew", limit=2),
                 lambda s, w: RestartNemesis(s.lock, every=1.5, down_for=0.4), judged=("fences",)),
        Scenario("Lock (watchdog), latency and blackholes", network.with_(kind="lock-renew"),
                 lambda s, w: ProxyNemesis(s.proxy, every=0.5, latency=0.1, blackhole_for=0.6, seed=w.seed),
                 via_proxy=True),
        Scenario("Semaphore (watchdog), latency and blackholes", network.with_(kind="semaphore-renew", limit=2),
                 lambda s, w: ProxyNemesis(s.proxy, every=0.5, latency=0.1, blackhole_for=0.6, seed=w.seed),
                 via_proxy=True),
        Scenario("UNSAFE: GET-then-DEL release", base.with_(kind="get-then-del", gap=0.3)),
        Scenario("UNSAFE: lock without tokens", base.with_(kind="tokenless")),
        Scenario("UNSAFE: fence drawn before the grant", base.with_(kind="racy-fence", gap=0.05)),
        Scenario("UNSAFE: semaphore without WATCH", base.with_(kind="racy-semaphore", limit=2)),
        Scenario("UNSAFE: our Lock with unfenced writes", base.with_(kind="lock", fenced=False)),
    ]


def run_one(scenario: Scenario, servers: Servers, seed: int) -> Outcome:
    name = f"soak-{scenario.workload.kind}-{seed}"
    lock_url = servers.proxy.url if scenario.via_proxy else servers.lock.url
    w = scenario.workload.with_(name=name, seed=seed, lock_url=lock_url, resource_url=servers.resource.url)
    nemesis = scenario.nemesis(servers, w) if scenario.nemesis else None
    linearizability = scenario.judged is None or "linearizable" in scenario.judged
    return run_workload(w, nemesis, timeout=w.duration * 4 + 120 if w.duration else 300,
                        linearizability=linearizability)


def record(tally: Tally, scenario: Scenario, outcome: Outcome) -> None:
    tally.runs += 1
    tally.histories += 1
    tally.operations += len(outcome.history.operations())
    tally.faults += outcome.faults
    tally.seconds += outcome.elapsed
    for result in outcome.report.results:
        if scenario.judged is not None and result.name not in scenario.judged:
            continue
        if result.valid is None:
            tally.undecided += 1
        tally.violations += result.count
        tally.by_checker[result.name] = tally.by_checker.get(result.name, 0) + result.count
        if result.count and len(tally.examples) < 3:
            tally.examples.append(f"{result.name}: {result.violations[0][:300]}")


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "django_redis_coord"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (core modified in the working tree)" if dirty else "")
    except OSError:
        return "unknown"


def write_report(path: Path, tallies: dict[str, Tally], kinds: dict[str, Scenario], commit: str,
                 started: datetime.datetime, ok: bool) -> None:
    lines = [
        "# Soak report",
        "",
        f"- Command: `.venv/bin/python -m tests.safety.soak {' '.join(sys.argv[1:])}`",
        f"- Started {started:%Y-%m-%d %H:%M} UTC, commit {commit}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, redis-server {RedisServer().binary}",
        f"- Verdict: **{'as expected' if ok else 'UNEXPECTED'}** (0 violations for our primitives, "
        "> 0 for every unsafe control)",
        "",
        "| scenario | runs | histories checked | operations | faults injected | violations | by checker |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for title, tally in tallies.items():
        checkers = ", ".join(f"{name} {count}" for name, count in tally.by_checker.items()) or "-"
        if tally.undecided:
            checkers += f" ({tally.undecided} undecided)"
        lines.append(f"| {title} | {tally.runs} | {tally.histories} | {tally.operations} | {tally.faults} "
                     f"| {tally.violations} | {checkers} |")
    totals = [t for title, t in tallies.items() if not kinds[title].unsafe]
    lines += [
        "",
        f"Our primitives: {sum(t.histories for t in totals)} histories, {sum(t.operations for t in totals)} "
        f"operations, {sum(t.faults for t in totals)} faults, {sum(t.violations for t in totals)} violations.",
        "",
        "Scenarios after a restart judge fences and lost updates only: Redis without persistence forgets",
        "its holders, so two clients may both hold across a restart; fences (floored by the server clock)",
        "keep the protected set safe.",
        "",
    ]
    flagged = [(title, t) for title, t in tallies.items() if t.examples or t.errors]
    if flagged:
        lines += ["## First violations and errors", ""]
        for title, tally in flagged:
            for example in tally.examples + tally.errors[:2]:
                lines.append(f"- {title}: `{example.replace('`', chr(39))}`")
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to keep running scenarios")
    parser.add_argument("--run-seconds", type=float, default=8.0, help="length of one workload run")
    parser.add_argument("--processes", type=int, default=6, help="client processes per run")
    parser.add_argument("--only", default="", help="run only the scenarios whose title contains this text")
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    # Stopped from outside: still stop the servers and write what was found.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # Losses and failed renewals are expected here and counted in the report, not printed.
    quiet = logging.getLogger("django_redis_coord")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    started = datetime.datetime.now(datetime.timezone.utc)
    commit = git_commit()
    stop_at = time.monotonic() + args.minutes * 60
    servers = Servers()
    plan = [s for s in scenarios(args.run_seconds, args.processes) if args.only.lower() in s.title.lower()]
    if not plan:
        parser.error(f"no scenario matches {args.only!r}")
    kinds = {scenario.title: scenario for scenario in plan}
    tallies = {scenario.title: Tally() for scenario in plan}
    seed = 0
    try:
        while True:
            for scenario in plan:
                if seed >= len(plan) and time.monotonic() >= stop_at:
                    break
                seed += 1
                tally = tallies[scenario.title]
                try:
                    outcome = run_one(scenario, servers, seed)
                except Exception as exc:  # a hang or a crashed client is a finding too
                    tally.runs += 1
                    lines = [line for line in str(exc).splitlines() if line.strip()]
                    tally.errors.append(f"{type(exc).__name__}: {lines[0] if lines else ''} ... "
                                        f"{lines[-1][:300] if len(lines) > 1 else ''}")
                    traceback.print_exc()
                    servers.lock.start()
                    continue
                record(tally, scenario, outcome)
                print(f"[{time.strftime('%H:%M:%S')}] {scenario.title}: {len(outcome.history.operations())} ops, "
                      f"{outcome.faults} faults, {outcome.violations} violations", flush=True)
            else:
                continue
            break
    finally:
        servers.close()
    ok = all(
        (t.violations > 0 if kinds[title].unsafe else t.violations == 0 and not t.errors)
        for title, t in tallies.items() if t.runs
    )
    write_report(args.report, tallies, kinds, commit, started, ok)
    print(f"report written to {args.report}; {'as expected' if ok else 'UNEXPECTED results'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
