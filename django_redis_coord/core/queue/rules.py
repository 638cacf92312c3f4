"""What the queued primitives (locks, semaphores, read-write locks; sync and asyncio) share:
settings, key layout, the arguments and replies of their scripts, the rules of waiting in line
(:class:`QueuedBase`), and the acquires of this process in flight (:class:`InFlight`).

Nothing in here talks to Redis, and nothing here knows a family: each family's module composes a
:class:`~django_redis_coord.core.queue.aio.Line` (the wait in line, sync or asyncio), a
:class:`~django_redis_coord.core.reporting.Reporter` and its holds.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

from ..arguments import Number, check_max_hold, check_number, drift, to_ms
from ..events import Events
from ..exceptions import InvalidLockArgument, InvalidLockArgumentType, LockError, NameKindConflict
from ..grants import Grant
from ..holds import capped_ms, first_time
from ..keys import KeySet, cacheable, encode_name, keys_for
from ..reporting import Reporter, check_events
from ..scripts import queue_script

__all__ = [
    "InFlight", "QueuedBase", "DEFAULT_WAITER_LEASE", "GIVE_BACK_TRIES", "META_RETENTION_MS", "NO_REPLY", "OWN_TOKEN",
]

#: How long a queued waiter stays in the queue without refreshing its place (ms).  A waiter that
#: dies is skipped once this lapses; a live one refreshes three times per lease.
DEFAULT_WAITER_LEASE = 2.0
#: How long the fence counter and holder metadata outlive the last hold of a name (ms).
META_RETENTION_MS = 24 * 3600 * 1000

_HOSTNAME = socket.gethostname()
_INFO_CACHE: dict[tuple, str] = {}
#: How many times the give-back of an interrupted acquire (``Line.abandon``) is tried when an
#: exception interrupts it in turn (a signal that comes again): each try is one script, safe to
#: run again, that leaves the queue and releases what the token holds.
GIVE_BACK_TRIES = 3
#: The ``reply_to`` of an acquire that does not wait (see :meth:`QueuedBase.acquire_args`).
NO_REPLY = (b"", 0)
#: Added to an acquire's mode when the library made the token for that very call (see lock_acquire.lua).
OWN_TOKEN = 4


class InFlight:
    """The blocking acquires of this process that are queued or about to queue, per name: from
    the moment an acquire's try is refused (or skipped) until the acquire returns (granted,
    refused at its deadline, or stopped by an exception or a cancellation).

    A blocking acquire that finds one of them on its name skips the try and joins the queue with
    its first call: a try that is refused and followed by a queueing call would take its place in
    the queue after acquires that came later (their calls go out over other connections of the
    pool, and replies come back in whatever order the sockets are read), so arrival order would
    not be queue order.  An acquire that finds none tries first, as an uncontended one does: a
    name taken only by the tries of concurrent readers (or permits of a semaphore) that succeed
    never sets up waiting.

    Each acquire is counted with a ticket of its own, so that leaving is exact wherever an
    exception lands (leaving twice, or without having entered, changes nothing).  A forked child
    starts with nothing in flight: its parent's acquires are not its own.  Each side (threads,
    asyncio) keeps one (:mod:`django_redis_coord.core.queue.sync`, :mod:`django_redis_coord.core.queue.aio`).
    """

    def __init__(self) -> None:
        self._forked()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._by_name: dict[bytes, set[object]] = {}
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork

    def busy(self, name: bytes) -> bool:
        """Whether an acquire of this process is queued or about to queue on ``name`` (one
        lookup, no lock: the uncontended path's only cost; a stale answer costs at most order)."""
        return name in self._by_name

    def enter(self, name: bytes, ticket: object) -> None:
        """Count ``ticket`` on ``name``."""
        with self._lock:
            tickets = self._by_name.get(name)
            if tickets is None:
                self._by_name[name] = {ticket}
            else:
                tickets.add(ticket)

    def leave(self, name: bytes, ticket: object) -> None:
        """``ticket`` is no longer in flight on ``name``."""
        with self._lock:
            tickets = self._by_name.get(name)
            if tickets is not None:
                tickets.discard(ticket)
                if not tickets:
                    del self._by_name[name]

    def count(self, name: bytes) -> int:
        """How many acquires of this process are queued or about to queue on ``name``."""
        with self._lock:
            return len(self._by_name.get(name, ()))


class QueuedBase:
    """What every queued primitive (a lock, a semaphore, a read-write lock) shares: settings,
    keys, the arguments of its scripts, the rules of waiting in line and the watchdog's view of a hold.

    A family's rules (``LockBase``, ``SemaphoreBase``, ``RWLockBase``) name its scripts and the kind
    of its keys; the family's classes (sync and asyncio) compose what talks to Redis and waits
    (:meth:`_compose`): ``line`` (the wait in line), ``report`` (the calls to ``events``) and
    ``local`` (its holds), and name their ``side`` (:mod:`django_redis_coord.core.side`).
    """

    kind = "lock"
    #: What one hold is called in messages.
    noun = "lock"
    #: The kind part of the side keys (see :func:`django_redis_coord.core.keys.keys_for`).
    key_kind = b"lock"
    #: The registry of Lua scripts for this flavour of client (sync or asyncio).
    scripts: Any = None
    acquire_script = "lock_acquire"
    cancel_script = "lock_cancel"
    extend_script = "lock_extend"
    #: Arguments the release and extend scripts take after the common ones.
    retention_args: tuple = (META_RETENTION_MS,)
    #: Arguments the acquire scripts take after :attr:`acquire_setting`.
    acquire_tail: tuple = ()
    #: The 9th argument of the acquire scripts (a lock: metadata retention; a semaphore: its limit).
    acquire_setting: Any = ""
    #: The view the holder info names (``@locked`` sets the view's dotted path).
    view: Optional[str] = None
    #: More fields of the holder record, shown to operators as ``HolderInfo.extra``: what the
    #: hold is for (a leader's ``role``, a task's name and key, ...).  JSON values; ``host``,
    #: ``pid``, ``thread``, ``label`` and ``view`` are the primitive's own and cannot be replaced.
    holder_fields: Optional[Mapping[str, Any]] = None
    #: What differs between a thread and a task (:mod:`django_redis_coord.core.side`), named by each family's class.
    side: Any = None
    #: The hand-over hook: when set, the acquire and release calls of a lock go through it (see
    #: :mod:`django_redis_coord.core.lock.handover`).
    hand_over: Any = None
    #: The calls to ``events`` (see :meth:`_compose`).
    report: Reporter
    #: The wait in line (see :meth:`_compose`).
    line: Any

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes],
        timeout: Optional[Number],
        blocking: bool,
        blocking_timeout: Optional[Number],
        *,
        label: Optional[str],
        auto_renew: bool,
        on_lost: Optional[Callable[[Any], Any]],
        raise_on_release_error: bool,
        waiter_lease: Number,
        events: Optional[Events] = None,
        max_hold: Optional[Number] = None,
    ) -> None:
        raw = encode_name(name)
        check_number("timeout", timeout, allow_none=True, positive=True, lock_name=name)
        self.check_settings(name, timeout)
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=name)
        check_number("waiter_lease", waiter_lease, allow_none=False, positive=True, lock_name=name)
        if not isinstance(auto_renew, bool):
            raise InvalidLockArgumentType("auto_renew must be True or False", lock_name=name)
        if auto_renew and timeout is None:
            raise InvalidLockArgument("auto_renew needs a timeout to renew", lock_name=name)
        check_max_hold(max_hold, timeout, auto_renew, name)
        if on_lost is not None and not callable(on_lost):
            raise InvalidLockArgumentType("on_lost must be a callable (called with the lock) or None", lock_name=name)
        if label is not None and not isinstance(label, str):
            raise InvalidLockArgumentType("label must be a str", lock_name=name)
        self.redis = redis
        self.name: Any = name
        self.timeout = timeout
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.label = label
        self.auto_renew = auto_renew
        self.on_lost = on_lost
        self.max_hold = max_hold
        self.events = check_events(events, name)
        self.raise_on_release_error = raise_on_release_error
        self.waiter_lease = waiter_lease
        self.keys: KeySet = keys_for(raw, self.key_kind)
        self.member = self.key_kind + b":" + raw
        self._ttl_ms = to_ms(timeout) if timeout is not None else 0
        self._lease_ms = to_ms(waiter_lease)
        self._info_head = {"host": _HOSTNAME, "label": label} if label else {"host": _HOSTNAME}

    def check_settings(self, name: object, timeout: Optional[Number]) -> None:
        """Refuse the settings only this kind of primitive has (before the common ones)."""

    #: The holds of this primitive (see :meth:`_compose`).
    local: Any

    def _compose(self) -> None:
        """Make this primitive's collaborators (each family's class: its holds, line and reporter)."""
        raise NotImplementedError

    def fresh(self, redis: Any = None) -> Any:
        """A primitive with this one's settings and no hold of its own, on ``redis`` (default: this
        one's client).

        For callers that make one lock per use of the same name (``@locked`` makes one per
        request): the arguments were checked and the keys computed when this one was made, so the
        copy costs a fraction of a new construction.  Only the hold state is new.
        """
        twin = object.__new__(type(self))
        vars(twin).update(vars(self))
        if redis is not None:
            twin.redis = redis
        twin._compose()
        return twin

    # -- arguments of the scripts ------------------------------------------------------------
    @staticmethod
    def acquire_mode(enqueue: int, own: bool) -> int:
        """The mode argument of an acquire script: ``enqueue`` (see :meth:`acquire_args`), plus
        :data:`OWN_TOKEN` when the library made the token for this very call."""
        return enqueue + OWN_TOKEN if own else enqueue

    def holder_info(self, worker: str) -> str:
        """Holder metadata sent with each acquire (JSON); cached per label, view, process and worker
        (short ones only)."""
        key = (self.label, self.view, os.getpid(), worker)
        if self.holder_fields:  # not cached: one label may come with other fields (another task's key)
            head = {**self._info_head, "view": self.view} if self.view else self._info_head
            return json.dumps({**self.holder_fields, **head, "pid": key[2], "thread": worker})
        info = _INFO_CACHE.get(key)
        if info is None:
            if len(_INFO_CACHE) > 4096:
                _INFO_CACHE.clear()
            head = {**self._info_head, "view": self.view} if self.view else self._info_head
            info = json.dumps({**head, "pid": key[2], "thread": worker})
            if cacheable(self.label) and cacheable(self.view) and cacheable(worker):  # see keys.CACHED_NAME_MAX
                _INFO_CACHE[key] = info
        return info

    def acquire_keys(self) -> tuple:
        k = self.keys
        return (k.name, k.meta, k.queue, k.waiters, k.registry)

    def acquire_args(self, token: bytes, enqueue: int, worker: str,
                     reply_to: tuple[bytes, Any] = NO_REPLY) -> tuple:
        """``enqueue``: 0 try only, 1 queue when busy, 2 queue and clean up an earlier attempt (plus
        :data:`OWN_TOKEN`, see :meth:`acquire_mode`).  ``reply_to``: where a queued caller is told
        of its grant, its process's channel and its number there (see :mod:`.waiting`)."""
        return (
            token,
            self._ttl_ms,
            enqueue,
            self._lease_ms,
            self.holder_info(worker),
            self.member,
            reply_to[0],
            reply_to[1],
            self.acquire_setting,
            *self.acquire_tail,
        )

    def release_keys(self) -> tuple:
        k = self.keys
        return (k.name, k.meta, k.queue, k.waiters, k.registry)

    def release_args(self, token: bytes) -> tuple:
        return (token, self.member, *self.retention_args)

    def extend_keys(self) -> tuple:
        k = self.keys
        return (k.name, k.meta, k.registry)

    def extend_args(self, token: bytes, ms: int, mode: str) -> tuple:
        return (token, ms, mode, self.member, *self.retention_args)

    def inspect_keys(self) -> tuple:
        k = self.keys
        return (k.name, k.meta, k.queue)

    # -- replies of the scripts --------------------------------------------------------------
    def grant_from_reply(self, reply: Any) -> Grant:
        """The outcome of an acquire script; a refusal (negative status) raises its error."""
        grant = Grant.from_reply(reply)
        if not grant.acquired and int(reply[0]) < 0:
            raise self.refusal(int(reply[0]))
        return grant

    def refusal(self, status: int) -> Exception:
        """The error for a refused acquire: -2, the name holds another kind of value."""
        return NameKindConflict(
            f"{self.name!r} is in use by another kind of primitive (or Redis value): a {self.kind} "
            "cannot use it; nothing was written",
            lock_name=self.name,
        )

    # -- watchdog protocol -------------------------------------------------------------------
    @property
    def renew_ttl_ms(self) -> int:
        """What the watchdog resets the TTL to on each renewal."""
        return self._ttl_ms

    def queue_renewal(self, pipe: Any, token: bytes, claim: bool = False, hold: Any = None) -> None:
        """Add a renewal of the hold ``token`` to a pipeline (used by the watchdog).  ``claim``: the
        claim of a provisional hand-off's full TTL, which leaves a hold its holder extended (or
        reset) since its grant as it is (a renewal resets it).  With ``max_hold``, the TTL asked
        for ends the hold (its state ``hold``) that long after it began."""
        script = self.scripts.get(self.redis, self.extend_script)
        mode = "claim" if claim else "replace" if self._ttl_ms else "persist"
        ms = capped_ms(self._ttl_ms, hold, self.max_hold)
        queue_script(pipe, script, self.extend_keys(), self.extend_args(token, ms, mode))

    def check_extendable(self, action: str) -> None:
        """Refuse to extend (or reacquire) a hold that has no timeout."""
        if self.timeout is None:
            raise LockError(f"Cannot {action} a {self.noun} with no timeout", lock_name=self.name)

    def deadline_for(self, sent_at: float, pttl_ms: int) -> Optional[float]:
        """Monotonic instant after which this hold may have ended: measured from the send instant."""
        if pttl_ms < 0:
            return None
        ttl = pttl_ms / 1000.0
        return sent_at + ttl - drift(ttl)

    def _watch(self, local: Any, token: bytes, provisional: bool) -> None:
        """Hand a new hold to the watchdog when it needs one: renewal, or the claim of a hold
        handed over provisionally (two waiter leases), unless the hold ends first."""
        local.watched = self.auto_renew or provisional
        if self.auto_renew:
            first_in = min(self.renew_ttl_ms / 3000.0, self.waiter_lease / 2) if provisional else None
            self.side.watchdog().register(self, local, token, first_in)
        elif provisional:
            self.side.watchdog().register(self, local, token, self.waiter_lease / 2, once=True)

    def _unwatch(self, local: Any) -> None:
        """Before a hold's release: no renewal (nor claim) of it may go out from now on, or its
        reply, coming after the release, would declare the hold lost."""
        if local.watched:
            self.side.watchdog().unregister(self, local)
            local.watched = False

    def _lost_subject(self, local: Any) -> Any:
        """What ``on_lost`` is called with when the hold ``local`` is lost."""
        raise NotImplementedError

    def _mark_lost(self, local: Any) -> None:
        """Called by the watchdog when a hold could not be renewed in time (and by a release that
        found the hold gone): ``events.lost`` and ``on_lost`` run once per hold, whichever thread
        gets here first."""
        if not first_time(local, "lost"):
            return
        self.report.lost(local)  # on_lost runs even when the events object raised
        callback = self.on_lost
        if callback is not None:
            self.side.follow_up(callback(self._lost_subject(local)))

    # -- refusals -------------------------------------------------------------------------------
    def _state(self) -> Any:
        """The current thread's (or task's) hold (a :class:`~django_redis_coord.core.holds.Hold`)."""
        return self.local.hold

    @property
    def refused_pttl(self) -> Optional[int]:
        """After a refused acquire by this thread (task): the holder's remaining time in ms as the
        refusal said (``-1``: no expiry), else ``None``."""
        return self._refusal()[0]

    def _note_refusal(self, pttl: Optional[int], limit: Optional[int] = None) -> None:
        """Keep what the last refused acquire said (a lock: with this thread's or task's hold)."""
        self._state().refusal = (pttl, limit)

    def _refusal(self) -> tuple[Optional[int], Optional[int]]:
        """What :meth:`_note_refusal` kept: the holder's remaining ms and the limit in force."""
        refusal: tuple[Optional[int], Optional[int]] = self._state().refusal
        return refusal

    # -- waiting ------------------------------------------------------------------------------
    def taken(self, grant: Grant, sent_at: float) -> Optional[tuple[Grant, float]]:
        """The outcome of ``Line.take``: the grant and its send instant, or ``None`` when refused (what
        the refusal said is kept: see :meth:`_note_refusal`)."""
        if grant.acquired:
            return grant, sent_at
        self._note_refusal(grant.pttl, grant.limit)
        return None

    def wait_args(self, blocking: Optional[bool], blocking_timeout: Optional[Number]) -> tuple[bool, Optional[float]]:
        """Resolve ``blocking`` and the monotonic instant a blocking acquire gives up at."""
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=self.name)
        stop_at = time.monotonic() + blocking_timeout if blocking and blocking_timeout is not None else None
        return bool(blocking), stop_at

    @property
    def refresh_interval(self) -> float:
        """How often a queued waiter refreshes its place: a third of its lease, and at least four
        times per timeout so that a handed-off hold's local deadline stays close to its TTL."""
        interval = self.waiter_lease / 3.0
        if self.timeout is not None:
            interval = min(interval, max(0.01, self.timeout / 4.0))
        return interval

    @staticmethod
    def wait_budget(grant: Grant, stop_at: Optional[float]) -> Optional[float]:
        """Seconds until a waiter must look again by itself: the holder's expiry or its own deadline.

        ``None`` means only the periodic refresh applies (holder without expiry, no deadline).
        """
        candidates = []
        if grant.pttl >= 0:
            candidates.append(grant.pttl / 1000.0)
        elif grant.pttl == -2:
            candidates.append(0.0)
        if stop_at is not None:
            candidates.append(max(0.0, stop_at - time.monotonic()))
        return min(candidates) if candidates else None

    @staticmethod
    def parse_wake(payload: Any) -> tuple[int, bool]:
        """A wake message is ``"<fence> <provisional>"``."""
        fence, provisional = payload.split(b" " if isinstance(payload, bytes) else " ")
        return int(fence), provisional in (b"1", "1")

    def woken_grant(self, payload: Any) -> Grant:
        """The grant a wake message announces: the full TTL, or two waiter leases when provisional.

        Or, for ``"expires <ms>"``, no grant: the hold changed hands and the new holder's TTL ends
        in ``ms``, sooner than this waiter would look again by itself (``pttl`` of the result)."""
        if payload[:8] in (b"expires ", "expires "):
            return Grant(False, pttl=int(payload[8:]))
        fence, provisional = self.parse_wake(payload)
        pttl = 2 * self._lease_ms if provisional else (self._ttl_ms or -1)
        return Grant(True, fence, pttl, provisional)
