"""What :func:`~django_redis_coord.get_or_set` and its asyncio twin
:func:`~django_redis_coord.aget_or_set` share: their arguments, the keys (the
value's and its fill lock's, in one Redis Cluster slot), the fenced write's arguments and reply,
and the flights through which the callers of one process wait for one fill.  Nothing in here talks
to Redis.

A fill of the cache key ``K`` (the full Redis key: the cache's ``KEY_PREFIX`` and ``VERSION``
applied) is guarded by the fenced :class:`~django_redis_coord.ReadWriteLock` named
``{T}:dcoord-fill:K``, where ``T`` is the part of ``K`` that Redis Cluster hashes (``K`` itself
unless it has a ``{hash tag}``): the lock's keys and ``K`` share a slot, so the write script can
read the lock and write ``K`` atomically, also on a cluster.  A key longer than
:data:`NAMED_KEY_MAX` bytes (a name holding it twice could pass the 64 KiB limit of names) is
named by its SHA-256 digest instead, under the canonical tag of its slot:
``{S}:dcoord-fill:#<hex digest>``.  The producer holds its write side;
the callers of other processes queue for its read side, and the script that ends the write grants
them all at once (readers at the head of the queue are served together), each then reading the
value: the waiting processes are woken together, not one after another.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

from ...config.cache_backends import CacheAccess, cache_access
from ...core.arguments import Number, check_number
from ...core.exceptions import InvalidLockArgument, InvalidLockArgumentType, LockAcquireTimeout
from ...core.keys import MARKER, key_slot, keys_for, slot_tag, tag_for
from ...core.rwlock.rules import WRITE, RWLockBase

__all__ = [
    "DEFAULT_LOCK_TIMEOUT", "FILL_RETENTION_MS", "LABEL", "Fill", "FillLockSettings", "Flights", "fill_lock_name",
    "prepare", "check_produced", "written",
]

logger = logging.getLogger("django_redis_coord")

#: Seconds a fill lock lives unless renewed: how soon a crashed producer is replaced.
DEFAULT_LOCK_TIMEOUT = 10.0
#: The longest waiter lease of a fill lock (seconds; see :meth:`Fill.lock_arguments`).
MAX_WAITER_LEASE = 5.0
#: How long a fill lock's meta hash (its fence counter) outlives its last hold, in ms.  A fill's write
#: compares the holder's token, not fences, so the counter need not stay a day as other locks' do:
#: a cache filling many distinct keys would keep one hash per key missed that day.
FILL_RETENTION_MS = 60_000
#: What marks a fill lock's name (after the hash tag, before the cache key).
LOCK_MARK = b":dcoord-fill:"
#: The longest cache key a fill lock's name holds as it is (longer ones: their digest).
NAMED_KEY_MAX = 1024
#: The label operators see on a fill lock (``manage.py locks``, the admin page).
LABEL = "cache fill"


def fill_lock_name(key: bytes) -> bytes:
    """The name of the lock guarding the fills of the Redis key ``key``: in ``key``'s slot, short
    whatever the key's length (a long key is named by its digest)."""
    if len(key) > NAMED_KEY_MAX:
        return b"{" + slot_tag(key_slot(key)) + b"}" + LOCK_MARK + b"#" + hashlib.sha256(key).hexdigest().encode()
    return b"{" + tag_for(key) + b"}" + LOCK_MARK + key


class FillLockSettings:
    """What the fill locks (a :class:`~django_redis_coord.ReadWriteLock` and its asyncio
    twin) change in a read-write lock: the retention of their metadata (:data:`FILL_RETENTION_MS`)."""

    acquire_setting = FILL_RETENTION_MS
    retention_args: tuple = (FILL_RETENTION_MS,)


@dataclass
class Fill:
    """One call's fill: the cache, the keys, the expiry to write and the lock's settings (not
    frozen: made on every call, hits included, and a frozen dataclass costs three times as much to make)."""

    access: CacheAccess
    #: The Redis key of the value (what the cache's ``get()`` reads).
    key: bytes
    #: Expiry of the value in ms: ``None`` for none, 0 when the cache would store nothing.
    expiry_ms: Optional[int]
    lock_timeout: float
    auto_renew: bool
    #: ``time.monotonic()`` instant after which a caller stops waiting (``None``: never).
    stop_at: Optional[float]
    wait_timeout: Optional[float]

    @property
    def stores(self) -> bool:
        """Whether the cache keeps what is written (a timeout of 0 or less stores nothing)."""
        return self.expiry_ms != 0

    @functools.cached_property
    def lock_name(self) -> bytes:
        """The name of the fill lock (made on a miss only: a hit needs no lock)."""
        return fill_lock_name(self.key)

    @property
    def flight_key(self) -> tuple[str, bytes]:
        return self.access.alias, self.key

    def remaining(self) -> Optional[float]:
        """Seconds left to wait (``None``: no limit)."""
        return None if self.stop_at is None else max(0.0, self.stop_at - time.monotonic())

    def lock_arguments(self) -> dict[str, Any]:
        """The fill lock's settings.  The waiter lease is half the lock's TTL, so that a hand-off
        grants the whole TTL at once (no claim round trip), and a waiter that dies in the queue
        holds it up for two leases, one lock TTL, as a producer that dies holding it does.  It is
        at most :data:`MAX_WAITER_LEASE`: a waiter refreshes its place every third of its lease,
        which is also how late it may learn of a grant whose announcement was lost."""
        lease = min(math.ceil(self.lock_timeout * 500) / 1000, MAX_WAITER_LEASE)
        return {"timeout": self.lock_timeout, "auto_renew": self.auto_renew, "waiter_lease": lease, "label": LABEL}

    def write_keys(self) -> tuple[bytes, bytes, bytes]:
        """``KEYS`` of ``cache_fill_set.lua``: the value, the lock's name (its holders) and its meta hash."""
        return self.key, self.lock_name, keys_for(self.lock_name, RWLockBase.key_kind).meta

    def write_args(self, lock: RWLockBase, encoded: Union[bytes, int]) -> tuple[Any, ...]:
        """``ARGV`` of ``cache_fill_set.lua``: this caller's write token (of ``lock``), the value, its expiry."""
        hold = lock.holding(WRITE)
        token = hold.token if hold is not None else b""  # no hold: the script refuses the write
        return token, encoded, self.expiry_ms or 0

    def timed_out(self) -> LockAcquireTimeout:
        return LockAcquireTimeout(
            f"no value for cache key {self.key.decode(errors='replace')!r} within wait_timeout={self.wait_timeout} s "
            "(another caller was producing it)",
            lock_name=self.lock_name,
        )


def prepare(key: str, producer: Any, timeout: Any, version: Optional[int], cache: str, lock_timeout: Number,
            wait_timeout: Optional[Number], auto_renew: bool) -> Fill:
    """Check a call's arguments (nothing is sent to Redis) and describe its fill.  The cache's
    access is made once per alias (:func:`~django_redis_coord.config.cache_backends.cache_access`), the
    fill lock's name only on a miss: a hit costs the checks, the key and one ``GET``."""
    if not callable(producer):
        raise InvalidLockArgumentType(f"producer must be a callable, not {type(producer).__name__}", lock_name=key)
    check_number("lock_timeout", lock_timeout, allow_none=False, positive=True, lock_name=key)
    check_number("wait_timeout", wait_timeout, allow_none=True, positive=False, lock_name=key)
    if not isinstance(auto_renew, bool):
        raise InvalidLockArgumentType("auto_renew must be True or False", lock_name=key)
    access = cache_access(cache)
    raw = access.make_key(key, version)
    if MARKER in raw:  # refused before any I/O: the fill lock's name would hold it
        raise InvalidLockArgument(f"a cache key must not contain the reserved marker {MARKER.decode()!r}",
                                  lock_name=key)
    expiry = access.expiry_ms(timeout)
    stop_at = None if wait_timeout is None else time.monotonic() + wait_timeout
    return Fill(access, raw, expiry, float(lock_timeout), auto_renew, stop_at,
                None if wait_timeout is None else float(wait_timeout))


def check_produced(value: Any, key: bytes) -> None:
    """A sync producer must return the value itself, not an awaitable (that is ``aget_or_set``'s)."""
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if close is not None:
            close()  # a coroutine never awaited: no "never awaited" warning
        raise InvalidLockArgumentType(
            f"the producer of cache key {key.decode(errors='replace')!r} returned an awaitable: "
            "use aget_or_set (from django_redis_coord) in asyncio code",
            lock_name=key,
        )


def written(fill: Fill, reply: Any, value: Any, encoded: Union[bytes, int], fence: Optional[int]) -> tuple[Any, Any]:
    """What the producing caller returns after the fenced write, and the stored bytes its process's
    other callers decode (``None``: nothing for them, they try again).

    Stored: the producer's own value.  Refused (the hold ended before the write): the value a later
    producer stored, when there is one; else the producer's value, stored nowhere."""
    if int(reply[0]) == 1:
        return value, encoded if isinstance(encoded, bytes) else str(encoded).encode()
    current, latest = reply[1], reply[2]
    logger.warning(
        "Cache fill of %r: the value produced under fence %s was not stored, the fill lock having moved on "
        "(latest fence %s); %s",
        fill.key.decode(errors="replace"), fence, latest.decode() if isinstance(latest, bytes) else latest,
        "returning the value stored by a later producer" if current is not None else "nothing is stored yet",
    )
    if current is None:
        return value, None
    return fill.access.decode(current), current


class Flights:
    """The fills under way in this process, by cache alias and key, so that one caller per key
    (and per event loop, for asyncio) waits in Redis while the others of its process wait for it.

    ``join(key, new)`` returns ``(flight, True)`` when the caller leads a new flight (made by
    ``new()``), or ``(flight, False)`` to follow the one under way; the leader calls
    ``leave(key, flight)`` once it has its outcome.
    """

    def __init__(self) -> None:
        self._by_key: dict[Any, Any] = {}
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """In a forked child: the parent's flights have no leader here."""
        self._by_key = {}
        self._lock = threading.Lock()

    def join(self, key: Any, new: Callable[[], Any]) -> tuple[Any, bool]:
        with self._lock:
            flight = self._by_key.get(key)
            if flight is not None:
                return flight, False
            flight = self._by_key[key] = new()
            return flight, True

    def leave(self, key: Any, flight: Any) -> None:
        with self._lock:
            if self._by_key.get(key) is flight:
                del self._by_key[key]
