"""What the sync and asyncio leaders share: their arguments, the term bookkeeping and the holder
record that marks a leader's lock.  Nothing in here talks to Redis; :mod:`django_redis_coord.core.leader.sync`
and :mod:`django_redis_coord.core.leader.aio` do, through the :class:`~django_redis_coord.Lock` each
leader holds while it leads.

A term is one hold of that lock, from its grant to its end (lost, or resigned): the term number is
the hold's fence, so terms grow strictly, and a resource that refuses a term lower than the highest
it has seen refuses a deposed leader's writes.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Optional, Union

from ..arguments import Number
from ..exceptions import InvalidLockArgumentType
from ..queue.rules import DEFAULT_WAITER_LEASE

__all__ = ["CAMPAIGN_ROUND", "DEFAULT_LEASE", "LeaderBase", "LeaderHold", "RETRY_PAUSE", "ROLE", "TermCallback"]

logger = logging.getLogger("django_redis_coord")

#: A lease when none is given (seconds): a dead leader is replaced within it.
DEFAULT_LEASE = 10.0
#: A sync campaign waits in line in rounds of this many seconds (leaving the queue and joining it
#: again between rounds), so that a resign from another thread stops it within one round.
CAMPAIGN_ROUND = 1.0
#: After a campaign round failed (Redis unreachable for longer than a waiter rides out), wait
#: this long before the next one.
RETRY_PAUSE = 1.0
#: The ``role`` field of a leader's holder record (``HolderInfo.extra["role"]`` in the listing).
ROLE = "leader"

#: ``on_elected`` / ``on_revoked``: called with the term (the asyncio twin also awaits coroutines).
TermCallback = Callable[[int], object]


#: Every leader of this process, for the fork hook (:func:`_after_fork_in_child`).
_leaders: weakref.WeakSet[LeaderBase] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child leads nothing: the parent's term, and its campaign, stay with the parent.
    The child's copies of the parent's leaders start afresh (see :meth:`LeaderBase._forked`)."""
    for leader in list(_leaders):
        leader._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def leader_label(label: Optional[str]) -> str:
    """The holder label of a leader's lock: ``leader``, or ``leader: <label>``."""
    if label is not None and not isinstance(label, str):
        raise InvalidLockArgumentType("label must be a str")
    return f"{ROLE}: {label}" if label else ROLE


class LeaderHold:
    """Mixed into the lock a leader holds: its holder record says ``"role": "leader"`` (the
    listing then shows the hold's fence as the leader's term)."""

    holder_fields: Optional[Mapping[str, Any]] = MappingProxyType({"role": ROLE})


class LeaderBase:
    """Arguments and term bookkeeping common to :class:`~django_redis_coord.core.leader.sync.Leader` and its
    asyncio twin.

    The term state is read by any thread (``is_leader``) and changed by the campaign, by the
    watchdog's loss signal and by ``resign``; ``_mutex`` keeps each change whole, and each term
    begins once and ends once, so each callback fires once per term.
    """

    #: The lock held while leading (a sync or an asyncio :class:`~django_redis_coord.Lock`).
    lock: Any

    def __init__(
        self,
        client: Any,
        name: Union[str, bytes],
        lease: Number = DEFAULT_LEASE,
        *,
        label: Optional[str] = None,
        on_elected: Optional[TermCallback] = None,
        on_revoked: Optional[TermCallback] = None,
        recampaign: bool = True,
        waiter_lease: Number = DEFAULT_WAITER_LEASE,
    ) -> None:
        for what, callback in (("on_elected", on_elected), ("on_revoked", on_revoked)):
            if callback is not None and not callable(callback):
                raise InvalidLockArgumentType(f"{what} must be a callable (called with the term) or None",
                                              lock_name=name)
        if not isinstance(recampaign, bool):
            raise InvalidLockArgumentType("recampaign must be True or False", lock_name=name)
        self.lock = self._make_lock(client, name, timeout=lease, thread_local=False, label=leader_label(label),
                                    auto_renew=True, on_lost=self._lost, waiter_lease=waiter_lease)
        self.name = name
        self.lease = lease
        self.on_elected = on_elected
        self.on_revoked = on_revoked
        self.recampaign = recampaign
        self._mutex = threading.Lock()
        self._term: Optional[int] = None
        self._in_term = False
        #: Set by ``resign``: the campaign stops, and a grant that arrives now is given back.
        self._stopping = False
        self._new_campaign_state()
        _leaders.add(self)

    def _forked(self) -> None:
        """In a forked child: this copy neither leads nor campaigns (the parent's term goes on in
        the parent), so ``is_leader`` is False, ``term`` is ``None`` and no ``on_revoked`` runs
        here; ``campaign()`` in the child waits in line for a term of its own.  New locks too: a
        thread of the parent may have held one at the fork."""
        self._mutex = threading.Lock()
        self._term = None
        self._in_term = False
        self._stopping = False
        self._new_campaign_state()

    def _new_campaign_state(self) -> None:
        """Set up what the campaign of this flavour (a thread, or a task) keeps."""
        raise NotImplementedError

    def _make_lock(self, client: Any, name: Union[str, bytes], **options: Any) -> Any:
        """The lock of this flavour (sync or asyncio), marked as a leader's."""
        raise NotImplementedError

    def _lost(self, lock: Any) -> Any:
        """The lock's ``on_lost``: the watchdog found the hold ended (its deadline passed, or the
        key is gone or someone else's)."""
        raise NotImplementedError

    # -- what callers read -------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """True while this object leads: elected, not resigned, and the hold's local deadline
        (send instant + lease - drift, on the monotonic clock) has not passed.  Local, no round
        trip: a process paused past its lease reads False the moment it runs again."""
        return self._in_term and self.lock.valid

    @property
    def term(self) -> Optional[int]:
        """The term of the current or latest leadership of this object (``None`` before its first
        election).  It stays set after the term ended: a write made with it is then refused by a
        resource that has seen a newer term.  Check :attr:`is_leader` before acting."""
        return self._term

    # -- term bookkeeping --------------------------------------------------------------------
    def _begin_term(self) -> Optional[int]:
        """The hold just granted starts a term (its number), unless a resign came first or the
        hold is already gone (then ``None``: the caller gives it back, or campaigns again)."""
        with self._mutex:
            if self._stopping or not self.lock.valid:
                return None
            self._term = self.lock.fence
            self._in_term = True
            return self._term

    def _end_term(self) -> Optional[int]:
        """End the current term; its number, or ``None`` when no term was running (it ended
        already: a term ends once, whoever gets here first)."""
        with self._mutex:
            if not self._in_term:
                return None
            self._in_term = False
            return self._term

    def _failed(self, what: str, term: int) -> None:
        """Log the error of a callback (call from its ``except`` clause): a callback that fails
        stops neither the campaign nor the other callbacks."""
        logger.exception("%s(%s) of leader %r failed", what, term, self.name)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} name={self.name!r} lease={self.lease!r}>"
