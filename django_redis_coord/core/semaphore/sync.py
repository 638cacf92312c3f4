# Generated from django_redis_coord/core/semaphore/aio.py by `python3 dev.py twins`: edit that file, not this one.
"""Counting semaphores on Redis: leased, fenced permits on server time, served in FIFO order.

:class:`django_redis_coord.core.semaphore.sync.Semaphore` over a sync client,
:class:`django_redis_coord.core.semaphore.aio.Semaphore` over a ``redis.asyncio`` one (same names,
arguments and behaviour, with ``await``); the sync module is generated from the asyncio one
(docs/twins.md).

A semaphore whose holders name themselves (an identity per permit)::

    >>> from redis import Redis
    >>> from django_redis_coord import Semaphore
    >>> client = Redis(decode_responses=True)
    >>> semaphore = Semaphore(client, "test-semaphore")
    >>> semaphore.set_max_size(3)
    >>> semaphore.acquire("peter")
    True
    >>> semaphore.acquire("jack"), semaphore.acquire("tom"), semaphore.acquire("mary")
    (True, True, False)
    >>> semaphore.release("jack")
    True
    >>> semaphore.get_current_size(), semaphore.get_max_size()
    (2, 3)

and so does the form with the limit and the lease given up front, waiting in line::

    >>> with Semaphore(client, "thumbnails", limit=4, timeout=30) as permit:
    ...     render(fence=permit.fence)                                     # doctest: +SKIP

* The limit lives in Redis (every client agrees, it can change at runtime; shrinking it never
  evicts a holder).  A permit's lease ends on the server's clock: a client whose clock is off can
  neither over-issue permits nor evict live ones.  Expired permits are reclaimed inside acquire.
* Every operation is one Lua script (``lua/sem_*.lua``).  Every grant carries a fence token,
  strictly greater than every fence issued before for the semaphore.
* Waiting never polls: a blocking acquire joins a FIFO queue and sleeps until a release (or a
  reclaim, or a raised limit) grants the permit server-side to the head of the queue and announces
  it (see :mod:`django_redis_coord.core.waiting.sync`).  A waiter also looks again when the earliest lease
  ends, so a crashed holder's permit is reused promptly.
* Optional watchdog renewal of each permit, with the same loss signal as :class:`Lock`.

Permits taken without an identity belong to the thread (sync) or the asyncio task that took them,
so two threads or tasks sharing one instance never release each other's permit.  In asyncio a
release, once asked, completes even if its task is cancelled meanwhile.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, Optional, TypeVar, Union

from ..arguments import Number, check_number, new_token, to_ms
from ..exceptions import LockAcquireTimeout
from ..holders import HolderInfo, permits_from_inspect
from ..queue.sync import Line
from ..reporting import Reporter
from ..scripts import sync_scripts
from ..side import sync as side
from ..side.sync import PerWorker
from .rules import Identity, Permit, SemaphoreBase, check_limit, encode_identity

# Permit, SemaphoreBase, check_limit and encode_identity live in _semaphore_base (shared by the
# twins); they stay importable from here.
__all__ = ["Semaphore", "Permit", "SemaphoreBase", "check_limit", "encode_identity"]

#: A subclass's ``with`` block gives that subclass.
_SemaphoreT = TypeVar("_SemaphoreT", bound="Semaphore")


class Semaphore(SemaphoreBase):
    """A counting semaphore whose permits are leased on server time, fenced and served FIFO.

    ``Semaphore(redis, name, limit=None, timeout=None, blocking=False, blocking_timeout=None, *,
    label=None, auto_renew=False, on_lost=None, raise_on_release_error=True, waiter_lease=2.0)``

    * ``limit``: stored in Redis by the first acquire when no limit is stored yet; afterwards the
      stored limit applies (change it with :meth:`set_max_size`).
    * ``timeout``: lease of each permit in seconds (``None``: permits never expire).
    * ``blocking``/``blocking_timeout``: defaults of :meth:`acquire` (non-blocking by default, as for
      identity semaphores); the context manager always waits, up to ``blocking_timeout``.
    * ``auto_renew``: the watchdog renews each permit at ``timeout / 3``; ``on_lost(permit)`` is
      called when a permit could not be renewed in time.
    """

    scripts = sync_scripts
    side = side

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self._compose()

    def _compose(self) -> None:
        """Its permits taken without an identity (a stack per task), its line, its reporter."""
        self.local = PerWorker(list)
        self.line = Line(self)
        self.report = Reporter(self, refusal=self._refusal, in_background=side.LOSS_TOLD_IN_BACKGROUND)

    def _stack(self) -> list[bytes]:
        """Tokens of the permits the current task acquired without an identity."""
        return self.local.get()  # type: ignore[no-any-return]

    # -- the identity semaphore's API --------------------------------------------------------------
    def set_max_size(self, size: int) -> None:
        """Set the limit for every client.  Raising it serves waiting callers at once; lowering it
        stops new grants until enough holders have released (nobody is evicted)."""
        check_limit(size, self.name)
        self.do_set_limit(size)

    def get_max_size(self) -> int:
        """The limit stored in Redis; else the one this object would store; else 0."""
        stored = self.redis.hget(self.keys.meta, "limit")
        if stored is not None:
            return int(stored)
        return self.limit or 0

    def get_current_size(self) -> int:
        """How many permits are held right now (leases that ended are not counted)."""
        return int((self.do_inspect("count"))[2])

    def acquire(
        self,
        identity: Optional[Identity] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
    ) -> bool:
        """Take a permit for ``identity`` (default: a fresh token kept for this thread or task).

        Returns True once held, False when none is free (non-blocking) or ``blocking_timeout``
        passed.  An identity that already holds a permit gets its lease renewed (True).  A
        blocking call waits in FIFO order and is woken by a release, when the earliest lease
        ends, or at ``blocking_timeout`` (kept on the client's monotonic clock).
        """
        started = time.monotonic()
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        token = encode_identity(identity, self.name) if identity is not None else new_token()
        taken = self.line.take(token, blocking, stop_at, own=identity is None)
        if taken is None:
            self.report.tell_contended(started)
            return False
        permit, new = self._own(token, taken[0], taken[1], anonymous=identity is None)
        if new:  # an identity renewing its live permit is no new hold
            self.report.tell_acquired(permit, started, lambda: self._release_call(identity))
        return True

    def release(self, identity: Optional[Identity] = None) -> bool:
        """Return the permit of ``identity`` (default: this thread's latest permit).

        True when it was released; False when that identity holds no permit (never had one, or
        its lease ended).  Free permits go to the first waiters at once.
        """
        token, _, held = self._to_release(identity)
        self._stop_watching(token)
        # In asyncio, once asked, the release completes (and is told) even if its task is cancelled
        # meanwhile (a client going away under ASGI).
        return self._release_permit(token, self._stack(), held, tell=True)

    def _release_call(self, identity: Optional[Identity] = None) -> bool:
        """Return the permit of ``identity`` (default: this thread's or task's latest), untold: the
        give-back of a grant whose ``acquired`` receiver raised.  In asyncio the call needs nothing
        from the task, so it can finish in another one (see :meth:`release`)."""
        token = self._token_to_release(identity)
        self._stop_watching(token)
        return self._release_permit(token, self._stack())

    def _release_permit(
        self, token: bytes, stack: list[bytes], held: Optional[float] = None, tell: bool = False
    ) -> bool:
        """Release the permit of ``token`` (``stack``: the anonymous permits of the thread or task
        that took it) and tell its loss, or with ``tell`` its release: one call, so that (in
        asyncio) a release finished after its task was cancelled is told too.  Local state is
        kept until Redis answered: a connection error must leave a way to retry."""
        permit = self._permits.get(token)
        released = self.do_release(token)
        self._forget(token, stack)
        if permit is not None:
            if not released or permit.lost:
                self.report.tell_lost_now(permit)
            elif tell:
                self.report.tell_released(permit.fence, held)
        return released

    def extend(
        self, additional_time: Number, replace_ttl: bool = False, identity: Optional[Identity] = None
    ) -> bool:
        """Add ``additional_time`` seconds to a permit's remaining lease (or set it, with ``replace_ttl``)."""
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        permit = self._held(identity)
        self.check_extendable("extend")
        return self.line.extend(permit, to_ms(additional_time), "replace" if replace_ttl else "add")

    def reacquire(self, identity: Optional[Identity] = None) -> bool:
        """Reset a permit's lease to ``timeout``."""
        permit = self._held(identity)
        self.check_extendable("reacquire")
        return self.line.extend(permit, self._ttl_ms, "replace")

    def holders(self) -> list[HolderInfo]:
        """Every live permit of this semaphore (from all clients) with its holder's metadata."""
        return permits_from_inspect(self.keys.name, self.do_inspect("full"))

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self: _SemaphoreT) -> _SemaphoreT:
        if self.acquire(blocking=True):
            return self
        raise LockAcquireTimeout("Unable to acquire a permit within the time specified", lock_name=self.name)

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        permit = self.permit()
        released = self.release()
        error = self._exit_error(released, permit)
        if error is not None:
            raise error

    # -- the only methods talking to Redis -------------------------------------------------------
    def do_release(self, token: bytes) -> bool:
        script = self.scripts.get(self.redis, "sem_release")
        return int(script(self.release_keys(), self.release_args(token), client=self.redis)) == 1

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "sem_extend")
        pttl = int(script(self.extend_keys(), self.extend_args(token, ms, mode), client=self.redis))
        return self.checked_pttl(token, pttl)

    def do_set_limit(self, size: int) -> int:
        script = self.scripts.get(self.redis, "sem_set_limit")
        count = int(script(self.release_keys(), self.set_limit_args(size), client=self.redis))
        return self.checked_size(count)

    def do_inspect(self, mode: str) -> Any:
        script = self.scripts.get(self.redis, "sem_inspect")
        return script(self.inspect_keys(), (mode,), client=self.redis)
