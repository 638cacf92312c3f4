"""Read-write locks under load: the mode-aware checker on hand-made histories, then process
workloads of our ReadWriteLock (holds expiring under stalled holders, clients SIGSTOPped) and of a
control whose readers take no lock, which the checker must catch.

The load: six client processes, 70 % read holds, a 250 ms TTL, short holds and now and then a stall
of 350 ms inside the hold (past the TTL, like a GC pause).
"""

from __future__ import annotations

import pytest

from tests.safety.checkers import LinOp
from tests.safety.history import FAIL, OK, history_of
from tests.safety.rw import RWHolderPauseNemesis, RWMutex, RWWorkload, check_rw_history, rw_client_main
from tests.safety.workloads import PauseNemesis, run_workload

# Multi-process workloads whose faults are timed against short TTLs: they run alone, after the
# parallel part of dev.py test (tests/README.md, "Markers").
pytestmark = pytest.mark.serial

D = 10**12
RW_LOAD = RWWorkload(processes=6, rounds=12, ttl=0.25, hold=(0.001, 0.015), stall=0.1, stall_for=0.35, seed=5)


def hold(p, mode, acquire_at, release_at, fence, *, ok=True, deadline=D):
    """A ``mode`` hold of process ``p``: granted at ``acquire_at``, released at ``release_at``."""
    return [
        (p, "acquire", acquire_at - 1, acquire_at, OK, {"mode": mode}, {"fence": fence, "deadline": deadline,
                                                                        "mode": mode}),
        (p, "release", release_at, release_at + 1, OK if ok else FAIL, {"deadline": deadline}),
    ]


def checked(*calls, final=None):
    return check_rw_history(history_of(*calls), final)


def flagged(report) -> set[str]:
    return {result.name for result in report.results if result.valid is False}


# -- the checker -----------------------------------------------------------------------------------
def test_readers_together_then_a_writer_alone_is_accepted():
    report = checked(*hold(1, "read", 10, 50, 1), *hold(2, "read", 20, 60, 2), *hold(3, "write", 70, 90, 3),
                     *hold(1, "read", 100, 120, 4))
    assert report.valid, report
    assert report.max_readers == 2
    assert {r.name for r in report.results} == {"rw-exclusion", "fences", "write-fences", "stable-reads",
                                                "linearizable"}


def test_a_writer_overlapping_a_reader_is_caught():
    report = checked(*hold(1, "read", 10, 50, 1), *hold(2, "write", 30, 60, 2))
    assert {"rw-exclusion", "linearizable"} <= flagged(report), report


def test_two_writers_together_are_caught():
    report = checked(*hold(1, "write", 10, 50, 1), *hold(2, "write", 30, 60, 2))
    assert {"rw-exclusion", "linearizable"} <= flagged(report), report


def test_a_write_fence_below_an_earlier_read_is_caught():
    # The read ended before the write began, yet the write's fence is smaller.
    report = checked(*hold(1, "read", 10, 20, 5), *hold(2, "read", 12, 18, 6), *hold(3, "write", 30, 40, 4))
    assert "write-fences" in flagged(report), report
    # The same fences with the write first are fine.
    assert checked(*hold(3, "write", 1, 5, 4), *hold(1, "read", 10, 20, 5), *hold(2, "read", 12, 18, 6)).valid


def test_a_set_that_changes_under_a_reader_is_caught():
    calls = [
        *hold(1, "read", 10, 100, 1),
        (1, "first-read", 20, 21, OK, {"hold": "a"}, ["x"]),
        (1, "last-read", 80, 81, OK, {"hold": "a"}, ["x", "y"]),
    ]
    assert "stable-reads" in flagged(checked(*calls)), checked(*calls)
    # The same reads after the hold's deadline say nothing: the hold may have ended.
    late = [*hold(1, "read", 10, 100, 1, deadline=50), *calls[2:]]
    result = checked(*late).by_name()["stable-reads"]
    assert result.valid and result.checked == 0


def test_the_model_lets_a_refused_read_wait_behind_a_writer_while_readers_hold():
    state = (None, frozenset({1}))
    refused = LinOp(0, 2, "read:acquire", False, 0, 1)
    assert RWMutex.step(state, refused) == (True, state)
    assert RWMutex.step(state, LinOp(1, 3, "write:acquire", True, 0, 1))[0] is False
    assert RWMutex.step(state, LinOp(2, 3, "read:acquire", True, 0, 1)) == (True, (None, frozenset({1, 3})))
    assert RWMutex.step(state, LinOp(3, 1, "read:expire", True, 0, 1)) == (True, (None, frozenset()))


# -- process workloads -----------------------------------------------------------------------------------
def load(server, kind: str = "rwlock", **changes) -> RWWorkload:
    return RW_LOAD.with_(kind=kind, name=f"rw-{kind}", lock_url=server.url, **changes)


def run_rw(w: RWWorkload, nemesis=None):
    return run_workload(w, nemesis, main=rw_client_main, check=check_rw_history)


def test_our_rwlock_passes_every_check_while_holds_expire_under_their_holders(lock_server):
    outcome = run_rw(load(lock_server))
    report = outcome.report
    assert report.valid, outcome.describe()
    assert report.max_readers >= 2, "readers never held together"
    assert outcome.count("acquire", "ok") == RW_LOAD.processes * RW_LOAD.rounds
    assert report.by_name()["stable-reads"].checked >= 10
    assert outcome.count("write", "ok") >= 5 and len(outcome.final) == outcome.count("write", "ok")
    # The load did what it is for: stalled holders outlived their TTL and were replaced.
    assert outcome.count("release", "fail") >= 1, outcome.describe()


def test_our_rwlock_passes_while_clients_are_sigstopped(lock_server):
    nemesis = PauseNemesis(every=0.3, pause=0.4, seed=3)  # holders and waiters alike
    outcome = run_rw(load(lock_server, stall=0.0, duration=3.0), nemesis)
    assert outcome.report.valid, outcome.describe() + "\n" + "\n".join(outcome.fault_log)
    assert outcome.faults >= 3 and outcome.report.max_readers >= 2


def test_our_rwlock_passes_while_its_holders_are_sigstopped_past_their_ttl(lock_server):
    w = load(lock_server, stall=0.0, duration=3.0)
    nemesis = RWHolderPauseNemesis(lock_server.url, w.name, every=0.3, pause=0.4, seed=4)
    outcome = run_rw(w, nemesis)
    assert outcome.report.valid, outcome.describe() + "\n" + "\n".join(outcome.fault_log)
    assert outcome.faults >= 3
    # Stopped holders outlived their TTL: their holds were replaced, their releases refused.
    assert outcome.count("release", "fail") >= 1, outcome.describe()


def test_readers_that_take_no_lock_are_caught(lock_server):
    outcome = run_rw(load(lock_server, "rw-unlocked-reads", hold=(0.005, 0.03)))
    assert {"rw-exclusion", "linearizable"} <= flagged(outcome.report), outcome.describe()


@pytest.mark.slow
def test_a_longer_run_of_our_rwlock_with_sigstops(lock_server):
    nemesis = PauseNemesis(every=0.2, pause=0.4, seed=9)
    outcome = run_rw(load(lock_server, processes=10, rounds=40, seed=11), nemesis)
    assert outcome.report.valid, outcome.describe()
