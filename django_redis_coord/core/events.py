"""What a primitive tells about its holds: one object, given as ``events=``, that every lock,
semaphore and Redlock (sync and asyncio) calls at the start and end of each hold.

Nothing here needs Django: the Django signals (:mod:`django_redis_coord.signals`) are one such
object, made by the factories and ``@locked``; metrics or logs are others::

    >>> from django_redis_coord import Lock
    >>> from django_redis_coord import Events
    >>> class Printed(Events):
    ...     def acquired(self, primitive, *, fence, wait_time):
    ...         print("acquired", primitive.name, fence > 0)
    >>> with Lock(client, "printed", timeout=5, events=Printed()):  # doctest: +SKIP
    ...     pass
    acquired printed True

Each call is about a new hold only (not an inner hold of a re-entrant lock):

* ``acquired(primitive, fence=, wait_time=)``: a hold began; ``wait_time`` is how long the
  acquire took (seconds).
* ``contended(primitive, wait_time=, pttl=, limit=)``: an acquire gave up (not blocking, or its
  ``blocking_timeout`` passed); ``pttl`` is what the refusing reply said of the current holder's
  remaining time (milliseconds; ``-1`` no expiry, ``None`` unknown), ``limit`` the semaphore's
  limit in force (``None`` for a lock).
* ``released(primitive, fence=, held_time=)``: the hold ended by a release.
* ``lost(primitive, fence=, held_time=)``: the hold was found lost (by the watchdog, or by the
  release), once per hold.  ``held_time`` is ``None`` when the start is not known here.
* ``waited(primitive, outcome=, wait_time=, fence=, pttl=, limit=)``: an acquire that did not get
  its grant at once ended: ``outcome`` ``"acquired"`` (after waiting in line), ``"timeout"`` (its
  ``blocking_timeout`` passed while in line) or ``"refused"`` (not blocking, or it gave up before
  queueing); ``pttl`` and ``limit`` are what the refusal said.  Told just before ``acquired`` or
  ``contended``, never for an uncontended grant: the tracing's hook
  (:mod:`django_redis_coord.core.tracing`).  Sync in both flavours (keep it in memory); what it
  raises is logged, not raised.  Optional: an object without it is not told.

``primitive`` is the lock, semaphore or Redlock (for a semaphore, ``fence`` is the permit's).  An
asyncio primitive awaits the ``a``-prefixed twins, which call the sync ones unless overridden; ``lost``
comes from the watchdog, which an asyncio primitive runs as a task: it schedules :meth:`alost`.

An exception raised by :meth:`acquired` (or :meth:`aacquired`, a cancellation included) gives the
new hold back before it propagates: nobody would release it otherwise.  One raised by :meth:`lost`
is logged (``on_lost`` and the release's own error come first); those of :meth:`contended` and
:meth:`released` propagate to the caller of ``acquire`` / ``release``.  An asyncio release, once
asked, completes and is told even if its task is cancelled meanwhile.  A semaphore identity that
acquires again while its permit is live renews it: no new hold, nothing told.
"""

from __future__ import annotations

import time
from typing import Any, Optional

__all__ = ["Events"]


class Events:
    """The no-op base: override what you need (sync, and the ``a``-prefixed asyncio twins when
    receiving them must await something)."""

    def acquired(self, primitive: Any, *, fence: Optional[int], wait_time: float) -> None:
        """A new hold of ``primitive`` began."""

    def contended(self, primitive: Any, *, wait_time: float, pttl: Optional[int], limit: Optional[int]) -> None:
        """An acquire of ``primitive`` gave up without a hold."""

    def released(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        """A hold of ``primitive`` ended with its release."""

    def lost(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        """A hold of ``primitive`` was found lost (once per hold)."""

    def waited(self, primitive: Any, *, outcome: str, wait_time: float, fence: Optional[int],
               pttl: Optional[int], limit: Optional[int]) -> None:
        """An acquire of ``primitive`` that did not get its grant at once ended (``outcome``)."""

    async def aacquired(self, primitive: Any, *, fence: Optional[int], wait_time: float) -> None:
        self.acquired(primitive, fence=fence, wait_time=wait_time)

    async def acontended(self, primitive: Any, *, wait_time: float, pttl: Optional[int],
                         limit: Optional[int]) -> None:
        self.contended(primitive, wait_time=wait_time, pttl=pttl, limit=limit)

    async def areleased(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        self.released(primitive, fence=fence, held_time=held_time)

    async def alost(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        self.lost(primitive, fence=fence, held_time=held_time)


def held_time(hold: Any) -> Optional[float]:
    """Seconds since ``hold`` began (its ``started`` instant), or ``None`` when not recorded."""
    started = hold.started if hold is not None else None
    return None if started is None else time.monotonic() - started
