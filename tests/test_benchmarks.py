"""The benchmark machinery (benchmarks/) with tiny sizes: helpers, runner and the lock report.

Figures are not asserted against speed targets here (that is the benchmark's job on a quiet
machine); the report's structure, the sanity of its figures and the safety checks are.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types

import pytest

from benchmarks import bench_lock, bench_stampede, run
from benchmarks.common import (
    PLACEMENTS,
    Context,
    Section,
    commands_delta,
    commandstats,
    counting_client,
    held_fraction,
    overlaps,
    percentile,
    sent_commands,
    write_report,
)

TINY = bench_lock.Sizes(
    pair_seconds=0.05,
    pair_rounds=2,
    contention_seconds=0.3,
    contention_procs=(2,),
    contention_rounds=1,
    contenders=("raw", "redis-py 1ms", "ours", "ceiling"),
    monitor_seconds=0.2,
    many_libs=("redis-py", "ours", "ours asyncio"),
    many_counts=(1, 10),
    many_timeout=30.0,
    many_settle=0.1,
    expiry_libs=("ours",),
    expiry_trials=1,
    expiry_ttl=0.5,
    handoff_libs=("ours",),
    handoff_trials=3,
)


def test_percentile_interpolates():
    assert percentile([], 50) != percentile([], 50)  # NaN for no data
    assert percentile([5.0], 99) == 5.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99.0
    assert percentile([3, 1, 2], 100) == 3.0


def test_held_fraction_is_the_union_of_holds_clipped_to_the_window():
    # [0,10) and [5,20) overlap: union 20; [30,40) adds 10; [90,120) is clipped to [90,100).
    holds = [(5, 20), (0, 10), (30, 40), (90, 120), (-10, -5)]
    assert held_fraction(holds, 0, 100) == pytest.approx(0.4)
    assert held_fraction([], 0, 100) == 0.0


def test_overlaps_catches_holds_of_different_holders_that_intersect():
    safe = [(0, 10, "a"), (10, 20, "b"), (25, 30, "a")]
    assert overlaps(safe) == 0
    unsafe = [(0, 10, "a"), (9, 20, "b"), (19, 21, "c")]
    assert overlaps(unsafe) == 2
    # One holder's own consecutive records never count against it.
    assert overlaps([(0, 10, "a"), (5, 6, "a")]) == 0


def test_section_records_checks_tables_and_writes_a_report(redis_servers, tmp_path):
    server = redis_servers(1)[0]
    ctx = Context(server, quick=True, results_dir=tmp_path, verbose=False)
    section = Section("demo", "Demo report", echo=False)
    section.figure("rate", 123.0, "things/s")
    met = section.check("rate high", 123.0, ">=", 100)
    missed = section.check("rate higher", 123.0, ">=", 1000)
    nan = section.check("unmeasured", float("nan"), "<=", 1)
    assert (met.passed, missed.passed, nan.passed) == (True, False, False)
    section.table(["a", "b"], [["x", 1.5], ["y", 12345.0]])
    path = write_report(section, ctx, started=0.0)
    text = path.read_text()
    assert text.startswith("# Demo report")
    assert "redis-server" in text and "| x | 1.50 |" in text and "| y | 12,345 |" in text
    assert "| rate high | 123 | >= 100 | ✅ |" in text and "| rate higher | 123 | >= 1000 | ❌ |" in text
    payload = json.loads((tmp_path / "demo.json").read_text())
    assert payload["figures"] == {"rate": 123.0}
    assert [c["passed"] for c in payload["checks"]] == [True, False, False]


def test_command_counting_sees_client_commands_and_scripted_calls(redis_servers):
    server = redis_servers(1)[0]
    client = counting_client(server.host, server.port)
    admin = server.client()
    sent_commands(reset=True)
    before = commandstats(admin)
    client.set("k", "v")
    client.eval("redis.call('GET', KEYS[1]); redis.call('DEL', KEYS[1]); return 1", 1, "k")
    after = commandstats(admin)
    assert sent_commands() == {"SET": 1, "EVAL": 1}
    # The server also counts the two commands run inside the script.
    assert commands_delta(before, after) == 4


def test_runner_selects_modules_and_reports_a_failing_one(redis_servers, tmp_path, monkeypatch):
    assert "lock" in run.discover()
    assert run.selected(run.parse_args(["--only", "lock"])) == ["lock"]
    with pytest.raises(SystemExit):
        run.selected(run.parse_args(["--only", "no_such_module"]))
    broken = types.SimpleNamespace(run=lambda ctx: 1 / 0)
    monkeypatch.setattr(run.importlib, "import_module", lambda name: broken)
    ctx = Context(redis_servers(1)[0], results_dir=tmp_path, verbose=False)
    section, error, path = run.run_module("broken", ctx)
    assert error is not None and "ZeroDivisionError" in error
    assert "## Failed" in path.read_text()


def test_lock_benchmark_end_to_end_with_tiny_sizes(redis_servers, tmp_path):
    server = redis_servers(1)[0]
    ctx = Context(server, quick=True, results_dir=tmp_path, verbose=False)
    section = bench_lock.run(ctx, sizes=TINY)
    write_report(section, ctx, started=0.0)
    report = (tmp_path / "lock.md").read_text()
    for heading in ("## Targets", "## Uncontended acquire + release", "## Contention", "### 2 processes",
                    "### Ours against the best peer of this run",
                    "### Commands sent per acquisition, counted by MONITOR (2 processes)",
                    "## Many waiters in one process", "## Crash-expiry handoff", "## Handoff latency", "![",
                    "lock_contention.png"):
        assert heading in report, heading
    figures = section.figures
    for lib in bench_lock.ALL:
        assert figures[f"pairs_per_s.{lib}"] > 0, lib
        assert f"| {lib} |" in report
    assert figures["pairs_ratio.raw"] == pytest.approx(1.0)
    for lib in TINY.contenders:
        prefix = f"contention2.{lib}."
        assert figures[prefix + "acq_per_s"] > 0
        assert figures[prefix + "overlaps"] == 0, f"{lib} let two processes hold the lock at once"
        assert 0 < figures[prefix + "held"] <= 1
        assert 0 <= figures[prefix + "fairness"] <= 1
        assert figures[prefix + "p50"] <= figures[prefix + "p99"] <= figures[prefix + "max"]
    # The ceiling passes its one token around: a BLPOP and an RPUSH per acquisition, nothing else.
    assert figures["contention2.ceiling.sent_cmds"] == pytest.approx(2.0)
    # Ours sends at least an acquire and a release per acquisition; the server counts scripted calls too.
    assert figures["contention2.ours.sent_cmds"] >= 2
    assert figures["contention2.ours.server_cmds"] > figures["contention2.ours.sent_cmds"]
    # MONITOR sees the same: the ceiling's two commands, and ours' scripts without what they run.
    assert figures["contention2.ceiling.monitor_cmds"] == pytest.approx(2.0, abs=0.05)
    assert 2 <= figures["contention2.ours.monitor_cmds"] < figures["contention2.ours.server_cmds"]
    assert figures["contention2.ours.held_vs_best_peer"] > 0
    # Many waiters in one process: ours serves them all on one waiting connection (and a command
    # connection per waiter at most); a peer's failures are counted, not raised.
    for lib in ("ours", "ours asyncio"):
        for count in TINY.many_counts:
            prefix = f"many.{lib}.{count}."
            assert figures[prefix + "served"] == count, (lib, count)
            assert figures[prefix + "errors"] == 0 and figures[prefix + "overlaps"] == 0, (lib, count)
            assert figures[prefix + "blocked"] + figures[prefix + "subscribed"] <= 4, (lib, count)
            assert 1 <= figures[prefix + "connections"] <= count + 1, (lib, count)
            assert 0 < figures[prefix + "p50"] <= figures[prefix + "p99"], (lib, count)
            assert figures[prefix + "total_s"] > 0
    for count in TINY.many_counts:
        assert figures[f"many.redis-py.{count}.served"] + figures[f"many.redis-py.{count}.errors"] == count
    # The waiter cannot own the lock before the crashed holder's TTL ended (PTTL has 1 ms steps),
    # and gets it within a generous bound even on a busy machine.
    assert -5 <= figures["expiry_ms.ours"] <= 1000
    assert figures["handoff_p50_ms.ours"] > 0
    labels = [check.label for check in section.checks]
    assert any("uncontended ours" in label for label in labels)
    assert any("held fraction / best peer's" in label for label in labels)
    assert any("wait p99 / best peer's" in label for label in labels)
    assert any("MONITOR" in label for label in labels)
    assert any("many waiters: ours asyncio" in label for label in labels)
    assert any("crash-expiry" in label for label in labels)
    assert (tmp_path / "lock_contention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The machine's round trips by CPU placement (this machine has two CPUs or more; else none).
    if len(os.sched_getaffinity(0)) >= 2:
        assert "## The machine: one round trip, by where the processes run" in report
        for label, _, _ in PLACEMENTS:
            assert figures[f"placement_rt_us.{label}.back to back"] > 0, label
            assert figures[f"placement_rt_us.{label}.after 1 ms idle"] > 0, label
        assert os.sched_getaffinity(server.process.pid) == os.sched_getaffinity(0)  # left unpinned
    payload = json.loads((tmp_path / "lock.json").read_text())
    assert payload["figures"]["pairs_per_s.ours"] == figures["pairs_per_s.ours"]


def test_a_contention_run_has_acquisitions_however_late_its_contenders_start(redis_servers, tmp_path):
    """A window no contender can reach in time (0 s, as a loaded machine makes a short one): every
    contender still acquires once, so the per-acquisition figures are numbers, never NaN."""
    ctx = Context(redis_servers(1)[0], quick=True, results_dir=tmp_path, verbose=False)
    sizes = dataclasses.replace(TINY, monitor_seconds=0.0)
    monitored = bench_lock.measure_monitored(ctx, "ceiling", 2, sizes)
    assert monitored["acquisitions"] >= 2
    assert monitored["monitor_cmds"] == pytest.approx(2.0)  # a BLPOP and an RPUSH per acquisition
    contended = bench_lock.measure_contention(ctx, "ours", 2, dataclasses.replace(sizes, contention_seconds=1e-6))
    assert contended["acquisitions"] >= 2 and contended["overlaps"] == 0
    assert contended["sent_cmds"] >= 2


def test_stampede_benchmark_end_to_end_with_tiny_sizes(redis_servers, tmp_path):
    ctx = Context(redis_servers(1)[0], results_dir=tmp_path, verbose=False)
    sizes = bench_stampede.Sizes(processes=2, threads=3, rounds=1, settle=0.2)
    section = bench_stampede.run(ctx, sizes=sizes)
    write_report(section, ctx, started=0.0)
    report = (tmp_path / "stampede.md").read_text()
    figures = section.figures
    # One production per round for the single-flight helpers, one per caller for Django's own.
    assert figures["runs_per_round.ours"] == 1 and figures["runs_per_round.python-redis-lock"] == 1
    assert figures["runs_per_round.plain"] == 6 and figures["runs_ratio.plain_over_ours"] == 6
    assert figures["wait_p99_ms.ours"] >= bench_stampede.PRODUCTION * 1000 * 0.5
    # Processes of one thread wait for keys of their own, as cold as the others.
    assert figures["wait_p99_ms.ours_one_thread_per_process"] >= bench_stampede.PRODUCTION * 1000 * 0.5
    assert figures["wait_p99_ratio.python-redis-lock_over_ours"] > 0
    for lib in bench_stampede.LIBS:
        assert f"| {lib} |" in report
    assert any("producer runs in the worst round" in check.label for check in section.checks)


def test_locked_view_variants_take_turns_request_by_request_in_a_changing_order():
    from benchmarks.bench_decorator import _interleaved

    calls: list[str] = []

    def timed(path: str) -> list[float]:
        calls.append(path)
        return [float(len(calls))]

    turns = 300
    samples = _interleaved(("a", "b", "c"), turns, 0, timed)
    # Every turn times each path once ...
    assert len(calls) == 3 * turns
    assert all(sorted(calls[i:i + 3]) == ["a", "b", "c"] for i in range(0, len(calls), 3))
    assert {path: len(found) for path, found in samples.items()} == {"a": turns, "b": turns, "c": turns}
    assert samples["a"] == [float(i + 1) for i, path in enumerate(calls) if path == "a"]
    # ... in an order that changes: each path follows each other path (and itself, across turns).
    predecessors = {(before, after) for before, after in zip(calls, calls[1:])}
    assert predecessors == {(x, y) for x in "abc" for y in "abc"}
    assert len({tuple(calls[i:i + 3]) for i in range(0, len(calls), 3)}) == 6
    # The same round gives the same order; another round another one.
    first = list(calls)
    calls.clear()
    _interleaved(("a", "b", "c"), turns, 0, timed)
    assert calls == first
    calls.clear()
    _interleaved(("a", "b", "c"), turns, 1, timed)
    assert calls != first


def test_rwlock_benchmark_end_to_end_with_tiny_sizes(redis_servers, tmp_path):
    from benchmarks import bench_rwlock

    assert "rwlock" in run.discover()
    tiny = bench_rwlock.Sizes(pair_seconds=0.05, pair_rounds=1, procs=2, contention_seconds=0.3, readers=(3,),
                              reader_hold=(0.02, 0.05), writes=3, writer_patience=0.5)
    ctx = Context(redis_servers(1)[0], quick=True, results_dir=tmp_path, verbose=False)
    section = bench_rwlock.run(ctx, sizes=tiny)
    write_report(section, ctx, started=0.0)
    report = (tmp_path / "rwlock.md").read_text()
    for heading in ("## Uncontended acquire + release", "## 2 processes on one name", "## A writer behind"):
        assert heading in report, heading
    figures = section.figures
    assert figures["pairs_ratio.lock"] == pytest.approx(1.0)
    assert figures["pairs_per_s.read"] > 0 and figures["pairs_per_s.write"] > 0
    # Each looping process counts at least its first hold after the warm-up (its window stays open
    # until then), however slow the machine: a rate of 0 would mean a broken measurement.
    assert figures["many.lock.holds_per_s"] > 0 and figures["many.read.holds_per_s"] > 0
    # Ours serves every write behind the readers, within the longest reader hold and the hand-off.
    assert figures["writer.ours.3.gave_up"] == 0
    assert 0 < figures["writer.ours.3.wait_p50_ms"] <= figures["writer.ours.3.wait_p99_ms"]
    assert figures["writer.ours.3.longest_reader_hold_ms"] >= 20
    # The readers-first lock written by hand is measured in the same run (its writer may starve).
    assert "writer.reader-count.3.gave_up" in figures and "| reader count | 3 |" in report


def test_ratelimit_benchmark_end_to_end_in_quick_mode(redis_servers, tmp_path):
    from benchmarks import bench_ratelimit

    assert "ratelimit" in run.discover()
    ctx = Context(redis_servers(1)[0], quick=True, results_dir=tmp_path, verbose=False)
    section = bench_ratelimit.run(ctx)
    write_report(section, ctx, started=0.0)
    report = (tmp_path / "ratelimit.md").read_text()
    for heading in ("### Refused decisions", "### Admitted decisions", "### Exactness", "### Boundary burst"):
        assert heading in report, heading
    figures = section.figures
    for lib in ("ours gcra", "ours window", "limits moving", "limits sliding", "django-ratelimit"):
        assert figures[f"refused.decisions_per_s.{lib}"] > 0
    # (django-ratelimit counts on the test settings' cache, another server: no server time here)
    for lib in ("ours gcra", "ours window", "limits moving", "limits sliding"):
        assert figures[f"admitted.server_usec.{lib}"] > 0
    # What the limits guarantee, whatever the machine's speed: GCRA never above burst + rate x t,
    # the exact window never above N in a second nor across a boundary.
    assert figures["exact.gcra.worst_vs_bound"] <= 1.0
    assert figures["exact.ours window.most_in_a_second_vs_n"] <= 1.0
    assert figures["boundary.admitted.ours window"] <= bench_ratelimit.BOUNDARY_N
