"""Hold state: what a primitive holds (:class:`Hold`, one record per hold), where it keeps it when
one hold serves every thread and task (:class:`SharedHold`; the per-thread and per-task stores are
each side's ``WorkerHolds``, in :mod:`django_redis_coord.core.side`), and the once-only flags that
several threads (the caller's, the watchdog's) may race to set.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Optional

from .exceptions import LockForkedError

__all__ = ["Hold", "SharedHold", "capped_ms", "copy_hold", "first_time", "first_of", "refuse_forked", "taken_elsewhere"]


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
        if getattr(holder, flag):
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
    started = hold.started if hold is not None else None
    if max_hold is None or started is None:
        return ttl_ms
    return max(1, min(ttl_ms, int((started + max_hold - time.monotonic()) * 1000)))


def taken_elsewhere(hold: Any) -> bool:
    """Whether ``hold`` has a token taken by another process than this one (this one is a fork of
    it; the taking process records itself as ``pid`` with the token).  Such a hold is not this
    process's: it neither joins it (re-entry), nor releases or renews it (:func:`refuse_forked`)."""
    pid = hold.pid
    return pid is not None and hold.token is not None and pid != os.getpid()


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


@dataclass(eq=False)
class Hold:
    """One hold of a lock or a read-write lock (and a Redlock's), as the thread or task that took it
    (or every thread, with ``thread_local=False``) keeps it.  The watchdog updates ``deadline`` and
    ``lost``; compared by identity (the watchdog keys holds by it)."""

    #: The token the hold has in Redis (``None``: nothing held).
    token: Optional[bytes] = None
    #: The fence of its grant.
    fence: Optional[int] = None
    #: ``time.monotonic()`` instant after which it may have ended (``None``: no expiry).
    deadline: Optional[float] = None
    #: Found lost (by the watchdog, or by a release).
    lost: bool = False
    #: Registered with the watchdog (renewal, or the claim of a provisional hand-off).
    watched: bool = False
    #: How many acquires of a re-entrant lock it stands for.
    count: int = 0
    #: The process that took it (only that one releases or renews it: :func:`refuse_forked`).
    pid: Optional[int] = None
    #: ``time.monotonic()`` instant of its grant (``held_time``, ``max_hold``).
    started: Optional[float] = None
    #: Its loss was told to the events object (once per hold).
    loss_reported: bool = False
    #: What the latest refused acquire of this thread or task said: the holder's remaining ms and the limit.
    refusal: tuple[Optional[int], Optional[int]] = (None, None)
    #: A read-write lock's: ``"read"`` or ``"write"``, and how many holds of each mode it nests.
    mode: Optional[str] = None
    reads: int = 0
    writes: int = 0
    #: A read-write lock with ``thread_local=False``: an acquire claimed the one hold state.
    claimed: bool = False
    #: An asyncio hold of one task: that task and the callback watching its end.
    task_end: Optional[tuple[Any, Any]] = None
    #: Queued for the watchdog's next look (see ``Watchdog.register`` in ``core/watchdog.py``).
    arriving: Optional[tuple[Any, ...]] = None


def copy_hold(source: Hold, target: Hold) -> None:
    """Make ``target`` (the hold of a twin: the same name on the other side's client, or a fresh
    copy) describe what ``source`` does: the same token, fence, deadline, start and watch.
    Neither hold may be in use by another thread meanwhile."""
    for field in fields(Hold):
        setattr(target, field.name, getattr(source, field.name))


class SharedHold:
    """Hold state shared by all threads and tasks (``thread_local=False``); ``.token`` as in redis-py.

    The hold itself is a :class:`Hold` (``hold``), so the watchdog thread can update the deadline
    of whichever thread acquired; ``initial`` names fields it starts with.
    """

    initial: dict[str, Any] = {}
    #: One hold for every thread and task.
    per_worker = False

    def __init__(self) -> None:
        self.hold = Hold(**self.initial)

    @property
    def token(self) -> Optional[bytes]:
        return self.hold.token

    @token.setter
    def token(self, value: Optional[bytes]) -> None:
        self.hold.token = value
