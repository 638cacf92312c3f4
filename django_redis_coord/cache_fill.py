"""Single-flight cache fills (cache stampede protection) for Django's Redis caches (sync).

:func:`get_or_set` is Django's ``cache.get_or_set(key, default, timeout, version)`` where, on a
miss, exactly one caller runs ``producer`` and the others wait for its value:

* Across processes they wait in the FIFO queue of the key's fenced
  :class:`~django_redis_coord.locks.Lock` (no polling: the releasing producer's script hands the
  lock to the next in line and wakes it through its process's waiting connection); the next one
  finds the value and passes the lock on.  Within a process, one caller per key waits in that
  queue and the others wait for it (:class:`~django_redis_coord._cache_fill_base.Flights`).
* A producer that dies is replaced when its lock's TTL (``lock_timeout``) ends.
* The write is fenced: ``lua/cache_fill_set.lua`` writes the value only while the lock is still
  held with the producer's token, in the same script, so a producer whose hold ended (paused past
  its TTL) cannot overwrite what a later producer stored.
* A producer that raises: the exception reaches its caller; the lock passes to the next caller in
  line, which finds no value and runs its own producer.

The asyncio twin is :func:`django_redis_coord.asyncio.cache_fill.aget_or_set`; the shared code is
in :mod:`django_redis_coord._cache_fill_base`.  See docs/caching.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from django.core.cache import DEFAULT_CACHE_ALIAS
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from redis.exceptions import LockError

from ._arguments import Number
from ._cache_fill_base import DEFAULT_LOCK_TIMEOUT, Fill, FillLockSettings, Flights, check_produced, prepare, written
from .locks import Lock
from .scripts import sync_scripts

__all__ = ["get_or_set", "DEFAULT_LOCK_TIMEOUT"]

T = TypeVar("T")


class _Flight:
    """One fill in this process: ``raw`` is what its leader read or stored (``None``: nothing)."""

    __slots__ = ("raw", "done")

    def __init__(self) -> None:
        self.raw: Optional[bytes] = None
        self.done = threading.Event()


_flights = Flights()


class FillLock(FillLockSettings, Lock):
    """The lock guarding the fills of one cache key (its metadata kept for a minute, not a day)."""


def get_or_set(
    key: str,
    producer: Callable[[], T],
    timeout: Optional[Number] = DEFAULT_TIMEOUT,
    version: Optional[int] = None,
    *,
    cache: str = DEFAULT_CACHE_ALIAS,
    lock_timeout: Number = DEFAULT_LOCK_TIMEOUT,
    wait_timeout: Optional[Number] = None,
    auto_renew: bool = True,
) -> T:
    """The value of ``key`` in the cache ``cache`` (an alias of ``CACHES``); on a miss, the value
    ``producer()`` returns, stored with ``timeout`` (as ``cache.set`` takes it), by one caller only.

    ``lock_timeout``: seconds the fill lock lives unless renewed (with ``auto_renew``, the default,
    it is renewed every ``lock_timeout / 3`` while the producer runs): a producer that dies is
    replaced that long after its last renewal.  ``wait_timeout``: at most that many seconds of
    waiting for another caller's value, then :class:`~django_redis_coord.exceptions.LockAcquireTimeout`
    (``None``: no limit).  A ``timeout`` of 0 or less stores nothing (as in Django): the producer
    runs, without a lock.  Raises :class:`~django_redis_coord.exceptions.UnsupportedCacheBackend` for a
    cache that is not django-redis nor Django's ``RedisCache``.

    >>> from django_redis_coord.cache_fill import get_or_set          # doctest: +SKIP
    >>> get_or_set("report:2026", build_report, timeout=300)           # doctest: +SKIP
    """
    fill = prepare(key, producer, timeout, version, cache, lock_timeout, wait_timeout, auto_renew)
    if not fill.stores:
        value = producer()
        check_produced(value, fill.key)
        return value
    while True:
        flight, leading = _flights.join(fill.flight_key, _Flight)
        if leading:  # the others of this process asking for the key wait for this one's outcome
            found = None
            try:
                found = fill.access.client.get(fill.key)
                if found is not None:
                    return fill.access.decode(found)  # type: ignore[no-any-return]
                value, found = _fill(fill, producer)
                return value  # type: ignore[no-any-return]
            finally:
                _flights.leave(fill.flight_key, flight)
                flight.raw = found
                flight.done.set()
        if not flight.done.wait(fill.remaining()):
            raise fill.timed_out()
        if flight.raw is not None:
            return fill.access.decode(flight.raw)  # type: ignore[no-any-return]
        # The leader's producer raised (or its value could not be stored): try again.


def _fill(fill: Fill, producer: Callable[[], Any]) -> tuple[Any, Optional[bytes]]:
    """Take the fill lock, then read the value a previous holder stored, or produce and store it.
    Returns what the caller returns and the stored bytes (``None`` when nothing is stored).

    A caller that had to wait in line was handed the lock by a holder that, almost always, has
    just stored the value: it passes the lock on *before* reading, so that each process in line
    costs the next one a hand-off, not a hand-off and a read.  When the value is not there (that
    holder failed or died), it takes the lock again and, holding it, reads and produces."""
    client = fill.access.client
    lock = FillLock(client, fill.lock_name, **fill.lock_arguments())
    if not lock.acquire(blocking=False):
        if not lock.acquire(blocking_timeout=fill.remaining()):
            raise fill.timed_out()
        _release(lock)
        raw = client.get(fill.key)
        if raw is not None:
            return fill.access.decode(raw), raw
        if not lock.acquire(blocking_timeout=fill.remaining()):
            raise fill.timed_out()
    try:
        raw = client.get(fill.key)
        if raw is not None:
            return fill.access.decode(raw), raw
        value = producer()
        check_produced(value, fill.key)
        encoded = fill.access.encode(value)
        script = sync_scripts.get(client, "cache_fill_set")
        reply = script(fill.write_keys(), fill.write_args(lock.local.token, encoded), client=client)
        return written(fill, reply, value, encoded, lock.fence)
    finally:
        _release(lock)


def _release(lock: FillLock) -> None:
    try:
        lock.release()
    except LockError:  # the hold ended first (its TTL): the next in line already has the lock
        pass
