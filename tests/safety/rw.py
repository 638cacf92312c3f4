"""Read-write locks: a mode-aware checker of recorded histories, and the clients of the workload.

The clients are those of :mod:`tests.safety.workloads` with a mode drawn for each hold (``reads``:
the share of read holds), recorded with the acquire (``{"mode": "read"}``).  A writer does the
lock workload's fenced read-modify-write of the protected set.  A reader reads the set twice, at
the start and at the end of its hold, and writes nothing; its first read is fenced (it records the
reader's fence, so no writer older than the reader can write meanwhile; refused, it means a newer
fence was seen already, which shuts those writers out all the same, and the set is read plainly).

:func:`check_rw_history` judges a history:

* ``rw-exclusion`` - writers alone: no write hold overlaps another hold, read or write (read
  holds overlapping each other are what the lock is for);
* ``fences`` - distinct, growing in grant order (:func:`~tests.safety.checkers.check_fences`);
* ``write-fences`` - a write's fence is greater than that of every hold recorded before it and
  smaller than that of every hold recorded after it;
* ``stable-reads`` - a reader's two reads, both made within its hold, saw the same set;
* ``lost-updates`` - as for the lock;
* ``linearizable`` - the acquire/release history against :class:`RWMutex`, whose holds may expire;

and reports how many read holds overlapped at most (``max_readers``): readers did hold together.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

import redis

from django_redis_coord import LockLostError, LockNotOwnedError
from django_redis_coord.core.holders import rwlock_holders
from django_redis_coord.core.rwlock.sync import ReadWriteLock

from .checkers import (
    CheckResult,
    Hold,
    Holds,
    LinOp,
    Report,
    check_fences,
    check_lost_updates,
    extract_holds,
    linearizable,
    lock_operations,
)
from .history import NOTE, OK, History, Recorder
from .workloads import IO_ERRORS, PauseNemesis, Resource, Workload, _CoordAdapter, _protected_update, client_main

READ, WRITE = "read", "write"
RW_KINDS = ("rwlock", "rw-unlocked-reads")


# -- the clients ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RWWorkload(Workload):
    """A :class:`~tests.safety.workloads.Workload` on a read-write lock: ``reads`` is the share of
    read holds.  Kinds: ``rwlock`` (ours) and ``rw-unlocked-reads`` (the control: readers take no
    lock at all, writers ours)."""

    kind: str = "rwlock"
    reads: float = 0.7


class CoordRWHold(_CoordAdapter):
    """One hold of :class:`~django_redis_coord.ReadWriteLock` in ``mode``."""

    def __init__(self, client: Any, name: str, timeout: float, mode: str) -> None:
        self.primitive = ReadWriteLock(client, name, timeout=timeout).hold(mode)
        self.details = {"mode": mode}

    def release(self) -> str:
        try:
            self.primitive.release()
        except LockLostError:
            return "ok-lost"  # released, but the hold had been found lost before
        except LockNotOwnedError:
            return "not-owned"
        return "ok"


class UnlockedRead:
    """The control's reader: it takes no lock (holds at once, no fence, no deadline)."""

    details = {"mode": READ}
    fence = None

    def acquire(self, blocking_timeout: float) -> bool:
        return True

    def deadline_ns(self) -> Optional[int]:
        return None

    def release(self) -> str:
        return "ok"


def make_rw_adapter(w: RWWorkload, client: Any, on_lost: Any, rng: Any) -> Any:
    mode = READ if rng.random() < w.reads else WRITE
    if w.kind == "rw-unlocked-reads" and mode == READ:
        return UnlockedRead()
    return CoordRWHold(client, w.name, w.ttl, mode)


def rw_hold(w: RWWorkload, rng: Any, rec: Recorder, adapter: Any, resource: Resource, element: str) -> None:
    """Under a hold: a writer's read-modify-write, or a reader's two reads (see the module)."""
    if adapter.details["mode"] == WRITE:
        _protected_update(w, rng, rec, adapter, resource, element)
        return
    fence = adapter.fence
    rec.invoke("first-read", {"fence": fence, "hold": element})
    try:
        elements = resource.fenced_read(fence) if fence is not None else None
        if elements is None:
            elements = resource.read()
    except IO_ERRORS as exc:
        rec.info("first-read", type(exc).__name__)
        raise
    rec.ok("first-read", elements)
    pause = rng.uniform(*w.hold)
    if w.stall and rng.random() < w.stall:
        pause = w.stall_for
    time.sleep(pause)
    rec.invoke("last-read", {"hold": element})
    try:
        elements = resource.read()
    except IO_ERRORS as exc:
        rec.info("last-read", type(exc).__name__)
        raise
    rec.ok("last-read", elements)


class RWHolderPauseNemesis(PauseNemesis):
    """SIGSTOP a client that holds the read-write lock right now (a reader or the writer), found
    from the holders' records."""

    def __init__(self, url: str, name: str, every: float, pause: float, seed: int = 0) -> None:
        super().__init__(every, pause, seed)
        self.client = redis.Redis.from_url(url, socket_timeout=2.0)
        self.name = name

    def target(self) -> Optional[tuple[int, str]]:
        pids = {proc.pid for proc in self.procs if proc.is_alive()}
        holders = [h for h in rwlock_holders(self.client, self.name) if h.pid in pids]
        if not holders:
            return None
        chosen = self.rng.choice(holders)
        return chosen.pid, f"{chosen.extra.get('mode')} holder pid {chosen.pid} (fence {chosen.fence})"


def rw_client_main(w: RWWorkload, index: int) -> list:
    """One client process of a read-write lock workload (see :func:`~tests.safety.workloads.client_main`)."""
    return client_main(w, index, make=make_rw_adapter, hold=rw_hold)


# -- the checker ----------------------------------------------------------------------------------
def by_mode(history: History) -> dict[str, History]:
    """The acquire, release and loss events of the holds of each mode, as a history of their own."""
    per_mode: dict[str, list] = {READ: [], WRITE: []}
    for events in history.by_process().values():
        mode = None
        for event in events:
            if event.f == "acquire" and event.type == "invoke":
                mode = event.value["mode"]
            if mode is not None and (event.f in ("acquire", "release") or event.type == NOTE):
                per_mode[mode].append(event)
    return {mode: History.merge([events]) for mode, events in per_mode.items()}


def _overlap(a: Hold, b: Hold) -> bool:
    return a.start < b.end and b.start < a.end and a.end > a.start and b.end > b.start


def check_rw_exclusion(reads: list[Hold], writes: list[Hold]) -> CheckResult:
    """Writers alone: no write hold overlaps another write or a read."""
    result = CheckResult("rw-exclusion", True, len(reads) + len(writes))
    for index, write in enumerate(writes):
        for other in [*writes[index + 1:], *reads]:
            if _overlap(write, other):
                result.add(f"{write} (write) overlaps {other}")
    return result


def check_write_fences(reads: list[Hold], writes: list[Hold]) -> CheckResult:
    """A write's fence is above every hold recorded before it and below every hold recorded after
    it (a write holds alone, so a hold recorded wholly before it was granted before it)."""
    result = CheckResult("write-fences", True, len(writes))
    for write in writes:
        if write.fence is None or write.end <= write.start:
            continue
        for other in [*reads, *writes]:
            if other is write or other.fence is None or other.end <= other.start:
                continue
            if other.end <= write.start and other.fence >= write.fence:
                result.add(f"{write} (write) follows {other} but its fence is not greater")
            if write.end <= other.start and other.fence <= write.fence:
                result.add(f"{other} follows {write} (write) but its fence is not greater")
    return result


def check_stable_reads(history: History, reads: list[Hold]) -> CheckResult:
    """A reader's two reads, both within its hold, saw the same set (nobody wrote meanwhile)."""
    ops = [op for op in history.operations() if op.f in ("first-read", "last-read")]
    result = CheckResult("stable-reads", True, 0)
    first: dict[int, Any] = {}
    for op in sorted(ops, key=lambda op: op.start):
        if op.f == "first-read":
            first[op.process] = op
            continue
        before = first.pop(op.process, None)
        if before is None or before.type != OK or op.type != OK:
            continue
        hold = next((h for h in reads if h.process == op.process and h.start <= before.start <= h.end), None)
        if hold is None or op.end > hold.end:
            continue  # the second read came after the hold may have ended
        result.checked += 1
        if before.value != op.value:
            result.add(f"{hold}: read {before.value!r} then {op.value!r} within the hold")
    return result


class RWMutex:
    """Readers or one writer, holds that may expire (state: the writer, the readers).

    A refused (timed-out) acquire is always allowed: in a FIFO lock it may wait behind a queued
    writer while only readers hold, and the queue is not modelled."""

    initial: tuple[Optional[int], frozenset] = (None, frozenset())

    @staticmethod
    def step(state: tuple[Optional[int], frozenset], op: LinOp) -> tuple[bool, tuple[Optional[int], frozenset]]:
        writer, readers = state
        mode, _, action = op.f.partition(":")
        process = op.process
        holds = writer == process if mode == WRITE else process in readers
        if action == "acquire":
            if not op.ok:
                return True, state
            if mode == WRITE:
                return writer is None and not readers, (process, readers)
            return writer is None and process not in readers, (writer, readers | {process})
        if action == "release" and not op.ok:
            return not holds, state
        if action not in ("release", "expire"):
            raise ValueError(op.f)
        if not holds:
            return False, state
        return True, ((None, readers) if mode == WRITE else (writer, readers - {process}))


def check_rw_linearizable(modes: dict[str, History], budget: int = 5_000_000) -> CheckResult:
    """Both modes' calls (expiries added from deadlines, as for the lock) against :class:`RWMutex`."""
    ops: list[LinOp] = []
    early: list[str] = []
    for mode, history in modes.items():
        mode_ops, mode_early = lock_operations(history)
        for op in mode_ops:
            op.f = f"{mode}:{op.f}"
        ops += mode_ops
        early += mode_early
    ops.sort(key=lambda op: (op.start, op.process))
    for index, op in enumerate(ops):
        op.index = index
    result = CheckResult("linearizable", True, len(ops))
    for message in early:
        result.add(message)
    verdict, why = linearizable(ops, model=RWMutex, budget=budget)
    if verdict is False:
        result.add(why)
    elif verdict is None:
        result.violations.append(why)
        if result.valid:
            result.valid = None
    return result


def max_overlapping(holds: list[Hold]) -> int:
    points = sorted([(h.start, 1) for h in holds if h.end > h.start] + [(h.end, -1) for h in holds if h.end > h.start])
    current = peak = 0
    for _, step in points:  # at equal instants an end (-1) sorts first
        current += step
        peak = max(peak, current)
    return peak


@dataclass
class RWReport(Report):
    #: The largest number of read holds recorded at one instant.
    max_readers: int = 0


def check_rw_history(history: History, final: Optional[list[str]] = None) -> RWReport:
    """Every check of the module's list on one history of a read-write lock workload."""
    modes = by_mode(history)
    reads = extract_holds(modes[READ])
    writes = extract_holds(modes[WRITE])
    both = Holds(sorted(reads.holds + writes.holds, key=lambda h: (h.start, h.process)), [], 0)
    results = [
        check_rw_exclusion(reads.holds, writes.holds),
        check_fences(both, exclusive=False),
        check_write_fences(reads.holds, writes.holds),
        check_stable_reads(history, reads.holds),
        check_rw_linearizable(modes),
    ]
    if final is not None:
        results.append(check_lost_updates(history, final))
    return RWReport(results, max_readers=max_overlapping(reads.holds))
