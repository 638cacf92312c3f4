"""The asyncio twin of :class:`django_redis_coord.core.leader.sync.Leader`, over ``redis.asyncio``.

Same names, arguments and behaviour, ``await``ed: the campaign is a task of the running event loop
(use one event loop per leader), ``on_elected`` / ``on_revoked`` may be coroutine functions (they
are awaited), and ``async with Leader(...)`` campaigns in the background and resigns at the end of
the block.  A campaign task cancelled while leading (``asyncio.run()`` cancels what is left when
its main coroutine ends) resigns on its way out; there is no ``atexit`` hook for asyncio.
"""

from __future__ import annotations

import asyncio
import inspect
from types import TracebackType
from typing import Any, Optional, Union

from ..arguments import Number, check_number
from ..concurrency import in_background
from ..exceptions import LockError
from ..lock.aio import Lock
from .rules import RETRY_PAUSE, LeaderBase, LeaderHold, TermCallback, logger

__all__ = ["Leader"]


class _LeaderLock(LeaderHold, Lock):
    """The lock a leader holds (its holder record says ``"role": "leader"``)."""


async def _call(callback: TermCallback, term: int) -> None:
    result = callback(term)
    if inspect.isawaitable(result):
        await result


class Leader(LeaderBase):
    """Asyncio leader election; see :class:`django_redis_coord.core.leader.sync.Leader`.

    ``on_elected(term)`` runs in the campaign task; ``on_revoked(term)`` in a task of its own for a
    loss (started by the watchdog's loss signal, on the event loop), in the resigning task for a
    resign.
    """

    lock: Lock  # a _LeaderLock: a Lock whose holder record says it is the leader's

    def _new_campaign_state(self) -> None:
        self._task: Optional[asyncio.Future[None]] = None
        self._in_line = False  # the campaign task waits in the queue: a resign cancels that wait
        self._elected = asyncio.Event()  # set from on_elected's return to the term's end
        self._term_over = asyncio.Event()
        #: Clear while on_elected runs: a loss or a resign waits for it (on_revoked comes after).
        self._settled = asyncio.Event()
        self._settled.set()

    def _make_lock(self, client: Any, name: Union[str, bytes], **options: Any) -> _LeaderLock:
        return _LeaderLock(client, name, **options)

    # -- public API ----------------------------------------------------------------------------
    async def campaign(self, blocking: bool = True, blocking_timeout: Optional[Number] = None) -> bool:
        """Start campaigning (unless already), and with ``blocking`` wait until elected; see
        :meth:`django_redis_coord.Leader.campaign`."""
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=self.name)
        self._start()
        if blocking and not self._elected.is_set():
            # asyncio.wait, not wait_for: wait_for can swallow a cancellation (Python 3.10/3.11).
            waiter = asyncio.ensure_future(self._elected.wait())
            try:
                await asyncio.wait({waiter}, timeout=blocking_timeout)
            finally:
                waiter.cancel()
        return self.is_leader

    async def resign(self) -> None:
        """Stop campaigning; if leading, await ``on_revoked(term)`` and release (the next
        contender in line is elected at once); returns once the campaign task ended."""
        with self._mutex:
            self._stopping = True
        task = self._task
        inside = task is not None and task is asyncio.current_task()
        if not inside:
            await self._settled.wait()
        term = self._end_term()
        self._elected.clear()
        if term is not None:
            await self._revoked(term)
            await self._give_back()
        self._term_over.set()
        if task is not None and not inside and not task.done():
            if self._in_line:
                task.cancel()  # the acquire leaves the queue (and gives back a hold handed over meanwhile)
            await asyncio.wait({task})

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
    def _start(self) -> None:
        with self._mutex:
            self._stopping = False
        task = self._task
        if task is None or task.done():
            self._task = in_background(self._campaign())

    async def _campaign(self) -> None:
        """Wait in line, lead until the term ends, and again (``recampaign``) until resigned."""
        try:
            while not self._stopping:
                self._term_over.clear()
                self._in_line = True
                try:
                    granted = await self.lock.acquire(blocking=True)
                except Exception:  # Redis unreachable for longer than a waiter rides out
                    logger.warning("Campaign of leader %r failed; trying again in %s s", self.name, RETRY_PAUSE,
                                   exc_info=True)
                    await self._pause(RETRY_PAUSE)
                    continue
                finally:
                    self._in_line = False
                if granted and await self._lead() and not self.recampaign:
                    break
        finally:
            term = self._end_term()  # cancelled while leading (the loop is shutting down): step down
            if term is not None:
                self._elected.clear()
                await self._revoked(term)
                await self._give_back()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a resign comes."""
        waiter = asyncio.ensure_future(self._term_over.wait())
        try:
            await asyncio.wait({waiter}, timeout=seconds)
        finally:
            waiter.cancel()

    async def _lead(self) -> bool:
        """A hold was granted: run its term until it ends (True), or give the hold back after a
        resign, or find it already lost (False)."""
        self._settled.clear()
        try:
            term = self._begin_term()
            if term is None:  # resigned meanwhile (give it back), or already lost (campaign again)
                if self._stopping:
                    await self._give_back()
                return False
            try:
                if self.on_elected is not None:
                    await _call(self.on_elected, term)
            except Exception:
                self._failed("on_elected", term)
            if self.is_leader and self.term == term:
                self._elected.set()
        finally:
            self._settled.set()
        await self._term_over.wait()
        return True

    async def _lost(self, lock: Any) -> None:
        """The watchdog's loss signal (a task of its own): end the term, await ``on_revoked``,
        then let the campaign go on."""
        await self._settled.wait()
        term = self._end_term()
        if term is None:  # the term already ended (a resign)
            return
        self._elected.clear()
        await self._revoked(term)
        self._term_over.set()

    async def _revoked(self, term: int) -> None:
        try:
            if self.on_revoked is not None:
                await _call(self.on_revoked, term)
        except Exception:
            self._failed("on_revoked", term)

    async def _give_back(self) -> None:
        try:
            await self.lock.release()
        except LockError:
            pass
