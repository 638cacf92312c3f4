"""What the sync and asyncio read-write locks share: their arguments and keys, the mode of a
token, the caller's hold and its re-entry rules (:class:`RWLockBase`), and what a read or write
hold object offers without talking to Redis (:class:`RWHoldBase`).  Nothing in here talks to Redis;
:mod:`django_redis_coord.core.rwlock.sync` and :mod:`django_redis_coord.core.rwlock.aio` do.

A read-write lock keeps its holds as a semaphore keeps its permits (a sorted set at the name:
token -> lease end; one record per hold in the meta hash; the fence counter; a registry entry
``rw:<name>``), and the first letter of a token says its mode: ``r`` or ``w``.  Its scripts
(``lua/rw_*.lua``) grant in FIFO order across modes: readers at the head of the queue together,
a writer alone (see docs/rwlocks.md).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Optional, Union

from ..arguments import Number, new_token
from ..events import Events
from ..exceptions import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    LockError,
    LockLostError,
    LockNotOwnedError,
    LockUpgradeError,
)
from ..grants import Grant
from ..holders import HolderInfo, permits_from_inspect
from ..holds import Hold, first_time, refuse_forked, taken_elsewhere
from ..lock.rules import ReleaseOnExit
from ..queue.rules import DEFAULT_WAITER_LEASE, META_RETENTION_MS, NO_REPLY, QueuedBase

__all__ = ["READ", "WRITE", "RWHoldBase", "RWLockBase", "hold_mode"]

READ = "read"
WRITE = "write"
#: The first letter of a token of each mode (what the scripts read), and back.
_LETTERS = {READ: b"r", WRITE: b"w"}
_MODES = {b"r"[0]: READ, b"w"[0]: WRITE}
#: The modes a hold may have.
_MODES_BY_NAME = (READ, WRITE)
#: Holder records longer than this are not cached with their mode (see :func:`_with_mode`).
_CACHED_INFO_MAX = 1024


def hold_mode(token: bytes) -> Optional[str]:
    """The mode (:data:`READ` or :data:`WRITE`) of a read-write lock's token; ``None`` for a token
    that is not one (a semaphore's permit under the same name)."""
    return _MODES.get(token[0]) if token else None


def _add_mode(info: str, mode: str) -> str:
    record = json.loads(info)
    record["mode"] = mode
    return json.dumps(record)


_cached_add_mode = lru_cache(maxsize=512)(_add_mode)


def _with_mode(info: str, mode: str) -> str:
    """The holder record ``info`` (JSON) with ``"mode"``: what the listing shows in ``extra``."""
    return _cached_add_mode(info, mode) if len(info) <= _CACHED_INFO_MAX else _add_mode(info, mode)


def _count(local: Hold, mode: str) -> int:
    """How many holds of ``mode`` the hold ``local`` nests."""
    return local.reads if mode == READ else local.writes


def _set_count(local: Hold, mode: str, count: int) -> None:
    if mode == READ:
        local.reads = count
    else:
        local.writes = count


class RWLockBase(QueuedBase):
    """Arguments, keys and the caller's hold common to :class:`ReadWriteLock` and its asyncio twin.

    The hold state of a thread (task) is one :class:`~django_redis_coord.core.holds.Hold`: ``token``
    and ``mode`` of its hold in Redis, ``fence``, ``deadline``, ``lost``, and how many read and write
    holds it nests in it (``reads``, ``writes``).  Re-entry: a read inside a read or inside a write,
    and a write inside a write, join the hold (no round trip, same fence); a write inside a read
    raises :class:`LockUpgradeError`.

    With ``thread_local=False`` the object has one hold state, shared by every thread (task): the
    hold may be released by another thread than the one that took it (a view's response closed by
    a worker thread).  There is no re-entry then, and one hold at a time: an acquire while the
    object holds, or while another acquire on it is under way, raises :class:`LockError` at once
    (a second read would be granted beside the first, and the one state could not name both).
    """

    kind = "read-write lock"
    noun = "lock"
    key_kind = b"rw"
    acquire_script = "rw_acquire"
    cancel_script = "rw_cancel"
    extend_script = "sem_extend"
    acquire_setting = META_RETENTION_MS
    #: The hold state of each thread (task), set by each flavour.
    local: Any
    read: Any
    write: Any

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes],
        timeout: Optional[Number] = None,
        *,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        raise_on_release_error: bool = True,
        label: Optional[str] = None,
        auto_renew: bool = False,
        on_lost: Optional[Callable[[Any], Any]] = None,
        waiter_lease: Number = DEFAULT_WAITER_LEASE,
        events: Optional[Events] = None,
        max_hold: Optional[Number] = None,
        thread_local: bool = True,
    ) -> None:
        if not isinstance(blocking, bool):
            raise InvalidLockArgumentType("blocking must be True or False", lock_name=name)
        if not isinstance(thread_local, bool):
            raise InvalidLockArgumentType("thread_local must be True or False", lock_name=name)
        self.thread_local = thread_local
        super().__init__(redis, name, timeout, blocking, blocking_timeout, label=label, auto_renew=auto_renew,
                         on_lost=on_lost, raise_on_release_error=raise_on_release_error, waiter_lease=waiter_lease,
                         events=events, max_hold=max_hold)

    def check_mode(self, mode: object) -> str:
        """``mode`` when it is ``"read"`` or ``"write"``; else a typed error."""
        if not isinstance(mode, str):
            raise InvalidLockArgumentType(f"mode must be 'read' or 'write', not {type(mode).__name__}",
                                          lock_name=self.name)
        if mode not in _MODES_BY_NAME:
            raise InvalidLockArgument(f"mode must be 'read' or 'write', not {mode!r}", lock_name=self.name)
        return mode

    # -- arguments of the scripts ------------------------------------------------------------
    @staticmethod
    def new_hold_token(mode: str) -> bytes:
        """A fresh token of ``mode``: its first letter tells the scripts the mode."""
        return _LETTERS[mode] + b":" + new_token()

    def acquire_args(self, token: bytes, enqueue: int, worker: str,
                     reply_to: tuple[bytes, Any] = NO_REPLY) -> tuple:
        args = super().acquire_args(token, enqueue, worker, reply_to)
        return (*args[:4], _with_mode(args[4], hold_mode(token) or ""), *args[5:])

    def checked_pttl(self, pttl: int) -> int:
        """The reply of ``sem_extend.lua``: the new lease, or an error."""
        if pttl == -2:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        return pttl

    @staticmethod
    def live_holders(reply: Any) -> list[bytes]:
        """The tokens of the live holds in a ``sem_inspect.lua`` "full" reply."""
        return [bytes(token) if not isinstance(token, str) else token.encode() for token in reply[5::3]]

    # -- the caller's hold ---------------------------------------------------------------------
    @property
    def hold_record(self) -> Hold:
        """The current thread's (or task's) hold, as this object keeps it (``token`` ``None``: none);
        :func:`~django_redis_coord.core.holds.copy_hold` makes a twin of this lock hold the same."""
        return self._state()  # type: ignore[no-any-return]

    def _lost_subject(self, local: Any) -> Any:
        """``on_lost`` (and ``events``) get the hold object of the mode: ``lock.read`` or ``lock.write``."""
        return self.write if local.mode == WRITE else self.read

    def holding(self, mode: str) -> Optional[Any]:
        """The current thread's (task's) hold state when it holds ``mode`` (a read nested in its
        write counts as a read), else ``None``."""
        local = self._state()
        return local if local.token is not None and _count(local, mode) > 0 else None

    @staticmethod
    def _valid(local: Any) -> bool:
        if local.token is None or local.lost or taken_elsewhere(local):
            return False
        deadline = local.deadline
        return deadline is None or time.monotonic() < deadline

    def reenter(self, mode: str) -> bool:
        """An acquire by a thread (task) that holds this lock already joins its hold: True when it
        did.  A write inside a read is refused (:class:`LockUpgradeError`); a hold already lost
        cannot be joined (:class:`LockLostError`).  With ``thread_local=False``: never joins, and
        claims the one hold state for this acquire (:class:`LockError` when it is taken).  A forked
        child never joins the hold its parent took (the state it inherited): it takes one of its own."""
        local = self._state()
        if not self.thread_local:
            if taken_elsewhere(local):
                local.claimed = False  # the parent's claim, not this process's
            if not first_time(local, "claimed"):
                raise LockError(
                    "This read-write lock (thread_local=False) has a hold, or an acquire under way: its one hold "
                    "is shared by every thread, so it takes one hold at a time. Use one object per hold",
                    lock_name=self.name)
            return False
        if local.token is None or taken_elsewhere(local):
            return False
        if mode == WRITE and local.mode == READ:
            raise LockUpgradeError(
                "This thread (task) holds a read of this lock: a write would wait for its own read for ever. "
                "Release the read first (or take the write from the start)", lock_name=self.name)
        if not self._valid(local):
            raise LockLostError("The hold this re-entry would join was lost", lock_name=self.name)
        _set_count(local, mode, _count(local, mode) + 1)
        return True

    def _unclaim(self) -> None:
        """An acquire ended without a hold: the state is free for the next one (``thread_local=False``)."""
        self._state().claimed = False

    def _own(self, mode: str, token: bytes, grant: Grant, sent_at: float) -> Any:
        """Record a granted hold and, when needed, hand it to the watchdog; returns its state."""
        local = self._state()
        self.report.began(local)
        local.token = token
        local.pid = os.getpid()  # only this process may release or renew it (refuse_forked)
        local.mode = mode
        local.fence = grant.fence
        local.deadline = self.deadline_for(sent_at, grant.pttl)
        local.reads = 1 if mode == READ else 0
        local.writes = 1 if mode == WRITE else 0
        local.lost = False
        self._watch(local, token, grant.provisional)
        if self.local.per_worker:  # a hold of this thread or task only: nobody else can release it
            self.side.watch_worker_end(self, local, token)
        return local

    def _release_start(self, mode: str) -> Optional[Any]:
        """The first step of a release of ``mode``: ``None`` when it only ends a nested hold (the
        thread still holds), else the state of the hold to release in Redis (kept as it is until
        Redis answered, so that a connection error leaves a way to retry)."""
        local = self._state()
        count = _count(local, mode) if local.token is not None else 0
        if count == 0:
            raise LockError(f"Cannot release a {mode} hold this thread (task) does not have", lock_name=self.name)
        refuse_forked(local, self.name)
        if _count(local, READ) + _count(local, WRITE) > 1:
            _set_count(local, mode, count - 1)
            return None
        return local

    def _detach(self, local: Any) -> None:
        """Before the hold ``local`` is released: no renewal (nor claim) of it may go out any more,
        and its worker's end is no longer watched."""
        self._unwatch(local)
        self.side.unwatch_worker_end(local)

    def _release_done(self, local: Any, token: bytes, released: bool, lost: bool) -> None:
        """After the release script answered: forget the hold; raise when it had been lost."""
        if local.token == token:
            local.token = None
            local.reads = local.writes = 0
            local.claimed = False
        if not released:
            self._mark_lost(local)  # found here before the watchdog did: on_lost still fires once
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)
        if lost:
            raise LockLostError("The lock was lost before it was released", lock_name=self.name)

    def _held(self, mode: str, action: str) -> Any:
        """The hold state to extend (or reacquire): the current thread's hold of ``mode``."""
        local = self.holding(mode)
        if local is None:
            raise LockError(f"Cannot {action} a {mode} hold this thread (task) does not have", lock_name=self.name)
        refuse_forked(local, self.name)
        self.check_extendable(action)
        return local

    @staticmethod
    def holders_of(mode: str, tokens: list[bytes]) -> bool:
        """Whether any of the live ``tokens`` holds in ``mode``."""
        return any(hold_mode(token) == mode for token in tokens)

    @staticmethod
    def info_list(name: bytes, reply: Any) -> list[HolderInfo]:
        """The holders in a ``sem_inspect.lua`` "full" reply (fence order)."""
        return permits_from_inspect(name, reply, "rw")

    def fresh(self, redis: Any = None) -> Any:
        """A copy with its own hold state (see :meth:`QueuedBase.fresh`) and its own two holds."""
        twin = super().fresh(redis)
        twin.read = type(self.read)(twin, READ)
        twin.write = type(self.write)(twin, WRITE)
        return twin

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} name={self.name!r} timeout={self.timeout!r}>"


class RWHoldBase(ReleaseOnExit):
    """What a read or write hold object (``lock.read``, ``lock.write``) offers without talking to
    Redis: its mode, the state of the current thread's (task's) hold of that mode."""

    def __init__(self, lock: Any, mode: str) -> None:
        #: The read-write lock this is a side of.
        self.lock = lock
        #: ``"read"`` or ``"write"``.
        self.mode = mode

    @property
    def kind(self) -> str:  # type: ignore[override]
        return f"{self.mode} hold of read-write lock"

    @property
    def name(self) -> Any:
        return self.lock.name

    @property
    def events(self) -> Any:
        """The ``events`` hook of the lock (told of this hold's acquires and releases)."""
        return self.lock.events

    @property
    def refused_pttl(self) -> Optional[int]:
        """After a refused acquire by this thread (task): ms until the hold it waited for ends."""
        return self.lock.refused_pttl  # type: ignore[no-any-return]

    @property
    def timeout(self) -> Optional[Number]:
        return self.lock.timeout  # type: ignore[no-any-return]

    @property
    def raise_on_release_error(self) -> bool:  # type: ignore[override]
        return bool(self.lock.raise_on_release_error)

    @property
    def fence(self) -> Optional[int]:
        """Fence token of the current thread's (task's) hold of this mode (``None``: none, and in a
        forked child for the parent's hold).  A read nested in a write has the write's fence."""
        local = self.lock.holding(self.mode)
        return local.fence if local is not None and not taken_elsewhere(local) else None

    @property
    def deadline(self) -> Optional[float]:
        """``time.monotonic()`` instant after which the hold may have ended (``None``: no expiry)."""
        local = self.lock.holding(self.mode)
        return local.deadline if local is not None else None

    @property
    def valid(self) -> bool:
        """True while this thread (task) holds this mode and its local deadline has not passed."""
        local = self.lock.holding(self.mode)
        return local is not None and self.lock._valid(local)

    def ensure_valid(self) -> None:
        """Raise :class:`~django_redis_coord.exceptions.LockLostError` unless the hold is still valid."""
        if not self.valid:
            raise LockLostError(f"The {self.mode} hold is no longer held", lock_name=self.name)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} {self.mode} of {self.lock!r}>"
