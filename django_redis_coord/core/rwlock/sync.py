# Generated from django_redis_coord/core/rwlock/aio.py by `python3 dev.py twins`: edit that file, not this one.
"""A fenced, FIFO read-write lock on Redis: many readers or one writer, served in order.

:class:`django_redis_coord.core.rwlock.sync.ReadWriteLock` over a sync client,
:class:`django_redis_coord.core.rwlock.aio.ReadWriteLock` over a ``redis.asyncio`` one (same names,
arguments and behaviour, with ``await``); the sync module is generated from the asyncio one
(docs/twins.md).

::

    >>> from redis import Redis
    >>> from django_redis_coord import ReadWriteLock
    >>> rw = ReadWriteLock(Redis(), "catalog", timeout=30)
    >>> with rw.read:                    # shared with other readers          # doctest: +SKIP
    ...     show(catalog, fence=rw.read.fence)
    >>> with rw.write:                   # alone                              # doctest: +SKIP
    ...     rebuild(catalog, fence=rw.write.fence)

* **FIFO across modes.**  One queue serves both modes in arrival order: the readers at its head
  are granted together, a writer once every hold before it has ended.  A reader that arrives while
  a writer waits queues behind that writer, so a writer waits at most for the readers that held
  when it queued, and neither mode starves.
* **Fenced.**  Every grant, read or write, takes a fence from the name's counter: a write's fence is
  greater than the fence of every grant made before it.
* **Leases on server time**, watchdog renewal (``auto_renew``), the loss signal (``on_lost``),
  waiting without polling (the process's waiting connection), a crashed holder's hold ending with
  its TTL and a crashed waiter skipped after its lease: as for :class:`~django_redis_coord.Lock`
  and :class:`~django_redis_coord.Semaphore`, whose machinery this lock shares.
* **Re-entry per thread** (per asyncio task in asyncio): a read inside a read, a read inside a
  write and a write inside a write join the hold the thread has; a write inside a read raises
  :class:`~django_redis_coord.exceptions.LockUpgradeError` at once (it would wait for itself).
  ``thread_local=False`` shares the object's one hold between threads (a thread may release the
  hold another took) and takes one hold at a time, without re-entry.

``lock.read`` and ``lock.write`` have redis-py's ``Lock`` methods (``acquire``, ``release``,
``locked``, ``owned``, ``extend``, ``reacquire``, ``with``); what the twins share is in
:mod:`django_redis_coord.core.rwlock.rules`.  In asyncio, a release once asked completes even if its
task is cancelled meanwhile, and a task that ends still holding is reported, as for the ``Lock``.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Union

from ..arguments import Number, check_number, to_ms
from ..events import held_time
from ..holders import HolderInfo
from ..holds import SharedHold, taken_elsewhere
from ..lock.rules import WithBlock
from ..queue.sync import Line
from ..reporting import Reporter
from ..scripts import sync_scripts
from ..side import sync as side
from ..side.sync import WorkerHolds
from .rules import READ, WRITE, RWHoldBase, RWLockBase

__all__ = ["ReadWriteLock", "RWHold"]


class RWHold(WithBlock, RWHoldBase):
    """The read (``lock.read``) or write (``lock.write``) side of a ``ReadWriteLock``, with
    redis-py's ``Lock`` methods.  A hold belongs to the thread (task) that acquired it (to the lock
    object, with ``thread_local=False``: any thread or task may release it)."""

    lock: ReadWriteLock

    def acquire(self, blocking: Optional[bool] = None, blocking_timeout: Optional[Number] = None) -> bool:
        """Acquire this mode; True once held, False when ``blocking`` is off or time ran out.

        A blocking call queues in FIFO order (across both modes) and is woken when it is its turn,
        or when a hold it waits for reaches its TTL, or at ``blocking_timeout`` (on the client's
        monotonic clock).  Re-entry rules: see ``ReadWriteLock``."""
        return self.lock._acquire_mode(self.mode, blocking, blocking_timeout)

    def release(self) -> None:
        """Release this thread's (task's) hold of this mode (its outermost hold ends it in Redis); raises
        ``LockError`` when it has none, ``LockNotOwnedError`` when it had already ended."""
        self.lock._release_mode(self.mode)

    def locked(self) -> bool:
        """True when anyone holds this lock in this mode."""
        return self.lock.holders_of(self.mode, self.lock.live_holders(self.lock.do_inspect("full")))

    def owned(self) -> bool:
        """True when this thread's (task's) hold of this mode is live in Redis (False in a forked
        child for the parent's hold)."""
        local = self.lock.holding(self.mode)
        if local is None or taken_elsewhere(local):
            return False
        return local.token in self.lock.live_holders(self.lock.do_inspect("full"))

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the hold's remaining TTL (or set it, with ``replace_ttl``)."""
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        local = self.lock._held(self.mode, "extend")
        return self.lock.line.extend(local, to_ms(additional_time), "replace" if replace_ttl else "add")

    def reacquire(self) -> bool:
        """Reset the hold's TTL to ``timeout``."""
        local = self.lock._held(self.mode, "reacquire")
        return self.lock.line.extend(local, self.lock.renew_ttl_ms, "replace")


class ReadWriteLock(RWLockBase):
    """A fenced, FIFO read-write lock: ``lock.read`` is shared by readers, ``lock.write`` is held alone.

    ``ReadWriteLock(redis, name, timeout=None, *, blocking=True, blocking_timeout=None,
    raise_on_release_error=True, label=None, auto_renew=False, on_lost=None, waiter_lease=2.0,
    events=None, max_hold=None, thread_local=True)``

    * ``timeout``: the TTL of each hold in seconds (``None``: holds never expire; give one, with
      ``auto_renew=True`` for long work, so that a crashed holder's hold ends).
    * ``blocking`` / ``blocking_timeout``: defaults of both holds' ``acquire`` and ``with`` blocks.
    * ``on_lost(hold)``: called once with ``lock.read`` or ``lock.write`` when a hold is found lost.
    * ``thread_local=False``: one hold at a time, shared by every thread or task (see
      ``RWLockBase`` in ``core/rwlock/rules.py``).
    """

    scripts = sync_scripts
    side = side

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self._compose()
        #: The read side: shared with the other readers.
        self.read = RWHold(self, READ)
        #: The write side: held alone.
        self.write = RWHold(self, WRITE)

    def _compose(self) -> None:
        """Its holds (per task, or one shared with ``thread_local=False``), its line, its reporter
        (which tells ``events`` of ``lock.read`` or ``lock.write``)."""
        self.local = WorkerHolds() if self.thread_local else SharedHold()
        self.line = Line(self)
        self.report = Reporter(self, self._lost_subject, self._refusal, in_background=side.LOSS_TOLD_IN_BACKGROUND)

    def locked(self) -> bool:
        """True when anyone holds this lock, in either mode."""
        return int((self.do_inspect("count"))[2]) > 0

    def holders(self) -> list[HolderInfo]:
        """Every live hold (its readers, or its writer) with its holder's metadata, in fence order;
        ``extra["mode"]`` says ``"read"`` or ``"write"``."""
        return self.info_list(self.keys.name, self.do_inspect("full"))

    # -- what the holds call -----------------------------------------------------------------------
    def hold(self, mode: str) -> RWHold:
        """``lock.read`` or ``lock.write`` by the name of the mode (``"read"`` or ``"write"``)."""
        return self.read if self.check_mode(mode) == READ else self.write

    def _acquire_mode(
        self, mode: str, blocking: Optional[bool] = None, blocking_timeout: Optional[Number] = None
    ) -> bool:
        """Acquire ``mode`` (``"read"`` or ``"write"``) for the current thread (task): see :meth:`RWHold.acquire`."""
        started = time.monotonic()
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        if self.reenter(mode):
            return True
        token = self.new_hold_token(mode)
        taken = None
        try:
            taken = self.line.take(token, blocking, stop_at, own=True)
        finally:
            if taken is None:
                self._unclaim()
        if taken is None:
            self.report.tell_contended(started, self.hold(mode))
            return False
        hold = self._own(mode, token, *taken)
        self.report.tell_acquired(hold, started, lambda: self._release_call(hold))
        return True

    def _release_mode(self, mode: str) -> None:
        """Release the current thread's (task's) hold of ``mode``: see :meth:`RWHold.release`."""
        local = self._release_start(mode)
        if local is None:
            return
        self._detach(local)
        # In asyncio, once asked, the release completes (and is told) even if its task is cancelled
        # meanwhile (a client going away under ASGI).
        self._release_hold(local, local.token, local.lost, self.hold(mode))

    def _release_call(self, local: Any) -> None:
        """Stop renewing the hold ``local`` and return the call that releases it, untold: the
        give-back of a grant whose ``acquired`` receiver raised.  In asyncio that call needs nothing
        from the task, so it can finish in another one (see :meth:`_release_mode`)."""
        self._detach(local)
        return self._release_hold(local, local.token, local.lost)

    def _release_hold(self, local: Any, token: bytes, lost: bool, told: Optional[RWHold] = None) -> None:
        """Release the hold ``local`` and tell ``released`` of the side ``told`` (``None``: untold):
        one call, so that (in asyncio) a release finished after its task was cancelled is told too."""
        fence, held = local.fence, held_time(local)
        released = self.do_release(token)
        if not released:
            self.report.tell_lost_now(local)  # told here, so _mark_lost (in _release_done) tells nothing more
        self._release_done(local, token, released, lost)
        if told is not None:
            self.report.tell_released(fence, held, told)

    # -- the only methods talking to Redis -----------------------------------------------------
    def do_release(self, token: bytes) -> bool:
        script = self.scripts.get(self.redis, "rw_release")
        return int(script(self.release_keys(), self.release_args(token), client=self.redis)) == 1

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, self.extend_script)
        pttl = int(script(self.extend_keys(), self.extend_args(token, ms, mode), client=self.redis))
        return self.checked_pttl(pttl)

    def do_inspect(self, mode: str) -> Any:
        script = self.scripts.get(self.redis, "sem_inspect")
        return script(self.inspect_keys(), (mode,), client=self.redis)
