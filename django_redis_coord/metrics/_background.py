"""A daemon thread that runs one function every few seconds, started on first need: the history's
writer and the OpenTelemetry recorder's feeder.  After a fork the child has no such thread (the
parent's did not follow it): the next :meth:`Periodic.ensure` starts one there."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Optional

__all__ = ["Periodic"]

#: Every Periodic of this process, for the fork hook.
_all: weakref.WeakSet[Periodic] = weakref.WeakSet()


class Periodic:
    """Calls ``work()`` every ``every`` seconds in a daemon thread named ``name``."""

    def __init__(self, work: Callable[[], object], every: float, name: str) -> None:
        self.work = work
        self.every = every
        self.name = name
        self._reset()
        _all.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def ensure(self) -> None:
        """Start the thread unless it runs (or was stopped); cheap when it runs."""
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            thread.start()  # raises (no thread to be had): tried again on the next call
            self._thread = thread

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.work()

    def stop(self) -> None:
        """Stop the thread (waiting for a run under way to end)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.every + 5)


def _after_fork_in_child() -> None:
    for periodic in list(_all):
        periodic._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
