"""Checkers for recorded lock and semaphore histories.

* :func:`check_exclusion` - at no instant do more than ``limit`` processes believe they hold
  (``limit=1``: a lock; ``limit=N``: a semaphore of N permits).
* :func:`check_fences` - fence tokens are distinct, grow in grant order (a grant that completed
  before another was requested has the smaller fence) and stay unchanged on re-entry.
* :func:`check_lost_updates` - every element whose write under the lock was acknowledged is in
  the final value of the protected set, and nothing else is.
* :func:`check_linearizable` - the acquire/release history is linearizable against an
  owner-aware mutex whose holds may also expire (a Wing & Gong search with Lowe's memo).

A hold, as a process believes it, starts when its ``acquire`` returned and ends when it sent
``release`` - or earlier, at the local validity deadline the lock reported (``deadline``, a
``monotonic_ns`` instant: send time + TTL - drift) or at its loss signal.  Both bounds are
conservative: the server granted before the client saw the grant and released after the client
sent the release, so two recorded holds that overlap are two real holds that overlapped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from .history import FAIL, INFO, NEVER, OK, History, Operation

#: How many violations a result spells out (it still counts all of them).
SHOWN = 10


@dataclass
class CheckResult:
    """Outcome of one checker: ``valid`` is None when the checker could not decide."""

    name: str
    valid: Optional[bool]
    checked: int
    violations: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, message: str) -> None:
        self.count += 1
        self.valid = False
        if len(self.violations) < SHOWN:
            self.violations.append(message)

    def __str__(self) -> str:
        state = {True: "ok", False: "VIOLATED", None: "unknown"}[self.valid]
        head = f"{self.name}: {state} ({self.checked} checked, {self.count} violations)"
        return "\n  ".join([head, *self.violations])


# -- holds ----------------------------------------------------------------------------------------
@dataclass
class Hold:
    """One hold as its process believed it: ``[start, end]`` on the shared monotonic clock."""

    process: int
    start: int
    end: float
    fence: Optional[int]
    acquire: Operation
    deadline: Optional[int] = None
    release: Optional[Operation] = None
    lost_at: Optional[int] = None

    @property
    def ended_by(self) -> str:
        if self.release is None:
            return "open"
        return {OK: "release", FAIL: "not-owned", INFO: "unknown"}[self.release.type]

    def __str__(self) -> str:
        end = "open" if self.end == NEVER else f"{self.end / 1e9:.6f}"
        return f"p{self.process} fence={self.fence} [{self.start / 1e9:.6f}, {end}] ({self.ended_by})"


@dataclass
class Holds:
    """The holds of a history and what re-entry observed."""

    holds: list[Hold]
    reentry_mismatches: list[str]
    reentries: int


def _fields(value: Any) -> dict:
    """The details a call recorded, or none (a completion may carry just a short reason string)."""
    return value if isinstance(value, dict) else {}


def _clip(end: float, bound: Optional[float]) -> float:
    return end if bound is None else min(end, bound)


def extract_holds(history: History, acquire: str = "acquire", release: str = "release") -> Holds:
    """Turn each process's acquire/release calls (and loss notes) into holds.

    An ``acquire`` whose ``ok`` value has ``reentered`` is a nested hold: its fence must equal
    the outer one and it does not start a hold; a ``release`` invoked with ``inner`` ends it.
    """
    ops = history.operations()
    lost_notes: dict[int, list[int]] = {}
    for event in history.notes("lost"):
        lost_notes.setdefault(event.process, []).append(event.time)
    per_process: dict[int, list[Operation]] = {}
    for op in ops:
        if op.f in (acquire, release):
            per_process.setdefault(op.process, []).append(op)
    holds: list[Hold] = []
    mismatches: list[str] = []
    reentries = 0
    for process, calls in per_process.items():
        current: Optional[Hold] = None
        for op in calls:
            if op.f == acquire:
                if op.type != OK:
                    continue
                value = _fields(op.value)
                if value.get("reentered"):
                    reentries += 1
                    outer = current.fence if current is not None else None
                    if current is None or value.get("fence") != outer:
                        mismatches.append(f"p{process} re-entered with fence {value.get('fence')} inside {outer}")
                    continue
                if current is not None:  # an acquire while holding: the previous hold ends here
                    current.end = min(current.end, op.start)
                    holds.append(current)
                deadline = value.get("deadline")
                current = Hold(process, int(op.end), NEVER, value.get("fence"), op, deadline=deadline)
                current.end = _clip(NEVER, deadline)
            elif op.f == release:
                if _fields(op.args).get("inner") or current is None:
                    continue
                deadline = _fields(op.args).get("deadline", current.deadline)
                current.deadline = deadline
                current.end = _clip(op.start, deadline)
                current.release = op
                holds.append(current)
                current = None
        if current is not None:
            holds.append(current)
    for hold in holds:
        for at in lost_notes.get(hold.process, []):
            if hold.start <= at <= hold.end:
                hold.lost_at = at
                hold.end = at
                break
    holds.sort(key=lambda h: (h.start, h.process))
    return Holds(holds, mismatches, reentries)


# -- exclusion ------------------------------------------------------------------------------------
def check_exclusion(holds: Sequence[Hold], limit: int = 1, name: str = "exclusion") -> CheckResult:
    """At no instant more than ``limit`` holds (an empty hold - end <= start - counts for none)."""
    result = CheckResult(name, True, len(holds))
    points: list[tuple[float, int, int]] = []
    for index, hold in enumerate(holds):
        if hold.end > hold.start:
            points.append((hold.start, 1, index))
            points.append((hold.end, 0, index))  # at equal times an end comes before a start
    points.sort()
    active: set[int] = set()
    for _time, is_start, index in points:
        if not is_start:
            active.discard(index)
            continue
        active.add(index)
        if len(active) > limit:
            others = ", ".join(str(holds[i]) for i in sorted(active) if i != index)
            result.add(f"{holds[index]} started while {len(active) - 1} held: {others}")
    return result


# -- fences -----------------------------------------------------------------------------------
def check_fences(found: Holds, exclusive: bool = True, name: str = "fences") -> CheckResult:
    """Fences distinct, increasing in grant order, unchanged on re-entry.

    Grant order is known in two ways.  Always: a grant whose acquire returned before another
    acquire was invoked came first.  For a lock (``exclusive``) also: recorded holds that are not
    empty lie inside the real holds, which a lock keeps disjoint, so they follow one another in
    grant order - this orders the grants of callers that waited at the same time.
    """
    grants = [hold for hold in found.holds if hold.fence is not None]
    result = CheckResult(name, True, len(grants) + found.reentries)
    for message in found.reentry_mismatches:
        result.add(message)
    seen: dict[int, Hold] = {}
    for hold in grants:
        assert hold.fence is not None
        if hold.fence in seen:
            result.add(f"fence {hold.fence} granted twice: {seen[hold.fence]} and {hold}")
        seen[hold.fence] = hold
    # A grant whose acquire completed before another's acquire was invoked came first.
    by_completion = sorted(grants, key=lambda h: h.acquire.end)
    by_invoke = sorted(grants, key=lambda h: h.acquire.start)
    best: Optional[Hold] = None
    position = 0
    for hold in by_invoke:
        while position < len(by_completion) and by_completion[position].acquire.end < hold.acquire.start:
            earlier = by_completion[position]
            if best is None or (earlier.fence or 0) > (best.fence or 0):
                best = earlier
            position += 1
        if best is not None and best.fence is not None and hold.fence is not None and hold.fence <= best.fence:
            result.add(f"{hold} was granted after {best} but its fence is not greater")
    if exclusive:
        held = [hold for hold in grants if hold.end > hold.start]
        for earlier, later in zip(held, held[1:]):
            if (later.fence or 0) <= (earlier.fence or 0):
                result.add(f"{later} holds after {earlier} but its fence is not greater")
    return result


# -- lost updates ---------------------------------------------------------------------------------
def check_lost_updates(history: History, final: Iterable[Any], write: str = "write",
                       name: str = "lost-updates") -> CheckResult:
    """Acknowledged elements all present in ``final``; nothing present that was not written.

    Each ``write`` invoke carries ``{"element": e}``; ``ok`` means the write was stored,
    ``fail`` that it was refused (a stale fence), ``info`` that the outcome is unknown.
    """
    final_set = set(final)
    acknowledged: dict[Any, Operation] = {}
    attempted: set[Any] = set()
    for op in history.operations():
        if op.f != write:
            continue
        element = _fields(op.args).get("element")
        if op.type == OK:
            acknowledged[element] = op
        if op.type in (OK, INFO):
            attempted.add(element)
    result = CheckResult(name, True, len(acknowledged))
    for element, op in sorted(acknowledged.items(), key=lambda item: item[1].start):
        if element not in final_set:
            result.add(f"acknowledged write of {element!r} lost: {op}")
    for element in sorted(final_set - attempted, key=repr):
        result.add(f"{element!r} is in the final value but no acknowledged or pending write added it")
    return result


# -- linearizability --------------------------------------------------------------------------------
@dataclass
class LinOp:
    """One call as the search sees it: ``end`` is ``NEVER`` for an optional (unknown) call."""

    index: int
    process: int
    f: str  # "acquire" | "release" | "expire"
    ok: bool
    start: float
    end: float
    origin: str = ""


class OwnerMutex:
    """An owner-aware mutex whose hold can also expire (state: the owning process or None).

    * acquire ok: free -> owned by the caller; acquire refused: owned by someone else;
    * release ok: owned by the caller -> free; release refused: not owned by the caller;
    * expire: owned by that process -> free (a TTL ran out).
    """

    initial: Optional[int] = None

    @staticmethod
    def step(state: Optional[int], op: LinOp) -> tuple[bool, Optional[int]]:
        if op.f == "acquire":
            if op.ok:
                return state is None, op.process
            return state is not None and state != op.process, state
        if op.f == "release":
            if op.ok:
                return state == op.process, None
            return state != op.process, state
        if op.f == "expire":
            return state == op.process, None
        raise ValueError(op.f)


def lock_operations(history: History, acquire: str = "acquire", release: str = "release") -> tuple[
        list[LinOp], list[str]]:
    """The calls the mutex model judges, plus an ``expire`` for every hold that ended by itself.

    An expiry happens on the server after the client's deadline (which is measured from the send
    instant, minus drift) and before the refused release reached the server; a hold that ended
    with an unknown release or no release at all may expire at any time after its deadline.
    Returns the calls and the holds that ended before their deadline (no model allows those).
    """
    found = extract_holds(history, acquire, release)
    lin: list[LinOp] = []
    early: list[str] = []
    for op in history.operations():
        if op.f == acquire:
            if _fields(op.value).get("reentered"):
                continue
        elif op.f == release:
            if _fields(op.args).get("inner"):
                continue
        else:
            continue
        if op.type == INFO:
            lin.append(LinOp(0, op.process, op.f, True, op.start, NEVER, str(op)))
        else:
            lin.append(LinOp(0, op.process, op.f, op.type == OK, op.start, op.end, str(op)))
        if op.f == acquire and op.type == INFO:
            lin.append(LinOp(0, op.process, "expire", True, op.start, NEVER, f"expiry after {op}"))
    for hold in found.holds:
        release_op = hold.release
        if release_op is not None and release_op.type == OK:
            continue
        start = float(hold.deadline) if hold.deadline is not None else float(hold.start)
        if release_op is not None and release_op.type == FAIL:
            if hold.deadline is None or hold.deadline >= release_op.end:
                early.append(f"{hold} was no longer held when its release arrived, before its deadline")
                continue
            lin.append(LinOp(0, hold.process, "expire", True, start, release_op.end, f"expiry of {hold}"))
        else:
            lin.append(LinOp(0, hold.process, "expire", True, start, NEVER, f"expiry of {hold}"))
    lin.sort(key=lambda op: (op.start, op.process))
    for index, op in enumerate(lin):
        op.index = index
    return lin, early


class _Entry:
    __slots__ = ("op", "is_call", "time", "prev", "next", "match")

    def __init__(self, op: Optional[LinOp], is_call: bool, time: float) -> None:
        self.op = op
        self.is_call = is_call
        self.time = time
        self.prev: Optional[_Entry] = None
        self.next: Optional[_Entry] = None
        self.match: Optional[_Entry] = None


def linearizable(ops: Sequence[LinOp], model: Any = OwnerMutex, budget: int = 5_000_000) -> tuple[
        Optional[bool], str]:
    """Wing & Gong's search with Lowe's memo of (linearized set, state).

    Returns (True, ""), (False, explanation) or (None, reason) when the step budget ran out.
    """
    entries: list[_Entry] = []
    for op in ops:
        call, ret = _Entry(op, True, op.start), _Entry(op, False, op.end)
        call.match = ret
        entries += [call, ret]
    entries.sort(key=lambda e: (e.time, 0 if e.is_call else 1, e.op.index if e.op else 0))
    head = _Entry(None, False, -1.0)
    previous = head
    for entry in entries:
        previous.next, entry.prev = entry, previous
        previous = entry

    def lift(call: _Entry) -> None:
        for e in (call, call.match):
            assert e is not None and e.prev is not None
            e.prev.next = e.next
            if e.next is not None:
                e.next.prev = e.prev

    def unlift(call: _Entry) -> None:
        for e in (call.match, call):
            assert e is not None and e.prev is not None
            e.prev.next = e
            if e.next is not None:
                e.next.prev = e

    state = model.initial
    linearized = 0
    stack: list[tuple[_Entry, Any]] = []
    seen: set[tuple[int, Any]] = set()
    deepest, stuck_at = 0, ""
    entry = head.next
    steps = 0
    while entry is not None:
        steps += 1
        if steps > budget:
            return None, f"search budget of {budget} steps ran out"
        op = entry.op
        assert op is not None
        if entry.is_call:
            legal, new_state = model.step(state, op)
            if legal:
                marked = linearized | (1 << op.index)
                if (marked, new_state) not in seen:
                    seen.add((marked, new_state))
                    stack.append((entry, state))
                    state, linearized = new_state, marked
                    lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
            continue
        if entry.time == NEVER:
            return True, ""  # every call with a known end is linearized; the rest are optional
        if len(stack) >= deepest:
            deepest, stuck_at = len(stack), op.origin
        if not stack:
            return False, f"no linearization; it gets stuck before the end of: {stuck_at}"
        call, state = stack.pop()
        assert call.op is not None
        linearized &= ~(1 << call.op.index)
        unlift(call)
        entry = call.next
    return True, ""


def check_linearizable(history: History, acquire: str = "acquire", release: str = "release",
                       name: str = "linearizable", budget: int = 5_000_000) -> CheckResult:
    """The acquire/release history against :class:`OwnerMutex` (expiries added from deadlines)."""
    ops, early = lock_operations(history, acquire, release)
    result = CheckResult(name, True, len(ops))
    for message in early:
        result.add(message)
    verdict, why = linearizable(ops, budget=budget)
    if verdict is False:
        result.add(why)
    elif verdict is None:
        result.violations.append(why)
        if result.valid:  # nothing found so far, and the search could not finish
            result.valid = None
    return result


# -- everything at once -------------------------------------------------------------------------
@dataclass
class Report:
    """All checker results of one history."""

    results: list[CheckResult]

    @property
    def valid(self) -> bool:
        return all(result.valid for result in self.results)

    @property
    def violations(self) -> int:
        return sum(result.count for result in self.results)

    def by_name(self) -> dict[str, CheckResult]:
        return {result.name: result for result in self.results}

    def __str__(self) -> str:
        return "\n".join(str(result) for result in self.results)


def check_lock_history(history: History, final: Optional[Iterable[Any]] = None, *,
                       linearizability: bool = True) -> Report:
    """Exclusion, fences, lost updates (when ``final`` is given) and linearizability."""
    found = extract_holds(history)
    results = [check_exclusion(found.holds), check_fences(found)]
    if final is not None:
        results.append(check_lost_updates(history, final))
    if linearizability:
        results.append(check_linearizable(history))
    return Report(results)


def check_semaphore_history(history: History, limit: int, final: Optional[Iterable[Any]] = None) -> Report:
    """Never more than ``limit`` holders; fences distinct and growing; lost updates when given."""
    found = extract_holds(history)
    results = [check_exclusion(found.holds, limit=limit, name="permits"), check_fences(found, exclusive=False)]
    if final is not None:
        results.append(check_lost_updates(history, final))
    return Report(results)


__all__ = [
    "CheckResult",
    "Hold",
    "Holds",
    "LinOp",
    "OwnerMutex",
    "Report",
    "check_exclusion",
    "check_fences",
    "check_linearizable",
    "check_lock_history",
    "check_lost_updates",
    "check_semaphore_history",
    "extract_holds",
    "linearizable",
    "lock_operations",
]
