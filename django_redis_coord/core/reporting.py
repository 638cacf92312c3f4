"""How a primitive calls its ``events`` object (see :class:`django_redis_coord.Events`): the one
place the sync and asyncio locks, semaphores and Redlocks tell of a hold's start and end.

Each primitive has a :class:`Reporter` (its ``report``): a lock, a semaphore and a read-write lock
hold one; a Redlock reaches its own through :class:`Reporting`'s methods.  A hold record (a
:class:`~django_redis_coord.core.holds.Hold`, a permit) gets ``started`` when it is granted; a
refused acquire leaves what the refusal said with the primitive (its ``note_refusal``).

An acquire that finds its name taken and waits in line says so through :meth:`Reporter.note_wait`
(the waiting path's one call); when it ends, ``events.waited`` is told how (the tracing's seam,
see :mod:`django_redis_coord.core.tracing`).  An uncontended grant never gets that far.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Optional

from .concurrency import in_background, run_to_completion
from .events import Events, held_time
from .exceptions import InvalidLockArgumentType
from .holds import first_time

__all__ = ["Reporter", "Reporting", "check_events", "report_loss"]

logger = logging.getLogger("django_redis_coord")

#: The acquire of this thread (or asyncio task) that waits in line: (the primitive's id, when it
#: queued on the monotonic clock, the refusal's ``pttl`` and ``limit``).  Set by
#: :meth:`Reporter.note_wait`, read when that acquire ends; a note older than the acquire that
#: reads it is an earlier one's, ignored.
_queued: ContextVar[Optional[tuple[int, float, int, Optional[int]]]] = ContextVar("dcoord_queued", default=None)

_METHODS = ("acquired", "contended", "released", "lost", "aacquired", "acontended", "areleased", "alost")


def check_events(events: object, name: object) -> Optional[Events]:
    """``events`` when it is None or has every method of :class:`~django_redis_coord.Events`."""
    if events is not None and not all(callable(getattr(events, method, None)) for method in _METHODS):
        raise InvalidLockArgumentType(
            "events must be a django_redis_coord.Events (or have all its methods)", lock_name=name
        )
    return events  # type: ignore[return-value]


def report_loss(primitive: Any, hold: Any) -> None:
    """Tell ``primitive``'s events of the loss of ``hold``; what they raise is logged, not raised:
    the loss's other consequences (``on_lost``, the release's own error) must not depend on it."""
    try:
        primitive._report_loss(hold)
    except Exception:
        logger.exception("events.lost of %r raised", primitive.name)


def _no_refusal() -> tuple[Optional[int], Optional[int]]:
    return None, None


class Reporter:
    """The calls of one primitive (``owner``: its ``events`` and ``name``) to its ``events`` object;
    nothing when it has none.

    ``subject(hold)``: what ``events`` is told about for ``hold`` (default: the owner; a read-write
    lock: its read or write side).  ``refusal()``: what the owner's latest refused acquire said
    (the holder's remaining ms, the limit in force).  ``in_background``: a loss the watchdog finds
    is told in a task (asyncio) rather than in the thread that finds it.
    """

    __slots__ = ("owner", "subject", "refusal", "in_background")

    def __init__(self, owner: Any, subject: Optional[Callable[[Any], Any]] = None,
                 refusal: Optional[Callable[[], tuple[Optional[int], Optional[int]]]] = None,
                 in_background: bool = False) -> None:
        self.owner = owner
        self.subject: Callable[[Any], Any] = subject if subject is not None else self._owner
        self.refusal = refusal if refusal is not None else _no_refusal
        self.in_background = in_background

    def _owner(self, hold: Any) -> Any:
        return self.owner

    @staticmethod
    def began(hold: Any) -> None:
        """A new hold: when it started (for ``held_time``); its loss not told yet."""
        hold.started = time.monotonic()
        hold.loss_reported = False

    # -- waits (what the tracing hears) ---------------------------------------------------------
    def note_wait(self, refusal: Any) -> None:
        """The waiting path: this acquire found the name taken and waits in line (``refusal``: the
        :class:`~django_redis_coord.core.grants.Grant` that said so).  Nothing without events."""
        if self.owner.events is not None:
            _queued.set((id(self.owner), time.monotonic(), refusal.pttl, refusal.limit))

    def _queued_since(self, started: float) -> Optional[tuple[int, float, int, Optional[int]]]:
        """The note of :meth:`note_wait` when the acquire that began at ``started`` made it."""
        note = _queued.get()
        if note is None or note[0] != id(self.owner) or note[1] < started:
            return None
        return note

    def _tell_waited(self, subject: Any, outcome: str, wait_time: float, fence: Optional[int],
                     pttl: Optional[int], limit: Optional[int]) -> None:
        """``events.waited``, when the events object has it; what it raises is logged."""
        waited = getattr(self.owner.events, "waited", None)
        if waited is None:
            return
        try:
            waited(subject, outcome=outcome, wait_time=wait_time, fence=fence, pttl=pttl, limit=limit)
        except Exception:
            logger.exception("events.waited of %r raised", self.owner.name)

    def _tell_failed(self, started: float, subject: Any) -> tuple[float, Optional[int], Optional[int]]:
        """``waited`` of an acquire that got no hold: ``"timeout"`` when it waited in line, else
        ``"refused"``; returns the wait and what the refusal said, for ``contended``."""
        pttl, limit = self.refusal()
        wait_time = time.monotonic() - started
        outcome = "refused" if self._queued_since(started) is None else "timeout"
        self._tell_waited(subject, outcome, wait_time, None, pttl, limit)
        return wait_time, pttl, limit

    def _tell_waited_acquired(self, hold: Any, started: float) -> None:
        """``waited`` of an acquire that got ``hold`` after waiting in line (nothing when it did not)."""
        note = self._queued_since(started)
        if note is not None:
            self._tell_waited(self.subject(hold), "acquired", hold.started - started, hold.fence, note[2], note[3])

    # -- sync --------------------------------------------------------------------------------------
    def tell_contended(self, started: float, subject: Any = None) -> None:
        events = self.owner.events
        if events is not None:
            subject = self.owner if subject is None else subject
            wait_time, pttl, limit = self._tell_failed(started, subject)
            events.contended(subject, wait_time=wait_time, pttl=pttl, limit=limit)

    def tell_acquired(self, hold: Any, started: float, give_back: Callable[[], Any]) -> None:
        """After a new hold: tell it; when that raises, give the hold back and re-raise."""
        events = self.owner.events
        if events is None:
            return
        self._tell_waited_acquired(hold, started)
        try:
            events.acquired(self.subject(hold), fence=hold.fence, wait_time=hold.started - started)
        except BaseException:
            try:
                give_back()
            except Exception:  # the receiver's error matters more; the TTL bounds the hold
                pass
            raise

    def tell_released(self, fence: Optional[int], held: Optional[float], subject: Any = None) -> None:
        events = self.owner.events
        if events is not None:
            events.released(self.owner if subject is None else subject, fence=fence, held_time=held)

    def tell_lost(self, hold: Any) -> None:
        """Once per hold (from a primitive's ``mark_lost``, or a release that found it gone): the
        sync flavour calls ``lost`` in this thread."""
        events = self.owner.events
        if events is not None and first_time(hold, "loss_reported"):
            events.lost(self.subject(hold), fence=hold.fence, held_time=held_time(hold))

    def tell_lost_now(self, hold: Any) -> None:
        """A release found the hold gone: tell its loss in this thread (once per hold; what the
        receivers raise is logged, as in :meth:`lost`)."""
        self.lost(hold)

    def lost(self, hold: Any) -> None:
        """Tell the loss of ``hold`` (once per hold), in this thread or in the background (see
        ``in_background``); what the receivers raise is logged, not raised: the loss's other
        consequences (``on_lost``, the release's own error) must not depend on it."""
        try:
            if self.in_background:
                self.atell_lost(hold)
            else:
                self.tell_lost(hold)
        except Exception:
            logger.exception("events.lost of %r raised", self.owner.name)

    # -- asyncio -----------------------------------------------------------------------------------
    async def atell_contended(self, started: float, subject: Any = None) -> None:
        events = self.owner.events
        if events is not None:
            subject = self.owner if subject is None else subject
            wait_time, pttl, limit = self._tell_failed(started, subject)
            await events.acontended(subject, wait_time=wait_time, pttl=pttl, limit=limit)

    async def atell_acquired(self, hold: Any, started: float, give_back: Callable[[], Awaitable[Any]]) -> None:
        """The asyncio :meth:`tell_acquired`: the hold is given back even when cancelled meanwhile."""
        events = self.owner.events
        if events is None:
            return
        self._tell_waited_acquired(hold, started)
        try:
            await events.aacquired(self.subject(hold), fence=hold.fence, wait_time=hold.started - started)
        except BaseException:
            try:
                await run_to_completion(give_back())
            except Exception:
                pass
            raise

    async def atell_released(self, fence: Optional[int], held: Optional[float], subject: Any = None) -> None:
        events = self.owner.events
        if events is not None:
            await events.areleased(self.owner if subject is None else subject, fence=fence, held_time=held)

    async def atell_lost_now(self, hold: Any) -> None:
        """A release found the hold gone: its caller awaits the loss's receivers (once per hold;
        what they raise is logged, as in :meth:`lost`)."""
        events = self.owner.events
        if events is not None and first_time(hold, "loss_reported"):
            try:
                await events.alost(self.subject(hold), fence=hold.fence, held_time=held_time(hold))
            except Exception:
                logger.exception("events.alost of %r raised", self.owner.name)

    async def release_told(self, call: Awaitable[Any], fence: Optional[int], held: Optional[float],
                           subject: Any = None, when: Optional[Callable[[Any], bool]] = None) -> Any:
        """``call`` (a release), then ``released`` told when ``when(its result)`` (default: always):
        one coroutine, so that a release finished after its task was cancelled is told too."""
        result = await call
        if when is None or when(result):
            await self.atell_released(fence, held, subject)
        return result

    def atell_lost(self, hold: Any) -> None:
        """The asyncio flavour's loss comes from the watchdog task or a release: scheduled."""
        events = self.owner.events
        if events is not None and first_time(hold, "loss_reported"):
            in_background(events.alost(self.subject(hold), fence=hold.fence, held_time=held_time(hold)))


class Reporting:
    """Mixed into a Redlock: the calls to its ``events`` through methods of its own, each one its
    :class:`Reporter`'s (the lock, the semaphore and the read-write lock hold a ``Reporter``)."""

    events: Optional[Events] = None
    name: Any

    @functools.cached_property
    def _reporter(self) -> Reporter:
        return Reporter(self, self._event_subject, self._refusal)

    _began = staticmethod(Reporter.began)

    def _state(self) -> Any:
        raise NotImplementedError

    @property
    def refused_pttl(self) -> Optional[int]:
        """After a refused acquire by this thread (task): the holder's remaining time in ms as the
        refusal said (``-1``: no expiry; a Redlock: until the other holder's quorum ends, else its
        lease as an upper bound), else ``None``."""
        return self._refusal()[0]

    def _note_refusal(self, pttl: Optional[int], limit: Optional[int] = None) -> None:
        """Keep what the last refused acquire said, with this thread's (task's) hold."""
        self._state().refusal = (pttl, limit)

    def _refusal(self) -> tuple[Optional[int], Optional[int]]:
        """What :meth:`_note_refusal` kept: the holder's remaining ms and the limit in force."""
        refusal: tuple[Optional[int], Optional[int]] = self._state().refusal
        return refusal

    def _event_subject(self, hold: Any) -> Any:
        """What ``events`` is told about for ``hold``: the primitive."""
        return self

    def _note_wait(self, refusal: Any) -> None:
        self._reporter.note_wait(refusal)

    def _tell_contended(self, started: float, subject: Any = None) -> None:
        self._reporter.tell_contended(started, subject)

    def _tell_acquired(self, hold: Any, started: float, give_back: Callable[[], Any]) -> None:
        self._reporter.tell_acquired(hold, started, give_back)

    def _tell_released(self, fence: Optional[int], held: Optional[float], subject: Any = None) -> None:
        self._reporter.tell_released(fence, held, subject)

    def _tell_lost(self, hold: Any) -> None:
        self._reporter.tell_lost(hold)

    def _tell_lost_now(self, hold: Any) -> None:
        report_loss(self, hold)

    async def _atell_contended(self, started: float, subject: Any = None) -> None:
        await self._reporter.atell_contended(started, subject)

    async def _atell_acquired(self, hold: Any, started: float, give_back: Callable[[], Awaitable[Any]]) -> None:
        await self._reporter.atell_acquired(hold, started, give_back)

    async def _atell_released(self, fence: Optional[int], held: Optional[float], subject: Any = None) -> None:
        await self._reporter.atell_released(fence, held, subject)

    async def _atell_lost_now(self, hold: Any) -> None:
        await self._reporter.atell_lost_now(hold)

    async def _release_told(self, call: Awaitable[Any], fence: Optional[int], held: Optional[float],
                            subject: Any = None, when: Optional[Callable[[Any], bool]] = None) -> Any:
        return await self._reporter.release_told(call, fence, held, subject, when)

    def _atell_lost(self, hold: Any) -> None:
        self._reporter.atell_lost(hold)
