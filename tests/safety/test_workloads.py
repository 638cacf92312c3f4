"""Process workloads: our primitives pass every checker; the unsafe controls are caught.

All runs share one load (``LOAD``): four client processes, a 200 ms TTL, short holds and, now
and then, a stall of 300 ms inside the hold - longer than the TTL, like a GC pause - so holds do
expire under their holders.  Each unsafe control additionally gets the one window its design
leaves open (``gap``: the time between its two round trips).
"""

from __future__ import annotations

import pytest

from tests.safety.workloads import HolderPauseNemesis, Workload, run_workload

# Multi-process workloads whose faults are timed against short TTLs: they run alone, after the
# parallel part of dev.py test (tests/README.md, "Markers").
pytestmark = pytest.mark.serial

LOAD = Workload(processes=4, rounds=10, ttl=0.2, hold=(0.001, 0.015), stall=0.15, stall_for=0.3, seed=7)


def load(server, kind: str, **changes) -> Workload:
    return LOAD.with_(kind=kind, name=f"load-{kind}", lock_url=server.url, **changes)


def flagged(outcome) -> set[str]:
    return {result.name for result in outcome.report.results if result.valid is False}


# -- our primitives ----------------------------------------------------------------------------
def test_lock_passes_every_checker_while_holds_expire_under_their_holders(lock_server):
    outcome = run_workload(load(lock_server, "lock"))
    assert outcome.report.valid, outcome.describe()
    assert {r.name for r in outcome.report.results} == {"exclusion", "fences", "lost-updates", "linearizable"}
    assert outcome.count("acquire", "ok") == LOAD.processes * LOAD.rounds
    # The load did what it is for: stalled holders lost their hold and their stale writes were
    # refused by the fence, and refused releases were judged as expiries.
    assert outcome.count("write", "fail") + outcome.count("read", "fail") >= 1, outcome.describe()
    assert outcome.count("release", "fail") >= 1
    assert len(outcome.final) == outcome.count("write", "ok") >= LOAD.rounds


def test_reentrant_lock_keeps_its_fence_and_passes(lock_server):
    outcome = run_workload(load(lock_server, "lock-reentrant"))
    assert outcome.report.valid, outcome.describe()
    assert outcome.report.by_name()["fences"].checked > outcome.count("acquire", "ok") // 2


def test_a_reentry_into_a_hold_lost_meanwhile_is_recorded_as_a_loss_and_passes(lock_server):
    # Each client stalls past the TTL between its grant and its re-entry: the re-entry is refused
    # (LockLostError), which the client records as the loss of its hold, and the checkers judge.
    w = load(lock_server, "lock-reentrant", gap=0.35, stall=0.0, rounds=3)
    outcome = run_workload(w)
    assert outcome.report.valid, outcome.describe()
    acquires = [op for op in outcome.history.operations() if op.f == "acquire"]
    granted = [op for op in acquires if op.type == "ok"]
    lost = [op for op in acquires if op.type == "fail" and isinstance(op.value, dict) and op.value.get("lost")]
    assert granted and len(lost) == len(granted), outcome.describe()  # every re-entry came too late
    assert len(outcome.history.notes("lost")) == len(lost)


def test_renewed_lock_signals_loss_when_its_holder_process_is_stopped(lock_server):
    # Stalls inside the hold do not matter here (the watchdog renews); stopping the whole process does.
    w = load(lock_server, "lock-renew", stall=0.0, duration=2.5)
    nemesis = HolderPauseNemesis(lock_server.url, w.name, every=0.25, pause=0.5)
    outcome = run_workload(w, nemesis)
    assert outcome.report.valid, outcome.describe()
    assert outcome.faults >= 1
    # A stopped holder learns of its loss from the watchdog (on_lost) or, if its own thread gets
    # there first after SIGCONT, from the refused release.
    learned = len(outcome.history.notes("lost")) + outcome.count("release", "fail")
    assert learned >= 1, outcome.describe()


def test_semaphore_never_exceeds_its_limit(lock_server):
    outcome = run_workload(load(lock_server, "semaphore", processes=6, limit=2))
    assert outcome.report.valid, outcome.describe()
    permits = outcome.report.by_name()["permits"]
    assert permits.checked == 6 * LOAD.rounds


# -- the controls --------------------------------------------------------------------------------
def test_get_then_del_lock_is_caught(lock_server):
    outcome = run_workload(load(lock_server, "get-then-del", gap=0.25, rounds=6))
    assert {"exclusion", "linearizable"} <= flagged(outcome), outcome.describe()


def test_tokenless_lock_is_caught(lock_server):
    outcome = run_workload(load(lock_server, "tokenless"))
    assert {"exclusion", "lost-updates", "linearizable"} <= flagged(outcome), outcome.describe()


def test_fence_drawn_before_the_grant_is_caught(lock_server):
    # The race needs a client to draw its fence, then lose the lock to one that drew a greater fence
    # later: enough rounds and a wide enough gap that a loaded machine's scheduling still lets it
    # happen (with 10 rounds and a 50 ms gap, one run in a loaded suite saw no fence go backwards).
    outcome = run_workload(load(lock_server, "racy-fence", gap=0.1, rounds=30))
    assert "fences" in flagged(outcome), outcome.describe()


def test_our_lock_without_fenced_writes_loses_updates(lock_server):
    outcome = run_workload(load(lock_server, "lock", fenced=False))
    assert flagged(outcome) == {"lost-updates"}, outcome.describe()


def test_semaphore_without_watch_is_caught(lock_server):
    outcome = run_workload(load(lock_server, "racy-semaphore", processes=6, limit=2))
    assert "permits" in flagged(outcome), outcome.describe()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lock", "lock-reentrant", "lock-renew"])
def test_longer_runs_of_our_lock(lock_server, kind):
    outcome = run_workload(load(lock_server, kind, processes=8, rounds=40, seed=11))
    assert outcome.report.valid, outcome.describe()
