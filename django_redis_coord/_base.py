"""What the queued primitives (locks and semaphores, sync and asyncio) share: argument checks,
key layout, the arguments and replies of their scripts, the rules of waiting, holder info.

Nothing in here talks to Redis; the sync and asyncio twins (:mod:`django_redis_coord.locks`,
:mod:`django_redis_coord.asyncio.lock` and the semaphores built on them) do, each in its own
``do_*`` methods.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional, Union

from redis.exceptions import ClusterDownError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .exceptions import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    LockAcquireTimeout,
    LockError,
    LockLostError,
    NameKindConflict,
)
from .keys import KeySet, cacheable, encode_name, keys_for
from .scripts import queue_script

Number = Union[int, float]

#: How long a queued waiter stays in the queue without refreshing its place (ms).  A waiter that
#: dies is skipped once this lapses; a live one refreshes three times per lease.
DEFAULT_WAITER_LEASE = 2.0
#: How long the fence counter and holder metadata outlive the last hold of a name (ms).
META_RETENTION_MS = 24 * 3600 * 1000
#: Drift allowance for the local validity deadline: a fixed part plus a fraction of the TTL.
DRIFT_FIXED = 0.002
DRIFT_FACTOR = 0.01

_HOSTNAME = socket.gethostname()
_INFO_CACHE: dict[tuple, str] = {}
#: The ``reply_to`` of an acquire that does not wait (see :meth:`QueuedBase.acquire_args`).
NO_REPLY = (b"", 0)
#: Added to an acquire's mode when the library made the token for that very call (see lock_acquire.lua).
OWN_TOKEN = 4


#: The longest duration any argument may have (ten years): far below what PX / PEXPIRE accept.
MAX_SECONDS = 10 * 365 * 24 * 3600


def check_number(name: str, value: object, *, allow_none: bool, positive: bool, lock_name: object) -> None:
    """Refuse a non-numeric, negative (or, when ``positive``, zero) or absurdly long duration."""
    if value is None:
        if allow_none:
            return
        raise InvalidLockArgumentType(f"{name} must be a number, not None", lock_name=lock_name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidLockArgumentType(
            f"{name} must be a number of seconds, not {type(value).__name__}", lock_name=lock_name
        )
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidLockArgument(f"{name} must be finite, got {value!r}", lock_name=lock_name)
    if positive and value <= 0:
        raise InvalidLockArgument(f"{name} must be greater than 0, got {value!r}", lock_name=lock_name)
    if value < 0:
        raise InvalidLockArgument(f"{name} must not be negative, got {value!r}", lock_name=lock_name)
    if value > MAX_SECONDS:
        raise InvalidLockArgument(
            f"{name} must be at most {MAX_SECONDS} seconds (ten years), got {value!r}", lock_name=lock_name
        )


def to_ms(seconds: Number) -> int:
    """Whole milliseconds, never rounding a positive duration down to zero."""
    return max(1, int(round(seconds * 1000)))


def encode_token(token: Union[str, bytes], lock_name: object) -> bytes:
    if isinstance(token, str):
        token = token.encode()
    if not isinstance(token, (bytes, bytearray)) or not token:
        raise InvalidLockArgument("token must be a non-empty str or bytes", lock_name=lock_name)
    return bytes(token)


def as_bytes(value: Any) -> Optional[bytes]:
    if value is None or value is False:
        return None
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def new_token() -> bytes:
    return secrets.token_hex(16).encode()


_FLAGS = threading.Lock()


def _new_flags_lock() -> None:
    """In a forked child: a new lock (a thread of the parent may have held it at the fork)."""
    global _FLAGS
    _FLAGS = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_flags_lock)


def first_time(holder: Any, flag: str) -> bool:
    """Set ``holder.<flag>`` and return True, unless it was set already: one winner when several
    threads (the caller's, the watchdog's) find the same hold lost at once."""
    with _FLAGS:
        if getattr(holder, flag, False):
            return False
        setattr(holder, flag, True)
        return True


def first_of(seen: set, key: Any) -> bool:
    """Add ``key`` to ``seen`` and return True, unless it was there already (as :func:`first_time`)."""
    with _FLAGS:
        if key in seen:
            return False
        seen.add(key)
        return True


def drift(timeout: Optional[Number]) -> float:
    """Seconds subtracted from a hold's duration for the local validity deadline."""
    return DRIFT_FIXED + (DRIFT_FACTOR * timeout if timeout else 0.0)


class SharedHold:
    """Hold state shared by all threads (``thread_local=False``); ``.token`` as in redis-py.

    The hold itself is a plain namespace (``hold``), so the watchdog thread can update the
    deadline of whichever thread acquired; ``initial`` names further fields it starts with.
    """

    initial: dict[str, Any] = {}

    def __init__(self) -> None:
        self.hold = SimpleNamespace(token=None, **self.initial)

    @property
    def token(self) -> Optional[bytes]:
        return self.hold.token

    @token.setter
    def token(self, value: Optional[bytes]) -> None:
        self.hold.token = value


class ThreadHold(SharedHold, threading.local):
    """Hold state private to each thread."""


@dataclass
class Grant:
    """Outcome of one acquire attempt."""

    acquired: bool
    fence: int = 0
    #: Remaining time of the hold (when acquired) or of the current holder; -1 none, -2 no holder.
    pttl: int = -2
    provisional: bool = False
    #: A semaphore's refusal: the limit stored in Redis, which is the one in force.
    limit: Optional[int] = None

    @classmethod
    def from_reply(cls, reply: Any) -> Grant:
        if int(reply[0]) == 1:
            return cls(True, int(reply[1]), int(reply[2]), bool(int(reply[3])))
        if len(reply) == 1:
            return cls(False)
        return cls(False, pttl=int(reply[1]), limit=int(reply[2]) if len(reply) > 2 else None)


class QueuedBase:
    """What every queued primitive (a lock, a semaphore) shares: settings, keys, the arguments
    of its scripts, the rules of waiting in line and the watchdog's view of a hold.

    A subclass names its scripts and the kind of its keys; the sync and asyncio twins that talk
    to Redis (``QueuedPrimitive`` in :mod:`django_redis_coord.locks` and
    :mod:`django_redis_coord.asyncio.lock`) add the waiting loop on top.
    """

    kind = "lock"
    #: What one hold is called in messages.
    noun = "lock"
    #: The kind part of the side keys (see :func:`django_redis_coord.keys.keys_for`).
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
        self.raise_on_release_error = raise_on_release_error
        self.waiter_lease = waiter_lease
        self.keys: KeySet = keys_for(raw, self.key_kind)
        self.member = self.key_kind + b":" + raw
        self._ttl_ms = to_ms(timeout) if timeout is not None else 0
        self._lease_ms = to_ms(waiter_lease)
        self._info_head = {"host": _HOSTNAME, "label": label} if label else {"host": _HOSTNAME}

    def check_settings(self, name: object, timeout: Optional[Number]) -> None:
        """Refuse the settings only this kind of primitive has (before the common ones)."""

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

    def acquire_args(self, token: bytes, enqueue: int, worker: str, reply_to: tuple[bytes, int] = NO_REPLY) -> tuple:
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

    def queue_renewal(self, pipe: Any, token: bytes, claim: bool = False) -> None:
        """Add a renewal of the hold ``token`` to a pipeline (used by the watchdog).  ``claim``: the
        claim of a provisional hand-off's full TTL, which leaves a hold its holder extended (or
        reset) since its grant as it is (a renewal resets it)."""
        script = self.scripts.get(self.redis, self.extend_script)
        mode = "claim" if claim else "replace" if self._ttl_ms else "persist"
        queue_script(pipe, script, self.extend_keys(), self.extend_args(token, self._ttl_ms, mode))

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

    def _watchdog(self) -> Any:
        """The renewal loop of this flavour (a thread, or a task of the running loop)."""
        raise NotImplementedError

    def _watch(self, local: Any, token: bytes, provisional: bool) -> None:
        """Hand a new hold to the watchdog when it needs one: renewal, or the claim of a hold
        handed over provisionally (two waiter leases), unless the hold ends first."""
        local.watched = self.auto_renew or provisional
        if self.auto_renew:
            first_in = min(self.renew_ttl_ms / 3000.0, self.waiter_lease / 2) if provisional else None
            self._watchdog().register(self, local, token, first_in)
        elif provisional:
            self._watchdog().register(self, local, token, self.waiter_lease / 2, once=True)

    def _lost_subject(self, local: Any) -> Any:
        """What ``on_lost`` is called with when the hold ``local`` is lost."""
        raise NotImplementedError

    def _after_loss(self, result: Any) -> None:
        """What happens to the value ``on_lost`` returned (the asyncio flavour runs a coroutine)."""

    def _mark_lost(self, local: Any) -> None:
        """Called by the watchdog when a hold could not be renewed in time (and by a release that
        found the hold gone): ``on_lost`` runs once per hold, whichever thread gets here first."""
        if not first_time(local, "lost"):
            return
        callback = self.on_lost
        if callback is not None:
            self._after_loss(callback(self._lost_subject(local)))

    # -- waiting ------------------------------------------------------------------------------
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


#: How long a queued waiter keeps waiting while its refreshes cannot reach Redis (seconds in a
#: row): long enough for a Sentinel or Cluster failover, after which it finds its place again
#: (or the grant made meanwhile).  Its ``blocking_timeout`` still applies.
OUTAGE_GRACE = 30.0
#: The errors of a refresh that count as Redis being out of reach for a while (see :class:`Outage`).
OUTAGE_ERRORS = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError)


class Outage:
    """The refreshes of one waiter that could not reach Redis, in a row (see :data:`OUTAGE_GRACE`)."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since: Optional[float] = None

    def began(self, at: float) -> Grant:
        """A refresh sent at ``at`` failed: re-raise the error once the outage lasted
        :data:`OUTAGE_GRACE`, else the grant to wait on until the next refresh (a holder with no
        expiry: the waiter looks again after its refresh period, or when woken).  Call it from the
        ``except`` clause."""
        if self.since is None:
            self.since = at
        if at - self.since >= OUTAGE_GRACE:
            raise
        return Grant(False, pttl=-1)

    def ended(self) -> None:
        self.since = None


class ReleaseOnExit:
    """What the ``with`` blocks of the lock-like primitives share (as redis-py's Lock behaves)."""

    name: Any
    kind: str
    raise_on_release_error: bool

    def timed_out(self) -> LockAcquireTimeout:
        """The error of a ``with`` block that could not acquire in time."""
        return LockAcquireTimeout("Unable to acquire lock within the time specified", lock_name=self.name)

    def release_failed(self) -> None:
        """A release at the end of a ``with`` block failed: re-raise, or log it when
        ``raise_on_release_error`` is off.  Call it from the ``except`` clause."""
        if self.raise_on_release_error:
            raise
        logging.getLogger("django_redis_coord").warning(
            "%s %r was no longer owned when exiting the context manager.", self.kind.capitalize(), self.name
        )


class LockBase(ReleaseOnExit, QueuedBase):
    """Arguments, keys and local state common to :class:`Lock` and its asyncio twin."""

    kind = "lock"
    key_kind = b"lock"
    #: The hold state (see :meth:`_new_local`), set by each flavour.
    local: Any
    acquire_setting = META_RETENTION_MS

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes],
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        label: Optional[str] = None,
        auto_renew: bool = False,
        on_lost: Optional[Callable[[Any], None]] = None,
        reentrant: bool = False,
        waiter_lease: Number = DEFAULT_WAITER_LEASE,
    ) -> None:
        self.sleep = sleep
        super().__init__(
            redis,
            name,
            timeout,
            blocking,
            blocking_timeout,
            label=label,
            auto_renew=auto_renew,
            on_lost=on_lost,
            raise_on_release_error=raise_on_release_error,
            waiter_lease=waiter_lease,
        )
        if not isinstance(reentrant, bool):
            raise InvalidLockArgumentType(f"reentrant must be True or False, not {reentrant!r}", lock_name=name)
        if reentrant and not thread_local:
            # A hold shared by every thread (task) has no owner to re-enter it: another thread
            # would join the hold instead of waiting its turn.
            raise InvalidLockArgument("reentrant=True needs thread_local=True: re-entry is per thread (task)",
                                      lock_name=name)
        self.thread_local = bool(thread_local)
        self.reentrant = reentrant

    def check_settings(self, name: object, timeout: Optional[Number]) -> None:
        check_number("sleep", self.sleep, allow_none=False, positive=False, lock_name=name)
        if timeout is not None and self.sleep > timeout:
            raise InvalidLockArgument("'sleep' must be less than 'timeout'", lock_name=name)

    def _lost_subject(self, local: Any) -> Any:
        return self

    def _new_local(self) -> Any:
        """Empty hold state of this flavour: per thread, per task or shared (``thread_local``)."""
        raise NotImplementedError

    def _fresh(self, redis: Any = None) -> Any:
        """A lock with this one's settings and no hold of its own, on ``redis`` (default: this
        one's client).

        For callers that make one lock per use of the same name (``@locked`` makes one per
        request): the arguments were checked and the keys computed when this one was made, so the
        copy costs a fraction of a new construction.  Only the hold state is new.
        """
        twin = object.__new__(type(self))
        vars(twin).update(vars(self))
        if redis is not None:
            twin.redis = redis
        twin.local = twin._new_local()
        return twin

    # -- the caller's hold (per thread or task: see each flavour's ``_state``) ---------------
    def _state(self) -> Any:
        """The current thread's (or task's) hold: token, fence, deadline, count, lost."""
        raise NotImplementedError

    @property
    def fence(self) -> Optional[int]:
        """Fence token of the current hold (``None`` when not held by this thread or task)."""
        local = self._state()
        return getattr(local, "fence", None) if local.token is not None else None

    @property
    def deadline(self) -> Optional[float]:
        """``time.monotonic()`` instant after which the hold may have ended (``None``: no expiry)."""
        return getattr(self._state(), "deadline", None)

    @property
    def valid(self) -> bool:
        """True while this thread (or task) holds the lock and its local deadline has not passed."""
        local = self._state()
        if local.token is None or getattr(local, "lost", False):
            return False
        deadline = getattr(local, "deadline", None)
        return deadline is None or time.monotonic() < deadline

    def ensure_valid(self) -> None:
        """Raise :class:`LockLostError` unless the hold is still valid."""
        if not self.valid:
            raise LockLostError("The lock is no longer held", lock_name=self.name)

    @staticmethod
    def _still_holding(local: Any, token: bytes, fence: Optional[int]) -> bool:
        """Whether the hold state ``local`` still describes the hold taken with ``token`` and
        ``fence``.  With ``thread_local=False`` one state serves every thread (or task): once a
        release reached Redis, another thread may already have been handed the next hold and
        written it there (a new fence), and what the release does next must leave that alone."""
        return local.token == token and getattr(local, "fence", None) == fence

    @staticmethod
    def _forget_hold(local: Any) -> None:
        """The hold ``local`` ended: nothing is held through it any more."""
        local.token = None
        local.count = 0

    def _own(self, token: bytes, grant: Grant, sent_at: float) -> None:
        """Record a granted hold and, when needed, hand it to the watchdog."""
        local = self._state()
        local.token = token
        local.fence = grant.fence
        local.deadline = self.deadline_for(sent_at, grant.pttl)
        local.count = 1
        local.lost = False
        self._watch(local, token, grant.provisional)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} name={self.name!r} timeout={self.timeout!r}>"
