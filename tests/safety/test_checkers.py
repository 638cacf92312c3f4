"""The checkers on hand-made histories: each accepts what is safe and flags what is not.

Times are plain nanosecond numbers; ``D`` is a deadline far in the future.
"""

from __future__ import annotations

from tests.safety.checkers import (
    LinOp,
    check_exclusion,
    check_fences,
    check_linearizable,
    check_lock_history,
    check_lost_updates,
    check_semaphore_history,
    extract_holds,
    linearizable,
)
from tests.safety.history import FAIL, INFO, NEVER, OK, History, Recorder, history_of

D = 10**12


def grant(fence, deadline=D, **extra):
    return {"fence": fence, "deadline": deadline, **extra}


def hold(p, acquire_at, release_at, fence, *, ok=True, deadline=D, invoke=None):
    """An acquire that returns at ``acquire_at`` and a release sent at ``release_at``."""
    start = acquire_at - 1 if invoke is None else invoke
    return [
        (p, "acquire", start, acquire_at, OK, None, grant(fence, deadline)),
        (p, "release", release_at, release_at + 1, OK if ok else FAIL, {"deadline": deadline}),
    ]


def sequential(*holds):
    return history_of(*[call for h in holds for call in h])


# -- recording ------------------------------------------------------------------------------
def test_recorder_pairs_calls_and_refuses_overlapping_calls_of_one_process():
    rec = Recorder(3)
    rec.invoke("acquire")
    rec.ok("acquire", grant(7))
    rec.note("lost")
    rec.invoke("release")
    rec.info("release", "timeout")
    ops = History.merge([rec.events]).operations()
    assert [(op.f, op.type) for op in ops] == [("acquire", OK), ("release", INFO)]
    assert ops[0].start <= ops[0].end and ops[1].end == NEVER
    rec.invoke("acquire")
    try:
        rec.invoke("release")
    except RuntimeError:
        pass
    else:
        raise AssertionError("a second pending call must be refused")
    # A call left pending (the process died) ends as unknown.
    assert History.merge([rec.events]).operations()[-1].type == INFO


# -- exclusion ------------------------------------------------------------------------------
def test_exclusion_accepts_sequential_holds_and_flags_an_overlap():
    ok = extract_holds(sequential(hold(1, 10, 20, 1), hold(2, 30, 40, 2), hold(1, 41, 50, 3)))
    assert check_exclusion(ok.holds).valid is True
    bad = extract_holds(sequential(hold(1, 10, 40, 1), hold(2, 30, 50, 2)))
    result = check_exclusion(bad.holds)
    assert result.valid is False and result.count == 1
    assert "p2" in result.violations[0] and "p1" in result.violations[0]


def test_exclusion_ends_a_hold_at_its_deadline_or_loss_signal():
    # p1 kept "holding" until 40 but its deadline was 25: p2's grant at 30 is no overlap.
    history = sequential(hold(1, 10, 40, 1, ok=False, deadline=25), hold(2, 30, 50, 2))
    assert check_exclusion(extract_holds(history).holds).valid is True
    # Same with the loss signal at 28 and no deadline known.
    history = history_of(*hold(1, 10, 40, 1, ok=False, deadline=None), *hold(2, 30, 50, 2), ("note", 1, "lost", 28))
    assert check_exclusion(extract_holds(history).holds).valid is True
    # A deadline after the other grant does not excuse the overlap.
    history = sequential(hold(1, 10, 40, 1, ok=False, deadline=35), hold(2, 30, 50, 2))
    assert check_exclusion(extract_holds(history).holds).valid is False


def test_exclusion_with_a_limit_counts_holders_of_a_semaphore():
    history = sequential(hold(1, 10, 40, 1), hold(2, 20, 50, 2), hold(3, 45, 60, 3))
    assert check_exclusion(extract_holds(history).holds, limit=2).valid is True
    history = sequential(hold(1, 10, 40, 1), hold(2, 20, 50, 2), hold(3, 30, 60, 3))
    result = check_exclusion(extract_holds(history).holds, limit=2)
    assert result.valid is False and result.count == 1
    assert check_semaphore_history(history, limit=3).valid is True
    assert check_semaphore_history(history, limit=2).valid is False


def test_a_hold_ending_where_the_next_begins_is_no_overlap():
    history = sequential(hold(1, 10, 20, 1), hold(2, 20, 30, 2))
    assert check_exclusion(extract_holds(history).holds).valid is True


# -- fences ---------------------------------------------------------------------------------
def test_fences_must_grow_in_grant_order():
    assert check_fences(extract_holds(sequential(hold(1, 10, 20, 5), hold(2, 30, 40, 9)))).valid is True
    result = check_fences(extract_holds(sequential(hold(1, 10, 20, 9), hold(2, 30, 40, 5))))
    assert result.valid is False and "not greater" in result.violations[0]
    result = check_fences(extract_holds(sequential(hold(1, 10, 20, 5), hold(2, 30, 40, 5))))
    assert result.valid is False and any("twice" in v for v in result.violations)


def test_fences_of_waiting_callers_follow_the_order_of_their_holds():
    # Both acquires were in flight at once (p2 invoked at 5, before p1's returned at 10), but a
    # lock's holds are disjoint: p2 held after p1, so it was granted after p1.
    history = sequential(hold(1, 10, 20, 9), hold(2, 30, 40, 5, invoke=5))
    result = check_fences(extract_holds(history))
    assert result.valid is False and "holds after" in result.violations[0]
    # Permits of a semaphore overlap: only the acquire order counts there.
    assert check_fences(extract_holds(history), exclusive=False).valid is True
    # An empty hold (p1 saw its grant only after its deadline) orders nothing.
    history = sequential(hold(1, 50, 60, 9, ok=False, deadline=45, invoke=5), hold(2, 30, 40, 12, invoke=6))
    assert check_fences(extract_holds(history)).valid is True


def test_reentry_keeps_the_fence():
    calls = [
        (1, "acquire", 0, 10, OK, None, grant(4)),
        (1, "acquire", 11, 12, OK, None, grant(4, reentered=True)),
        (1, "release", 13, 14, OK, {"inner": True}),
        (1, "release", 15, 16, OK, {"deadline": D}),
    ]
    found = extract_holds(history_of(*calls))
    assert len(found.holds) == 1 and found.reentries == 1
    assert check_fences(found).valid is True
    calls[1] = (1, "acquire", 11, 12, OK, None, grant(5, reentered=True))
    result = check_fences(extract_holds(history_of(*calls)))
    assert result.valid is False and "re-entered" in result.violations[0]


# -- lost updates ---------------------------------------------------------------------------
def writes(*rows):
    return history_of(*[(p, "write", t, t + 1, kind, {"element": e}) for p, t, e, kind in rows])


def test_lost_updates_flags_a_missing_acknowledged_element():
    history = writes((1, 10, "a", OK), (2, 20, "b", OK), (1, 30, "c", FAIL), (2, 40, "d", INFO))
    assert check_lost_updates(history, ["a", "b"]).valid is True
    assert check_lost_updates(history, ["a", "b", "d"]).valid is True
    result = check_lost_updates(history, ["b"])
    assert result.valid is False and "'a'" in result.violations[0]


def test_lost_updates_flags_elements_nobody_wrote():
    history = writes((1, 10, "a", OK), (1, 30, "c", FAIL))
    assert check_lost_updates(history, ["a", "c"]).valid is False  # a refused write got in
    assert check_lost_updates(history, ["a", "zz"]).valid is False


# -- linearizability ------------------------------------------------------------------------
def test_linearizable_sequential_and_handed_off_holds():
    assert check_linearizable(sequential(hold(1, 10, 20, 1), hold(2, 30, 40, 2))).valid is True
    # p2 waited from 5 and got the lock when p1 released (sent at 20, p2's acquire returned at 25).
    history = sequential(hold(1, 10, 20, 1), hold(2, 25, 40, 2, invoke=5))
    assert check_linearizable(history).valid is True


def test_linearizable_flags_a_double_grant():
    # p2's acquire ended at 30, but p1 held from 10 until it released at 35.
    history = sequential(hold(1, 10, 35, 1), hold(2, 30, 50, 2, invoke=25))
    result = check_linearizable(history)
    assert result.valid is False and "no linearization" in result.violations[0]


def test_linearizable_expiry_after_the_deadline_only():
    # p1's hold expired (deadline 25); its release at 40 was refused; p2 acquired at 30.
    history = sequential(hold(1, 10, 40, 1, ok=False, deadline=25), hold(2, 30, 50, 2, invoke=29))
    assert check_linearizable(history).valid is True
    # p1's deadline was 35: p2 cannot have acquired at 30.
    history = sequential(hold(1, 10, 40, 1, ok=False, deadline=35), hold(2, 30, 50, 2, invoke=29))
    assert check_linearizable(history).valid is False
    # Refused before its deadline at all: the hold was dropped early.
    history = sequential(hold(1, 10, 40, 1, ok=False, deadline=90))
    result = check_linearizable(history)
    assert result.valid is False and "before its deadline" in result.violations[0]


def test_linearizable_refused_acquire_needs_another_holder():
    busy = [*hold(1, 10, 40, 1), (2, "acquire", 20, 30, FAIL)]
    assert check_linearizable(history_of(*busy)).valid is True
    free = [*hold(1, 10, 15, 1), (2, "acquire", 20, 30, FAIL)]
    assert check_linearizable(history_of(*free)).valid is False


def test_linearizable_unknown_outcomes_may_or_may_not_have_happened():
    # p2's acquire timed out on the network: it may have been granted (and then expired).
    calls = [(2, "acquire", 5, 6, INFO, None, "TimeoutError"), *hold(1, 10, 20, 1), *hold(3, 30, 40, 2),
             (2, "acquire", 32, 38, FAIL, None, "timed out")]
    assert check_linearizable(history_of(*calls)).valid is True
    # An unknown release of p1 (sent at 20) may have released; p2 may acquire after it was sent.
    calls = [(1, "acquire", 0, 10, OK, None, grant(1, 50)), (1, "release", 20, 21, INFO, {"deadline": 50}),
             *hold(2, 45, 70, 2, invoke=40)]
    assert check_linearizable(history_of(*calls)).valid is True
    calls[-2:] = hold(2, 18, 70, 2, invoke=12)
    assert check_linearizable(history_of(*calls)).valid is False


def test_linearizable_release_of_a_lock_held_by_another_must_be_refused():
    calls = [*hold(1, 10, 40, 1), (2, "release", 20, 21, OK)]
    assert check_linearizable(history_of(*calls)).valid is False
    calls = [*hold(1, 10, 40, 1), (2, "release", 20, 21, FAIL)]
    assert check_linearizable(history_of(*calls)).valid is True


def test_search_reports_when_its_budget_runs_out():
    ops = [LinOp(i, i, "acquire", False, 0, 100) for i in range(30)]
    verdict, why = linearizable(ops, budget=10)
    assert verdict is None and "budget" in why


def test_search_handles_many_concurrent_waiters():
    # 40 processes all invoke at once; grants are handed on one after another.
    calls = []
    for p in range(40):
        calls += hold(p, 100 + 10 * p, 105 + 10 * p, p + 1, invoke=p)
    assert check_linearizable(history_of(*calls)).valid is True


# -- all together ---------------------------------------------------------------------------
def test_report_of_a_clean_history_and_of_an_unsafe_one():
    clean = history_of(*hold(1, 10, 20, 1), *hold(2, 30, 40, 2), (1, "write", 12, 13, OK, {"element": "a"}),
                       (2, "write", 32, 33, OK, {"element": "b"}))
    report = check_lock_history(clean, final=["a", "b"])
    assert report.valid and report.violations == 0
    assert set(report.by_name()) == {"exclusion", "fences", "lost-updates", "linearizable"}
    assert all(result.checked > 0 for result in report.results)
    unsafe = history_of(*hold(1, 10, 40, 2), *hold(2, 30, 50, 1, invoke=25),
                        (1, "write", 32, 33, OK, {"element": "a"}), (2, "write", 34, 35, OK, {"element": "b"}))
    report = check_lock_history(unsafe, final=["b"])
    flagged = {result.name for result in report.results if result.valid is False}
    assert flagged == {"exclusion", "fences", "lost-updates", "linearizable"}, str(report)
