"""Leader election: one of N processes leads, the others wait in line to take over.

A :class:`Leader` is a :class:`~django_redis_coord.Lock` held for as long as its holder leads:

* ``campaign()`` starts a background campaign (a thread; in asyncio, a task) that waits in the
  lock's FIFO queue; the hold it gets is renewed by the watchdog (``auto_renew``) every ``lease / 3``;
* each hold is a **term**, numbered by the hold's fence (strictly growing): pass it to what the
  leader writes, so that a resource can refuse a deposed leader (see ``fenced_set``);
* when the hold ends without a resign (the watchdog's loss signal: renewals did not come back
  before the local deadline, or the key was taken over) ``on_revoked(term)`` fires and the
  campaign waits in line again, unless ``recampaign=False``;
* ``resign()`` (also at interpreter exit, and at the end of a ``with`` block) runs
  ``on_revoked(term)``, then releases: the lock goes at once to the next contender in line.

The asyncio twin (:class:`django_redis_coord.asyncio.Leader`) has the same names, arguments and
behaviour, awaited: the campaign is a task of the running event loop (use one event loop per
leader), ``on_elected`` / ``on_revoked`` may be coroutine functions (they are awaited), and
``async with Leader(...)`` campaigns in the background and resigns at the end of the block.  A
campaign task cancelled while leading (``asyncio.run()`` cancels what is left when its main
coroutine ends) resigns on its way out; there is no ``atexit`` hook for asyncio.  The sync module
is generated from the asyncio one (docs/twins.md); docs/leaders.md has the guarantees and a recipe.
"""

from __future__ import annotations

import threading
import weakref
from types import TracebackType
from typing import Any, Optional, Union

from ..arguments import Number, check_number
from ..exceptions import LockError
from ..lock.aio import Lock
from ..side.aio import INTERRUPTIBLE, Event, alive, at_exit, call, current_worker, interrupt, join, start, wait_event
from .rules import CAMPAIGN_ROUND, RETRY_PAUSE, LeaderBase, LeaderHold, logger

__all__ = ["Leader"]


class _LeaderLock(LeaderHold, Lock):
    """The lock a leader holds (its holder record says ``"role": "leader"``)."""


#: Leaders campaigning in this process: resigned at interpreter exit (in asyncio, a campaign task
#: resigns when its event loop cancels it instead).
_campaigning: weakref.WeakSet[Leader] = weakref.WeakSet()


async def _resign_all() -> None:
    """At interpreter exit, every campaigning leader resigns: its successor takes over at once
    instead of after the lease."""
    for leader in list(_campaigning):
        try:
            await leader.resign()
        except Exception:  # Redis may be gone by now: the lease ends the term anyway
            logger.warning("Leader %r could not resign at exit; its lease ends its term", leader.name,
                           exc_info=True)


at_exit(_resign_all)


class Leader(LeaderBase):
    """Leader election among processes: ``campaign()``, ``is_leader``, ``term``, ``resign()``.

    ``Leader(client, name, lease=10.0, *, label=None, on_elected=None, on_revoked=None,
    recampaign=True, waiter_lease=2.0)``: ``lease`` is the TTL of the leader's hold (renewed every
    ``lease / 3``; a dead leader is replaced within it); ``on_elected(term)`` runs in the campaign
    (thread or task) once elected, ``on_revoked(term)`` once per term when it ends (for a loss, on
    the watchdog's callback worker, or in asyncio a task of its own; for a resign, in the resigning
    thread or task); ``label`` is shown to operators (``leader: <label>``).  ``with Leader(...) as
    leader:`` campaigns in the background and resigns at the end of the block.
    """

    lock: Lock  # a _LeaderLock: a Lock whose holder record says it is the leader's

    def _new_campaign_state(self) -> None:
        _campaigning.discard(self)  # not campaigning (yet, or in a forked child: see _forked)
        self._control = threading.RLock()  # starting and stopping the campaign, one at a time
        self._worker: Any = None  # the campaign: a thread, or a task
        self._in_line = False  # the campaign waits in the queue: a resign interrupts that wait (a task)
        self._elected = Event()  # set from on_elected's return to the term's end
        self._term_over = Event()
        #: Clear while on_elected runs: a loss or a resign waits for it (on_revoked comes after).
        self._settled = Event()
        self._settled.set()
        #: Clear while a loss's on_revoked runs: the next term waits for it (on_elected comes after).
        self._revoking_done = Event()
        self._revoking_done.set()

    def _make_lock(self, client: Any, name: Union[str, bytes], **options: Any) -> _LeaderLock:
        return _LeaderLock(client, name, **options)

    # -- public API ----------------------------------------------------------------------------
    async def campaign(self, blocking: bool = True, blocking_timeout: Optional[Number] = None) -> bool:
        """Start campaigning (unless already), and with ``blocking`` wait until elected.

        Returns :attr:`~django_redis_coord.Leader.is_leader`: True once elected and ``on_elected``
        returned; False when not ``blocking`` and not leader yet, or when ``blocking_timeout``
        seconds passed first.  The campaign goes on in the background either way, until
        :meth:`resign`.
        """
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=self.name)
        await self._start()
        if blocking and not self._elected.is_set():
            await wait_event(self._elected, blocking_timeout)
        return self.is_leader

    async def resign(self) -> None:
        """Stop campaigning; if leading, run ``on_revoked(term)`` and release, which hands the
        lead to the next contender in line at once.  Returns once the campaign stopped (a thread
        within ``CAMPAIGN_ROUND`` seconds and a round trip when it was waiting in line)."""
        with self._control:
            with self._mutex:
                self._stopping = True
            _campaigning.discard(self)
            worker = self._worker
        inside = worker is not None and worker is current_worker()
        if not inside:
            await wait_event(self._settled, None)
        term = self._end_term()
        self._elected.clear()
        if term is not None:
            await self._revoked(term)
            await self._give_back()
        self._term_over.set()
        if worker is not None and not inside and alive(worker):
            if self._in_line:
                interrupt(worker)  # the acquire leaves the queue (and gives back a hold handed over meanwhile)
            await join(worker, CAMPAIGN_ROUND + self.lease)

    async def __aenter__(self) -> Leader:
        await self.campaign(blocking=False)
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self.resign()

    # -- the campaign ----------------------------------------------------------------------------
    async def _start(self) -> None:
        """Start the campaign, unless it runs (waiting first for one a resign stops)."""
        while True:
            with self._control:
                worker = self._worker
                if worker is None or not alive(worker):
                    with self._mutex:
                        self._stopping = False
                    self._worker = start(self._campaign, f"dcoord-leader {self.name!r}")
                    _campaigning.add(self)
                    return
                if not self._stopping or worker is current_worker():
                    # Running, or a callback in the campaign resigned and campaigns again: the
                    # campaign goes on (it looks at _stopping before each round).
                    with self._mutex:
                        self._stopping = False
                    _campaigning.add(self)
                    return
            await join(worker, CAMPAIGN_ROUND + self.lease)  # a resign stops it within a round

    async def _campaign(self) -> None:
        """Wait in line, lead until the term ends, and again (``recampaign``) until resigned."""
        try:
            while not self._stopping:
                self._term_over.clear()
                self._in_line = True
                # A thread waits in rounds, so that a resign from another thread stops it.
                rounds = None if INTERRUPTIBLE else CAMPAIGN_ROUND
                try:
                    granted = await self.lock.acquire(blocking=True, blocking_timeout=rounds)
                except Exception:  # Redis unreachable for longer than a waiter rides out
                    logger.warning("Campaign of leader %r failed; trying again in %s s", self.name, RETRY_PAUSE,
                                   exc_info=True)
                    await wait_event(self._term_over, RETRY_PAUSE)  # a resign cuts it short
                    continue
                finally:
                    self._in_line = False
                if granted and await self._lead() and not self.recampaign:
                    break
        finally:
            term = self._end_term()  # stopped while leading (a task cancelled at the loop's end): step down
            if term is not None:
                self._elected.clear()
                await self._revoked(term)
                await self._give_back()

    async def _lead(self) -> bool:
        """A hold was granted: run its term until it ends (True), or give the hold back after a
        resign, or find it already lost (False)."""
        await wait_event(self._revoking_done, None)  # the last term's on_revoked returned
        self._settled.clear()
        try:
            term = self._begin_term()
            if term is None:  # resigned meanwhile (give it back), or already lost (campaign again)
                if self._stopping:
                    await self._give_back()
                return False
            try:
                if self.on_elected is not None:
                    await call(self.on_elected, term)
            except Exception:
                self._failed("on_elected", term)
            if self.is_leader and self.term == term:
                self._elected.set()
        finally:
            self._settled.set()
        await wait_event(self._term_over, None)
        return True

    async def _lost(self, lock: Any) -> None:
        """The watchdog's loss signal (on its callback worker; in asyncio, a task of its own): end
        the term, run ``on_revoked``, then let the campaign go on."""
        await wait_event(self._settled, None)
        self._revoking_done.clear()
        try:
            term = self._end_term()
            if term is None:  # the term already ended (a resign)
                return
            self._elected.clear()
            await self._revoked(term)
        finally:
            self._revoking_done.set()
        self._term_over.set()

    async def _revoked(self, term: int) -> None:
        try:
            if self.on_revoked is not None:
                await call(self.on_revoked, term)
        except Exception:
            self._failed("on_revoked", term)

    async def _give_back(self) -> None:
        """Release the hold (it may be gone already: then there is nothing to give back)."""
        try:
            await self.lock.release()
        except LockError:
            pass
