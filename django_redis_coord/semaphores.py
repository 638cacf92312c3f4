"""Counting semaphores on Redis (sync): leased, fenced permits on server time, served in FIFO order.

Seed 000's identity semaphore runs unchanged::

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
* Waiting never polls: a blocking acquire joins a FIFO queue and blocks on its own wake list; a
  release (or a reclaim, or a raised limit) grants the permit server-side to the head of the
  queue.  A waiter also looks again when the earliest lease ends, so a crashed holder's permit
  is reused promptly.
* Optional watchdog renewal of each permit, with the same loss signal as :class:`Lock`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Optional, Union

from . import watchdog as _watchdog
from ._base import (
    _HOSTNAME,
    DEFAULT_WAITER_LEASE,
    Grant,
    LockBase,
    Number,
    check_number,
    drift,
    new_token,
    to_ms,
)
from .exceptions import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    LockAcquireTimeout,
    LockError,
    LockLostError,
    LockNotOwnedError,
    SemaphoreLimitNotSet,
)
from .holders import HolderInfo, permits_from_inspect
from .keys import KeySet, encode_name, keys_for
from .locks import blocking_pop
from .scripts import sync_scripts

__all__ = ["Semaphore", "Permit", "SemaphoreBase"]

logger = logging.getLogger("django_redis_coord")

Identity = Union[str, bytes]


def check_limit(value: object, semaphore_name: object) -> int:
    """Refuse a limit that is not an int of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidLockArgumentType(
            f"limit must be an int, not {type(value).__name__}", lock_name=semaphore_name
        )
    if value < 1:
        raise InvalidLockArgument(f"limit must be at least 1, got {value!r}", lock_name=semaphore_name)
    return value


def encode_identity(identity: object, semaphore_name: object) -> bytes:
    """The token of a permit: the caller's identity as bytes (non-empty str or bytes)."""
    if isinstance(identity, str):
        identity = identity.encode("utf-8", "surrogatepass")
    if not isinstance(identity, (bytes, bytearray)):
        raise InvalidLockArgumentType(
            f"identity must be str or bytes, not {type(identity).__name__}", lock_name=semaphore_name
        )
    if not identity:
        raise InvalidLockArgument("identity must not be empty", lock_name=semaphore_name)
    return bytes(identity)


@dataclass(eq=False)
class Permit:
    """One permit held through a semaphore object: its token (the identity), fence and deadline.

    ``deadline`` is the ``time.monotonic()`` instant after which the permit may have ended
    (``None``: no expiry); the watchdog moves it on each renewal and sets ``lost`` when a renewal
    fails to arrive in time.
    """

    semaphore: Any
    token: bytes
    fence: int
    deadline: Optional[float]
    lost: bool = False
    #: Registered with the watchdog (auto-renewal, or the claim of a provisional hand-off).
    watched: bool = False

    @property
    def valid(self) -> bool:
        """True while the permit is held and its local deadline has not passed."""
        if self.lost:
            return False
        return self.deadline is None or time.monotonic() < self.deadline


class SemaphoreBase:
    """Arguments, keys and local bookkeeping common to :class:`Semaphore` and its asyncio twin."""

    kind = "semaphore"
    #: The registry of Lua scripts for this flavour of client (sync or asyncio).
    scripts: Any = None

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes],
        limit: Optional[int] = None,
        timeout: Optional[Number] = None,
        blocking: bool = False,
        blocking_timeout: Optional[Number] = None,
        *,
        label: Optional[str] = None,
        auto_renew: bool = False,
        on_lost: Optional[Callable[[Permit], Any]] = None,
        raise_on_release_error: bool = True,
        waiter_lease: Number = DEFAULT_WAITER_LEASE,
    ) -> None:
        raw = encode_name(name)
        if limit is not None:
            check_limit(limit, name)
        check_number("timeout", timeout, allow_none=True, positive=True, lock_name=name)
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=name)
        check_number("waiter_lease", waiter_lease, allow_none=False, positive=True, lock_name=name)
        if auto_renew and timeout is None:
            raise InvalidLockArgument("auto_renew needs a timeout to renew", lock_name=name)
        if label is not None and not isinstance(label, str):
            raise InvalidLockArgumentType("label must be a str", lock_name=name)
        self.redis = redis
        self.name: Any = name
        self.limit = limit
        self.timeout = timeout
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.label = label
        self.auto_renew = auto_renew
        self.on_lost = on_lost
        self.raise_on_release_error = raise_on_release_error
        self.waiter_lease = waiter_lease
        self.keys: KeySet = keys_for(raw, b"sem")
        self.member = b"sem:" + raw
        self._ttl_ms = to_ms(timeout) if timeout is not None else 0
        self._lease_ms = to_ms(waiter_lease)
        self._info_head = {"host": _HOSTNAME, "label": label} if label else {"host": _HOSTNAME}
        self._info_cache: dict[tuple[int, str], str] = {}
        #: Permits held through this object, by token.
        self._permits: dict[bytes, Permit] = {}

    # -- arguments of the scripts ------------------------------------------------------------
    def holder_info(self, worker: str) -> str:
        key = (os.getpid(), worker)
        info = self._info_cache.get(key)
        if info is None:
            if len(self._info_cache) > 256:
                self._info_cache.clear()
            info = self._info_cache[key] = json.dumps({**self._info_head, "pid": key[0], "thread": worker})
        return info

    def acquire_keys(self, token: bytes) -> tuple:
        k = self.keys
        return (k.name, k.meta, k.queue, k.waiters, k.registry, k.wake(token))

    def acquire_args(self, token: bytes, enqueue: int, worker: str) -> tuple:
        """``enqueue``: 0 try only, 1 queue when full, 2 queue and clean up an earlier attempt."""
        k = self.keys
        return (
            token,
            self._ttl_ms,
            enqueue,
            self._lease_ms,
            self.holder_info(worker),
            self.member,
            k.wake_prefix,
            k.wake_suffix,
            self.limit if self.limit is not None else "",
        )

    def release_keys(self) -> tuple:
        k = self.keys
        return (k.name, k.meta, k.queue, k.waiters, k.registry)

    def release_args(self, token: bytes) -> tuple:
        k = self.keys
        return (token, self.member, k.wake_prefix, k.wake_suffix)

    def set_limit_args(self, size: int) -> tuple:
        k = self.keys
        return (size, self.member, k.wake_prefix, k.wake_suffix)

    def extend_keys(self) -> tuple:
        k = self.keys
        return (k.name, k.meta, k.registry)

    def extend_args(self, token: bytes, ms: int, mode: str) -> tuple:
        return (token, ms, mode, self.member)

    def inspect_keys(self) -> tuple:
        k = self.keys
        return (k.name, k.meta, k.queue)

    def checked_pttl(self, token: bytes, pttl: int) -> int:
        """The reply of ``sem_extend.lua``: the new lease, or an error (the permit marked lost)."""
        if pttl == -2:
            permit = self._permits.get(token)
            if permit is not None:
                permit.lost = True
            raise LockNotOwnedError("Cannot extend a permit that's no longer held", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a permit with no timeout", lock_name=self.name)
        return pttl

    def grant_from_reply(self, reply: Any) -> Grant:
        if int(reply[0]) == -1:
            raise SemaphoreLimitNotSet(
                "The semaphore has no limit: call set_max_size() or pass limit=", lock_name=self.name
            )
        return Grant.from_reply(reply)

    # -- watchdog protocol -------------------------------------------------------------------
    @property
    def renew_ttl_ms(self) -> int:
        """What the watchdog resets a permit's lease to on each renewal."""
        return self._ttl_ms

    def queue_renewal(self, pipe: Any, token: bytes) -> None:
        """Add a renewal of the permit ``token`` to a pipeline (used by the watchdog; it also claims
        the full lease of a provisional hand-off)."""
        script = self.scripts.get(self.redis, "sem_extend")
        keys = self.extend_keys()
        args = self.extend_args(token, self._ttl_ms, "replace" if self._ttl_ms else "persist")
        if hasattr(pipe, "scripts"):
            pipe.scripts.add(script)  # loaded before the pipeline runs, if the server lacks it
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        else:  # redis-py's cluster pipelines refuse EVALSHA: send the text
            pipe.execute_command("EVAL", script.script, len(keys), *keys, *args)

    def deadline_for(self, sent_at: float, pttl_ms: int) -> Optional[float]:
        """Monotonic instant after which a permit may have ended, measured from the send instant."""
        if pttl_ms < 0:
            return None
        ttl = pttl_ms / 1000.0
        return sent_at + ttl - drift(ttl)

    def _mark_lost(self, permit: Permit) -> None:
        """Called by the watchdog when a permit could not be renewed in time."""
        if permit.lost:
            return
        permit.lost = True
        if self.on_lost is not None:
            self.on_lost(permit)

    # -- waiting -------------------------------------------------------------------------------
    @property
    def refresh_interval(self) -> float:
        """How often a queued waiter refreshes its place (a third of its lease, at least four
        times per permit timeout)."""
        interval = self.waiter_lease / 3.0
        if self.timeout is not None:
            interval = min(interval, max(0.01, self.timeout / 4.0))
        return interval

    def wait_args(self, blocking: Optional[bool], blocking_timeout: Optional[Number]) -> tuple[bool, Optional[float]]:
        """Resolve ``blocking`` and the monotonic instant a blocking acquire gives up at."""
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=self.name)
        stop_at = time.monotonic() + blocking_timeout if blocking and blocking_timeout is not None else None
        return bool(blocking), stop_at

    wait_budget = staticmethod(LockBase.wait_budget)
    parse_wake = staticmethod(LockBase.parse_wake)

    def woken_grant(self, payload: Any) -> Grant:
        fence, provisional = self.parse_wake(payload)
        pttl = 2 * self._lease_ms if provisional else (self._ttl_ms or -1)
        return Grant(True, fence, pttl, provisional)

    # -- local bookkeeping -----------------------------------------------------------------------
    def _stack(self) -> list[bytes]:
        """Tokens of the permits the current thread (or task) acquired without an identity."""
        raise NotImplementedError

    def _watchdog(self) -> Any:
        raise NotImplementedError

    def _own(self, token: bytes, grant: Grant, sent_at: float, anonymous: bool) -> Permit:
        deadline = self.deadline_for(sent_at, grant.pttl)
        permit = self._permits.get(token)
        if permit is None:
            permit = self._permits[token] = Permit(self, token, grant.fence, deadline)
            if anonymous:
                self._stack().append(token)
        else:
            if permit.watched:
                self._watchdog().unregister(self, permit)
            permit.fence, permit.deadline, permit.lost = grant.fence, deadline, False
        permit.watched = self.auto_renew or grant.provisional
        if self.auto_renew:
            first_in = min(self.renew_ttl_ms / 3000.0, self.waiter_lease / 2) if grant.provisional else None
            self._watchdog().register(self, permit, token, first_in)
        elif grant.provisional:
            # Handed over for two waiter leases: the watchdog claims the full lease in the
            # background, unless the permit is released first.
            self._watchdog().register(self, permit, token, self.waiter_lease / 2, once=True)
        return permit

    def _token_to_release(self, identity: Optional[Identity]) -> bytes:
        if identity is not None:
            return encode_identity(identity, self.name)
        stack = self._stack()
        if not stack:
            raise LockError("Cannot release a semaphore this thread did not acquire", lock_name=self.name)
        return stack[-1]

    def _forget(self, token: bytes) -> Optional[Permit]:
        permit = self._permits.pop(token, None)
        if permit is not None and permit.watched:
            self._watchdog().unregister(self, permit)
        stack = self._stack()
        if token in stack:
            stack.remove(token)
        return permit

    def _held(self, identity: Optional[Identity]) -> Permit:
        permit = self.permit(identity)
        if permit is None:
            raise LockError("This semaphore object holds no such permit", lock_name=self.name)
        return permit

    # -- local state -------------------------------------------------------------------------------
    def permit(self, identity: Optional[Identity] = None) -> Optional[Permit]:
        """The permit held through this object for ``identity`` (default: the current thread's
        latest permit acquired without an identity), or ``None``."""
        if identity is not None:
            return self._permits.get(encode_identity(identity, self.name))
        stack = self._stack()
        return self._permits.get(stack[-1]) if stack else None

    @property
    def fence(self) -> Optional[int]:
        """Fence token of the current permit (``None`` when this thread holds none)."""
        permit = self.permit()
        return permit.fence if permit is not None else None

    @property
    def deadline(self) -> Optional[float]:
        """``time.monotonic()`` instant after which the current permit may have ended."""
        permit = self.permit()
        return permit.deadline if permit is not None else None

    @property
    def valid(self) -> bool:
        """True while the current permit is held and its local deadline has not passed."""
        permit = self.permit()
        return permit is not None and permit.valid

    def ensure_valid(self) -> None:
        """Raise :class:`LockLostError` unless the current permit is still valid."""
        if not self.valid:
            raise LockLostError("The permit is no longer held", lock_name=self.name)

    def _exit_error(self, released: bool, permit: Optional[Permit]) -> Optional[LockLostError]:
        if released and (permit is None or not permit.lost):
            return None
        if self.raise_on_release_error:
            return LockLostError("The permit was lost before it was released", lock_name=self.name)
        logger.warning("Semaphore %r: the permit was lost before the context manager exited.", self.name)
        return None

    def __repr__(self) -> str:
        return (
            f"<{type(self).__module__}.{type(self).__qualname__} name={self.name!r} "
            f"limit={self.limit!r} timeout={self.timeout!r}>"
        )


class _ThreadStacks(threading.local):
    def __init__(self) -> None:
        self.stack: list[bytes] = []


class Semaphore(SemaphoreBase):
    """A counting semaphore whose permits are leased on server time, fenced and served FIFO.

    ``Semaphore(redis, name, limit=None, timeout=None, blocking=False, blocking_timeout=None, *,
    label=None, auto_renew=False, on_lost=None, raise_on_release_error=True, waiter_lease=2.0)``

    * ``limit``: stored in Redis by the first acquire when no limit is stored yet; afterwards the
      stored limit applies (change it with :meth:`set_max_size`).
    * ``timeout``: lease of each permit in seconds (``None``: permits never expire, as in seed 000).
    * ``blocking``/``blocking_timeout``: defaults of :meth:`acquire` (non-blocking by default, as in
      the seed); the context manager always waits, up to ``blocking_timeout``.
    * ``auto_renew``: the watchdog renews each permit at ``timeout / 3``; ``on_lost(permit)`` is
      called when a permit could not be renewed in time.
    """

    scripts = sync_scripts

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local = _ThreadStacks()

    def _stack(self) -> list[bytes]:
        return self.local.stack

    def _watchdog(self) -> Any:
        return _watchdog.sync_watchdog()

    # -- seed 000's API --------------------------------------------------------------------------
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
        return int(self.do_inspect("count")[2])

    def acquire(
        self,
        identity: Optional[Identity] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
    ) -> bool:
        """Take a permit for ``identity`` (default: a fresh token kept for this thread).

        Returns True once held, False when none is free (non-blocking) or ``blocking_timeout``
        passed.  An identity that already holds a permit gets its lease renewed (True).  A
        blocking call waits in FIFO order and is woken by a release, when the earliest lease
        ends, or at ``blocking_timeout`` (kept on the client's monotonic clock).
        """
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        token = encode_identity(identity, self.name) if identity is not None else new_token()
        worker = threading.current_thread().name
        sent_at = time.monotonic()
        grant = self.do_acquire(token, 1 if blocking else 0, worker)
        if not grant.acquired:
            if not blocking:
                return False
            try:
                grant, sent_at = self._wait(token, worker, grant, stop_at, sent_at)
            except BaseException:
                self._abandon(token, worker)
                raise
            if not grant.acquired:
                return False
        self._own(token, grant, sent_at, anonymous=identity is None)
        return True

    def _wait(
        self, token: bytes, worker: str, grant: Grant, stop_at: Optional[float], asked_at: float
    ) -> tuple[Grant, float]:
        """Wait in the queue until handed a permit, a lease ends or ``stop_at`` passes."""
        while True:
            if stop_at is not None and time.monotonic() >= stop_at:
                sent_at = time.monotonic()
                return self.do_cancel(token, worker), sent_at
            budget = self.wait_budget(grant, stop_at)
            payload = blocking_pop(self.redis, self.keys.wake(token), budget, self.refresh_interval)
            if payload is not None:
                # The hand-off happened after the last acquire call saw no free permit: measuring
                # the lease from that call keeps the local deadline on the safe (early) side.
                return self.woken_grant(payload), asked_at
            asked_at = time.monotonic()
            grant = self.do_acquire(token, 2, worker)
            if grant.acquired:
                return grant, asked_at

    def _abandon(self, token: bytes, worker: str) -> None:
        """Best effort after an interrupted wait: leave the queue, give back a permit just handed over."""
        try:
            if self.do_cancel(token, worker).acquired:
                self.do_release(token)
        except Exception:  # the original error matters more; the waiter lease bounds the rest
            pass

    def release(self, identity: Optional[Identity] = None) -> bool:
        """Return the permit of ``identity`` (default: this thread's latest permit).

        True when it was released; False when that identity holds no permit (never had one, or
        its lease ended).  Free permits go to the first waiters at once.
        """
        token = self._token_to_release(identity)
        # Keep local state until Redis answered: a connection error must leave a way to retry.
        released = self.do_release(token)
        self._forget(token)
        return released

    def extend(self, additional_time: Number, replace_ttl: bool = False, identity: Optional[Identity] = None) -> bool:
        """Add ``additional_time`` seconds to a permit's remaining lease (or set it, with ``replace_ttl``)."""
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        permit = self._held(identity)
        if self.timeout is None:
            raise LockError("Cannot extend a permit with no timeout", lock_name=self.name)
        sent_at = time.monotonic()
        pttl = self.do_extend(permit.token, to_ms(additional_time), "replace" if replace_ttl else "add")
        permit.deadline = self.deadline_for(sent_at, pttl)
        return True

    def reacquire(self, identity: Optional[Identity] = None) -> bool:
        """Reset a permit's lease to ``timeout``."""
        permit = self._held(identity)
        if self.timeout is None:
            raise LockError("Cannot reacquire a permit with no timeout", lock_name=self.name)
        sent_at = time.monotonic()
        permit.deadline = self.deadline_for(sent_at, self.do_extend(permit.token, self._ttl_ms, "replace"))
        return True

    def holders(self) -> list[HolderInfo]:
        """Every live permit of this semaphore (from all clients) with its holder's metadata."""
        return permits_from_inspect(self.keys.name, self.do_inspect("full"))

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> Semaphore:
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
    def do_acquire(self, token: bytes, enqueue: int, worker: str) -> Grant:
        script = self.scripts.get(self.redis, "sem_acquire")
        reply = script(self.acquire_keys(token), self.acquire_args(token, enqueue, worker), client=self.redis)
        return self.grant_from_reply(reply)

    def do_cancel(self, token: bytes, worker: str) -> Grant:
        script = self.scripts.get(self.redis, "sem_cancel")
        reply = script(self.acquire_keys(token), self.acquire_args(token, 2, worker), client=self.redis)
        return Grant.from_reply(reply)

    def do_release(self, token: bytes) -> bool:
        script = self.scripts.get(self.redis, "sem_release")
        return int(script(self.release_keys(), self.release_args(token), client=self.redis)) == 1

    def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "sem_extend")
        return self.checked_pttl(token, int(script(self.extend_keys(), self.extend_args(token, ms, mode),
                                                   client=self.redis)))

    def do_set_limit(self, size: int) -> int:
        script = self.scripts.get(self.redis, "sem_set_limit")
        return int(script(self.release_keys(), self.set_limit_args(size), client=self.redis))

    def do_inspect(self, mode: str) -> Any:
        script = self.scripts.get(self.redis, "sem_inspect")
        return script(self.inspect_keys(), (mode,), client=self.redis)
