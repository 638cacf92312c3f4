# Generated from django_redis_coord/core/redlock/aio.py by `python3 dev.py twins`: edit that file, not this one.
"""Redlock: one lock over N independent Redis masters, held while a majority of them grant it.

>>> import redis                                                   # doctest: +SKIP
>>> from django_redis_coord import Redlock
>>> masters = [redis.Redis(port=p) for p in (6379, 6380, 6381)]
>>> with Redlock(masters, "invoices:close-month", timeout=30) as lock:
...     lock.ensure_valid()              # raises LockLostError once the validity time is over
...     close_month(fence=lock.fence)    # let the resource refuse stale fences

The algorithm (see docs/redlock.md for what it does and does not guarantee):

1. Note the monotonic time, then send the lock script to **all** masters at once (in parallel),
   so one attempt costs the slowest master's round trip, and each master gets ``node_timeout``
   (much smaller than the TTL) to answer.
2. The lock is held when a quorum (``N // 2 + 1``) granted it and the validity time
   ``TTL - elapsed - drift`` (``drift = 1% of the TTL + 2 ms``) is still positive.
3. Otherwise the attempt is undone on every master that may have granted it, and a blocking
   acquire tries again after a random delay (up to ``sleep`` seconds).
4. ``release`` goes to all masters; ``extend`` (and the watchdog's renewal) needs a quorum.

Each master runs the ordinary lock scripts on the keys a :class:`~django_redis_coord.Lock` of the
same name uses.  Each master's batch of commands is one redis-py pipeline on a client of its own,
with no retries: an unreachable master costs at most ``node_timeout`` instead of redis-py's
reconnect back-off.  How all masters are asked at once differs between the halves (a thread pool,
or ``asyncio.gather``: :mod:`django_redis_coord.core.redlock.masters`); so does where a hold lives
(per thread, or per asyncio task; ``thread_local=False`` shares it).  The asyncio twin,
:class:`django_redis_coord.asyncio.Redlock` over ``redis.asyncio`` masters, has the same names,
arguments and behaviour, awaited; the sync module is generated from it (docs/twins.md).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence
from typing import Any, Optional, Union

from .. import watchdog as _watchdog
from ..arguments import Number
from ..events import held_time
from ..exceptions import QuorumUnavailable
from ..holds import Hold
from ..lock.rules import WithBlock
from ..side.sync import follow_up, sleep, worker_name
from .commands import (
    Command,
    accept_grant,
    describe_master,
    fence_of,
    fence_recorded,
    missing_scripts,
    tally_replies,
)
from .masters.sync import Masters, WorkerHold
from .rules import DEFAULT_RETRY_DELAY, DEFAULT_TIMEOUT, RedlockBase, SharedHold

__all__ = ["Redlock", "QuorumUnavailable", "DEFAULT_TIMEOUT", "DEFAULT_RETRY_DELAY"]

logger = logging.getLogger("django_redis_coord")


class _RenewalBatch:
    """What the watchdog's ``client.pipeline()`` returns for a Redlock: renewals of its holds."""

    def __init__(self, owner: Redlock) -> None:
        self.owner = owner
        self.renewals: list[tuple[bytes, int]] = []

    def add(self, token: bytes, ms: int) -> None:
        self.renewals.append((token, ms))

    def execute(self, raise_on_error: bool = False) -> list[Any]:
        return self.owner._renew_many(self.renewals)


class _QuorumClient:
    """``owner.redis`` as the watchdog sees it: its pipelines renew holds on all masters at once."""

    def __init__(self, owner: Redlock) -> None:
        self._owner = weakref.proxy(owner)

    def pipeline(self, transaction: bool = False) -> _RenewalBatch:
        return _RenewalBatch(self._owner)  # type: ignore[arg-type]


class Redlock(WithBlock, RedlockBase):
    """A lock held on a majority of N independent Redis masters (the Redlock algorithm).

    ``Redlock(masters, name, timeout=10.0, sleep=0.2, blocking=True, blocking_timeout=None,
    thread_local=True, raise_on_release_error=True, *, node_timeout=None, label=None,
    auto_renew=False, on_lost=None)``

    * ``masters``: one ``redis.Redis`` client per independent master (not replicas of each other).
    * ``timeout``: the lease in seconds (required: a Redlock always expires).
    * ``sleep``: upper bound of the random delay between two attempts of a blocking acquire.
    * ``node_timeout``: how long each master may take to answer one round (default: 100 ms, at most
      a tenth of ``timeout``; at most a quarter of it when given).

    The methods are those of :class:`~django_redis_coord.Lock`.  ``acquire`` returns False when
    the lock is busy (and ``blocking`` is off or ``blocking_timeout`` ran out) and raises
    :class:`~django_redis_coord.exceptions.QuorumUnavailable` as soon as fewer than a quorum of masters answer.
    """

    def __init__(self, masters: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(masters, name, *args, **kwargs)
        self.local: Any = WorkerHold() if self.thread_local else SharedHold()
        names = [describe_master(master, index) for index, master in enumerate(self.masters)]
        self._masters = Masters(self.masters, self.node_timeout, names)
        #: What the watchdog talks to: the masters, as one client (``_QuorumClient``).
        self.redis = _QuorumClient(self)

    def _fan_out(self, batches: Sequence[Sequence[Command]]) -> tuple[float, list[list[Any]]]:
        """Send ``batches[i]`` (as one pipeline) to master ``i``, all masters in parallel.

        Returns the instant before the first send and, per master, one reply per command; a master
        that fails or does not answer within ``node_timeout`` gets the error as each of its replies.
        Script calls answered with NOSCRIPT (a restarted master) are sent again, after loading
        their scripts, in one more round with its own budget.
        """
        started = time.monotonic()
        results = self._masters.ask(batches, load=False)
        retry = [missing_scripts(batch, replies) for batch, replies in zip(batches, results)]
        if any(retry):
            missing = [[batch[i] for i in indexes] for batch, indexes in zip(batches, retry)]
            again = self._masters.ask(missing, load=True)
            for replies, indexes, answers in zip(results, retry, again):
                for index, answer in zip(indexes, answers):
                    replies[index] = answer
        return started, results

    def _everywhere(self, command: Command) -> tuple[float, list[Any]]:
        started, replies = self._fan_out(self.everywhere(command))
        return started, [reply[0] for reply in replies]

    # -- acquire -----------------------------------------------------------------------------
    def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock on a quorum of masters; True once held, False when busy.

        A blocking call retries after a random delay (uniform up to ``sleep``, never past the
        holder's remaining lease or ``blocking_timeout``).  Raises
        :class:`~django_redis_coord.exceptions.QuorumUnavailable` when fewer than a quorum of
        masters answer an attempt.
        """
        started = time.monotonic()
        sleep, blocking, stop_at, raw = self.acquire_arguments(sleep, blocking, blocking_timeout, token)
        worker = worker_name()
        while True:
            try:
                hint = self._attempt(raw, worker)
            except QuorumUnavailable:
                raise  # already undone
            except BaseException:
                # Interrupted or cancelled mid-attempt: give back whatever it may have been granted.
                self._undo_quietly(raw)
                raise
            if hint is True:
                self._tell_acquired(self._state(), started, self._release_call)
                return True
            delay = self.retry_delay(hint, sleep, stop_at) if blocking else None
            if delay is None:
                self._tell_contended(started)
                return False
            _pause(delay)

    def _attempt(self, token: bytes, worker: str) -> Union[bool, float, None]:
        """One round of the algorithm: True when held, else a hint (seconds until the other
        holder's lease ends somewhere, or None)."""
        started, replies = self._everywhere(self.acquire_command(token, worker))
        grants = tally_replies(replies, accept_grant, range(len(self.masters)))
        if len(grants.ok) >= self.quorum:
            fence, synced, lagging = fence_of(grants)
            if lagging:
                _, recorded = self._fan_out(self.only(lagging, [self.fence_command(token, fence)]))
                synced += fence_recorded(lagging, recorded)
            deadline = self.held_until(started, grants, synced)
            if deadline is not None:
                hold = self._own(token, fence, deadline)
                if self.auto_renew:
                    _watchdog.sync_watchdog().register(self, hold, token)
                return True
        self._undo(token, set(grants.refused))
        return self.failed_attempt(grants)

    def _undo(self, token: bytes, skip: set[int]) -> None:
        """Release an attempt everywhere it may have been granted (all masters but ``skip``,
        which clearly refused it)."""
        undo = [i for i in range(len(self.masters)) if i not in skip]
        if undo:
            self._fan_out(self.only(undo, [self.release_command(token)]))

    def _undo_quietly(self, token: bytes) -> None:
        try:
            self._undo(token, set())
        except Exception:  # the interruption matters more; the TTL ends what is left
            pass

    # -- inspection ----------------------------------------------------------------------------
    def locked(self) -> bool:
        """True when one token holds the lock on a quorum of masters."""
        return self.held_by_one(self.tokens_of((self._everywhere(self.get_command()))[1], "check the lock"))

    def owned(self) -> bool:
        """True when this thread's (task's) token holds the lock on a quorum of masters."""
        token = self._state().token
        if token is None:
            return False
        return self.held_by(self.tokens_of((self._everywhere(self.get_command()))[1], "check the lock"), token)

    _report_loss = RedlockBase._tell_lost

    def _mark_lost(self, hold: Hold) -> None:
        """Called by the watchdog when a hold could not be renewed on a quorum in time."""
        follow_up(self.mark_lost(hold))

    # -- release / extend ------------------------------------------------------------------------
    def release(self) -> None:
        """Release the lock on every master; raises if it was not held on a quorum any more.  In
        asyncio, it completes (and is told) even if its task is cancelled meanwhile (as
        :meth:`django_redis_coord.asyncio.Lock.release`)."""
        self._release_call()

    def _release_call(self) -> None:
        """The call that releases this thread's (task's) hold, needing nothing from its caller
        (see :meth:`django_redis_coord.asyncio.Lock._release_call`)."""
        hold, token = self.hold_to_release()
        fence, held = hold.fence, held_time(hold)
        if self.auto_renew:
            _watchdog.sync_watchdog().unregister(self, hold)
        return self._release_hold(hold, token, fence, held)

    def _release_hold(
        self, hold: Hold, token: bytes, fence: Optional[int], held: Optional[float]
    ) -> None:
        self.released(hold, (self._everywhere(self.release_command(token)))[1])
        self._tell_released(fence, held)

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to each master's remaining lease (or set it, with
        ``replace_ttl``); needs a quorum.  Masters that lost the hold meanwhile (a restart) take
        it again when the quorum still has it."""
        hold, command = self.hold_to_extend(additional_time, replace_ttl)
        sent_at, replies = self._everywhere(command)
        repair = self.extended(hold, sent_at, replies)
        if self.auto_renew:  # a shorter deadline must not wait for the watchdog's next look
            _watchdog.sync_watchdog().look_again()
        if repair and hold.token is not None:
            self._repair(hold.token, repair)
        return True

    def reacquire(self) -> bool:
        """Reset the lease to ``timeout`` on every master (needs a quorum)."""
        self.check_reacquire()
        return self.extend(self.timeout, replace_ttl=True)

    def _repair(self, token: bytes, nodes: list[int]) -> None:
        self._fan_out(self.only(nodes, self.repair_commands(token, worker_name())))

    def _renew_many(self, renewals: list[tuple[bytes, int]]) -> list[Any]:
        """The watchdog's batch: renew each hold on all masters in one round."""
        _, replies = self._fan_out([self.renewal_commands(renewals)] * len(self.masters))
        outcomes = []
        for offset, (token, _) in enumerate(renewals):
            outcome, repair = self.renewal_outcome(replies, offset)
            if repair:
                self._repair(token, repair)
            outcomes.append(outcome)
        return outcomes


def _pause(seconds: float) -> None:
    """Sleep between two attempts (``acquire``'s ``sleep`` argument hides the side's name)."""
    sleep(seconds)
