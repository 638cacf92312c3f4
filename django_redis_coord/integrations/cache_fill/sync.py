# Generated from django_redis_coord/integrations/cache_fill/aio.py by `python3 dev.py twins`: edit that file, not this one.
"""Single-flight cache fills (cache stampede protection) for Django's Redis caches.

:func:`get_or_set` is Django's ``cache.get_or_set(key, default, timeout, version)`` where, on a
miss, exactly one caller runs ``producer`` and the others wait for its value:

* Across processes they wait on the key's fenced
  :class:`~django_redis_coord.ReadWriteLock`: the producer holds its write side, the others
  queue for its read side (no polling), and the script that ends the write grants every queued
  reader at once and wakes each through its process's waiting connection: the waiting processes
  read the value together, none waits for another.  Within a process, one caller per key waits
  in that queue and the others wait for it
  (:class:`~django_redis_coord.integrations.cache_fill.rules.Flights`).
* A producer that dies is replaced when its lock's TTL (``lock_timeout``) ends.
* The write is fenced: ``lua/cache_fill_set.lua`` writes the value only while the lock is still
  held with the producer's token, in the same script, so a producer whose hold ended (paused past
  its TTL) cannot overwrite what a later producer stored.
* A producer that raises: the exception reaches its caller; the waiting callers find no value and
  queue for the write side, the first of them produces (the others, in turn, find its value).

Over ``redis.asyncio`` the function is named as Django names the asyncio form of a cache method
(``a`` + name, in ``django_redis_coord.asyncio``), with the same arguments and behaviour,
a client per event loop with the cache's connection parameters and the asyncio
:class:`~django_redis_coord.asyncio.ReadWriteLock`; there ``producer`` may also return an
awaitable (a coroutine function's), which is awaited, and within one event loop, one task per key
waits in the fill lock's queue and the others wait for it.  The sync module is generated from the
asyncio one (docs/twins.md); the shared code is in
:mod:`django_redis_coord.integrations.cache_fill.rules`.  See docs/caching.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, TypeVar

from django.core.cache import DEFAULT_CACHE_ALIAS
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from redis.exceptions import LockError

from ...config.cache_backends import cache_redis_client
from ...core.arguments import Number
from ...core.rwlock.sync import ReadWriteLock, RWHold
from ...core.scripts import sync_scripts
from ...core.side.sync import Event, call, scope, wait_event
from .rules import DEFAULT_LOCK_TIMEOUT, Fill, FillLockSettings, Flights, check_produced, prepare, written

__all__ = ["get_or_set", "DEFAULT_LOCK_TIMEOUT"]

T = TypeVar("T")

_flights = Flights()


class _Flight:
    """One fill in this process: ``raw`` is what its leader read or stored (``None``: nothing)."""

    __slots__ = ("raw", "done")

    def __init__(self) -> None:
        self.raw: Optional[bytes] = None
        self.done = Event()


class FillLock(FillLockSettings, ReadWriteLock):
    """The read-write lock guarding the fills of one cache key (its metadata kept for a minute, not a day)."""


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
    (``None``: no limit).  A ``timeout`` of 0 or less stores nothing, as in Django: a cached value
    is returned, and on a miss the producer runs, without a lock, its value stored nowhere.
    Raises :class:`~django_redis_coord.exceptions.UnsupportedCacheBackend` for a cache that is not
    django-redis nor Django's ``RedisCache``.

    >>> get_or_set("report:2026", build_report, timeout=300)    # doctest: +SKIP
    """
    fill = prepare(key, producer, timeout, version, cache, lock_timeout, wait_timeout, auto_renew)
    client = cache_redis_client(fill.access.alias)
    found = client.get(fill.key)
    if found is not None:  # a hit: one GET, as the cache's own get_or_set
        return fill.access.decode(found)  # type: ignore[no-any-return]
    if not fill.stores:
        return _produce(producer, fill.key)  # type: ignore[no-any-return]
    flight_key = (scope(), *fill.flight_key)  # in asyncio, a flight is one event loop's
    while True:
        flight, leading = _flights.join(flight_key, _Flight)
        if leading:  # the others of this process (loop) asking for the key wait for this one's outcome
            found = None
            try:
                value, found = _fill(fill, client, producer)
                return value  # type: ignore[no-any-return]
            finally:
                _flights.leave(flight_key, flight)
                flight.raw = found
                flight.done.set()
        if not wait_event(flight.done, fill.remaining()):
            raise fill.timed_out()
        if flight.raw is not None:
            return fill.access.decode(flight.raw)  # type: ignore[no-any-return]
        # The leader's producer raised (or its value could not be stored): try again.


def _produce(producer: Callable[[], Any], key: bytes) -> Any:
    """What ``producer()`` gives: a sync producer must give the value itself; in asyncio, an
    awaitable it returns is awaited."""
    value = call(producer)
    check_produced(value, key)
    return value


def _fill(fill: Fill, client: Any, producer: Callable[[], Any]) -> tuple[Any, Optional[bytes]]:
    """Take the fill lock's write side, then read the value a previous holder stored, or produce and
    store it.  Returns what the caller returns and the stored bytes (``None`` when nothing is stored).

    While another caller holds the write side, wait for its read side: the release of the write
    grants every reader queued behind it together, and each reads the value the writer has, almost
    always, just stored.  When the value is not there (that writer failed or died), queue for the
    write side and, holding it, read and produce."""
    lock = FillLock(client, fill.lock_name, **fill.lock_arguments())
    if not lock.write.acquire(blocking=False):
        if not lock.read.acquire(blocking_timeout=fill.remaining()):
            raise fill.timed_out()
        try:
            raw = client.get(fill.key)
        finally:
            _release(lock.read)
        if raw is not None:
            return fill.access.decode(raw), raw
        if not lock.write.acquire(blocking_timeout=fill.remaining()):
            raise fill.timed_out()
    try:
        raw = client.get(fill.key)
        if raw is not None:
            return fill.access.decode(raw), raw
        value = _produce(producer, fill.key)
        encoded = fill.access.encode(value)
        script = sync_scripts.get(client, "cache_fill_set")
        reply = script(fill.write_keys(), fill.write_args(lock, encoded), client=client)
        return written(fill, reply, value, encoded, lock.write.fence)
    finally:
        _release(lock.write)


def _release(hold: RWHold) -> None:
    try:
        hold.release()
    except LockError:  # the hold ended first (its TTL): the queue was served then
        pass
