"""Recorded histories: what each client process invoked, and how each call ended.

An event is one of

* ``invoke`` - a call is about to be sent;
* ``ok`` - it took effect (for ``acquire``: the lock is held);
* ``fail`` - it certainly did not take effect (refused, not owned, fence rejected, timed out);
* ``info`` - unknown: the call may or may not have taken effect (connection lost mid-call);
* ``note`` - something the process observed on its own, outside any call (the loss signal).

Each process runs one call at a time, so its events pair up as ``invoke`` followed by one
completion; notes may fall anywhere.  Times come from ``time.monotonic_ns()`` taken in the
process itself: ``invoke`` before the request leaves, completions after the reply arrived, so
the recorded window of a call always contains the moment it took effect on the server.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

INVOKE, OK, FAIL, INFO, NOTE = "invoke", "ok", "fail", "info", "note"
COMPLETIONS = (OK, FAIL, INFO)

#: End time of a call that never completed (or whose outcome is unknown).
NEVER = math.inf


@dataclass(frozen=True)
class Event:
    """One recorded event of one process."""

    time: int
    process: int
    type: str
    f: str
    value: Any = None

    def __str__(self) -> str:
        return f"{self.time / 1e9:.6f} p{self.process} {self.type} {self.f} {self.value!r}"


@dataclass
class Operation:
    """A call and how it ended: ``start`` at invoke, ``end`` at completion (``NEVER`` if unknown)."""

    process: int
    f: str
    type: str
    start: float
    end: float
    args: Any = None
    value: Any = None
    index: int = -1
    #: When the process saw the call end (also for ``info``; None if it never ended).
    completed: Optional[int] = None

    @property
    def duration(self) -> Optional[float]:
        """Seconds from invoke until the process saw the call end."""
        return None if self.completed is None else (self.completed - self.start) / 1e9

    @property
    def ok(self) -> bool:
        return self.type == OK

    def __str__(self) -> str:
        end = "never" if self.end == NEVER else f"{self.end / 1e9:.6f}"
        return f"p{self.process} {self.f} {self.type} [{self.start / 1e9:.6f}, {end}] {self.args!r} -> {self.value!r}"


class Recorder:
    """Records the events of one client process; ``events`` is what the process sends back.

    Safe to call from a second thread for notes (appending to a list is atomic in CPython).
    """

    def __init__(self, process: int) -> None:
        self.process = process
        self.events: list[Event] = []
        self._pending: Optional[str] = None

    def _add(self, kind: str, f: str, value: Any) -> Event:
        event = Event(time.monotonic_ns(), self.process, kind, f, value)
        self.events.append(event)
        return event

    def invoke(self, f: str, value: Any = None) -> Event:
        if self._pending is not None:
            raise RuntimeError(f"process {self.process} invoked {f} while {self._pending} is pending")
        self._pending = f
        return self._add(INVOKE, f, value)

    def _complete(self, kind: str, f: str, value: Any) -> Event:
        if self._pending != f:
            raise RuntimeError(f"process {self.process} completed {f} but {self._pending} is pending")
        self._pending = None
        return self._add(kind, f, value)

    def ok(self, f: str, value: Any = None) -> Event:
        return self._complete(OK, f, value)

    def fail(self, f: str, value: Any = None) -> Event:
        return self._complete(FAIL, f, value)

    def info(self, f: str, value: Any = None) -> Event:
        return self._complete(INFO, f, value)

    def note(self, f: str, value: Any = None) -> Event:
        return self._add(NOTE, f, value)


@dataclass
class History:
    """The merged events of every process, in time order."""

    events: list[Event] = field(default_factory=list)

    @classmethod
    def merge(cls, per_process: Iterable[Iterable[Event]]) -> History:
        events = [event for events in per_process for event in events]
        events.sort(key=lambda e: (e.time, e.process))
        return cls(events)

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    @property
    def processes(self) -> list[int]:
        return sorted({event.process for event in self.events})

    def by_process(self) -> dict[int, list[Event]]:
        out: dict[int, list[Event]] = {}
        for event in self.events:
            out.setdefault(event.process, []).append(event)
        return out

    def notes(self, f: Optional[str] = None) -> list[Event]:
        return [e for e in self.events if e.type == NOTE and (f is None or e.f == f)]

    def operations(self) -> list[Operation]:
        """Pair each invoke with its completion; a call left pending ends as ``info`` at ``NEVER``."""
        ops: list[Operation] = []
        for process, events in self.by_process().items():
            pending: Optional[Event] = None
            for event in events:
                if event.type == NOTE:
                    continue
                if event.type == INVOKE:
                    if pending is not None:
                        raise ValueError(f"p{process} invoked {event.f} while {pending.f} was pending")
                    pending = event
                    continue
                if pending is None or pending.f != event.f:
                    raise ValueError(f"p{process}: {event} completes nothing")
                end = NEVER if event.type == INFO else event.time
                ops.append(Operation(process, event.f, event.type, pending.time, end, pending.value, event.value,
                                     completed=event.time))
                pending = None
            if pending is not None:
                ops.append(Operation(process, pending.f, INFO, pending.time, NEVER, pending.value, None))
        ops.sort(key=lambda op: (op.start, op.process))
        for index, op in enumerate(ops):
            op.index = index
        return ops

    def dump(self, limit: int = 200) -> str:
        lines = [str(event) for event in self.events[:limit]]
        if len(self.events) > limit:
            lines.append(f"... {len(self.events) - limit} more events")
        return "\n".join(lines)


def history_of(*calls: tuple) -> History:
    """A history written by hand: each call is ``(process, f, start, end, type[, args[, value]])``.

    Times are plain numbers (nanoseconds); ``end`` of an ``info`` call is when it gave up.
    ``("note", process, f, time[, value])`` adds a note.
    """
    events: list[Event] = []
    for call in calls:
        if call[0] == NOTE:
            _, process, f, at, *rest = call
            events.append(Event(at, process, NOTE, f, rest[0] if rest else None))
            continue
        process, f, start, end, kind, *rest = call
        args = rest[0] if rest else None
        value = rest[1] if len(rest) > 1 else None
        events.append(Event(start, process, INVOKE, f, args))
        events.append(Event(end, process, kind, f, value))
    return History.merge([events])
