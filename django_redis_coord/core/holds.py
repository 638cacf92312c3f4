"""Hold state: where a primitive keeps what it holds (per thread, or shared by all threads),
and the once-only flags that several threads (the caller's, the watchdog's) may race to set.
"""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace
from typing import Any, Optional

from .exceptions import LockForkedError

__all__ = ["SharedHold", "ThreadHold", "capped_ms", "first_time", "first_of", "refuse_forked", "taken_elsewhere"]


_FLAGS = threading.Lock()


def _new_flags_lock() -> None:
    """In a forked child: a new lock (a thread of the parent may have held it at the fork)."""
    global _FLAGS
    _FLAGS = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_flags_lock)


def first_time(holder: Any, flag: str) -> bool:
    """Set ``holder.<flag>`` and return True, unless it was set already: one winner when several
    threads (the caller's, the watchdog's) find the same hold lost at once."""
    with _FLAGS:
        if getattr(holder, flag, False):
            return False
        setattr(holder, flag, True)
        return True


def first_of(seen: set, key: Any) -> bool:
    """Add ``key`` to ``seen`` and return True, unless it was there already (as :func:`first_time`)."""
    with _FLAGS:
        if key in seen:
            return False
        seen.add(key)
        return True


def capped_ms(ttl_ms: int, hold: Any, max_hold: Optional[float]) -> int:
    """The TTL a renewal of ``hold`` asks for: ``ttl_ms``, or less so that the hold ends
    ``max_hold`` seconds after it began (its ``started`` instant); 1 ms once that has passed."""
    started = getattr(hold, "started", None)
    if max_hold is None or started is None:
        return ttl_ms
    return max(1, min(ttl_ms, int((started + max_hold - time.monotonic()) * 1000)))


def taken_elsewhere(hold: Any) -> bool:
    """Whether ``hold`` has a token taken by another process than this one (this one is a fork of
    it; the taking process records itself as ``pid`` with the token).  Such a hold is not this
    process's: it neither joins it (re-entry), nor releases or renews it (:func:`refuse_forked`)."""
    pid = getattr(hold, "pid", None)
    return pid is not None and getattr(hold, "token", None) is not None and pid != os.getpid()


def refuse_forked(hold: Any, name: Any) -> None:
    """Raise :class:`LockForkedError` when ``hold`` was taken by another process than this one
    (see :func:`taken_elsewhere`): only the process that took a hold releases or renews it."""
    if taken_elsewhere(hold):
        pid = hold.pid
        raise LockForkedError(
            f"Lock {name!r} was acquired by process {pid}; this process ({os.getpid()}) is a fork of it. "
            f"A hold stays with the process that took it: release it there, or acquire the lock in this process.",
            lock_name=name,
        )


class SharedHold:
    """Hold state shared by all threads (``thread_local=False``); ``.token`` as in redis-py.

    The hold itself is a plain namespace (``hold``), so the watchdog thread can update the
    deadline of whichever thread acquired; ``initial`` names further fields it starts with.
    """

    initial: dict[str, Any] = {}

    def __init__(self) -> None:
        self.hold = SimpleNamespace(token=None, **self.initial)

    @property
    def token(self) -> Optional[bytes]:
        return self.hold.token

    @token.setter
    def token(self, value: Optional[bytes]) -> None:
        self.hold.token = value


class ThreadHold(SharedHold, threading.local):
    """Hold state private to each thread."""

