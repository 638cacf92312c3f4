"""The asyncio twin of :func:`django_redis_coord.get_or_set`: :func:`aget_or_set`.

Named as Django names the asyncio form of a cache method (``cache.aget_or_set``).  Same
arguments and behaviour as :func:`~django_redis_coord.get_or_set`, over
``redis.asyncio`` (a client per event loop with the cache's connection parameters) and the asyncio
:class:`~django_redis_coord.asyncio.ReadWriteLock`; ``producer`` may be a plain callable or return an
awaitable (an ``async def`` function), which is awaited.  Within one event loop, one task per key
waits in the fill lock's queue and the others wait for it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Optional, TypeVar, Union, overload

from django.core.cache import DEFAULT_CACHE_ALIAS
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from redis.exceptions import LockError

from ...config.cache_backends import async_cache_client
from ...core.arguments import Number
from ...core.rwlock.aio import ReadWriteLock, RWHold
from ...core.scripts import async_scripts
from .rules import DEFAULT_LOCK_TIMEOUT, Fill, FillLockSettings, Flights, prepare, written

__all__ = ["aget_or_set", "DEFAULT_LOCK_TIMEOUT"]

T = TypeVar("T")

_flights = Flights()


class FillLock(FillLockSettings, ReadWriteLock):
    """The read-write lock guarding the fills of one cache key (its metadata kept for a minute, not a day)."""


# A producer returning an awaitable (an ``async def`` function) gives the awaited type; any other, its own.
@overload
async def aget_or_set(key: str, producer: Callable[[], Awaitable[T]], timeout: Optional[Number] = ...,
                      version: Optional[int] = ..., *, cache: str = ..., lock_timeout: Number = ...,
                      wait_timeout: Optional[Number] = ..., auto_renew: bool = ...) -> T: ...
@overload
async def aget_or_set(key: str, producer: Callable[[], T], timeout: Optional[Number] = ...,
                      version: Optional[int] = ..., *, cache: str = ..., lock_timeout: Number = ...,
                      wait_timeout: Optional[Number] = ..., auto_renew: bool = ...) -> T: ...
async def aget_or_set(
    key: str,
    producer: Union[Callable[[], Awaitable[T]], Callable[[], T]],
    timeout: Optional[Number] = DEFAULT_TIMEOUT,
    version: Optional[int] = None,
    *,
    cache: str = DEFAULT_CACHE_ALIAS,
    lock_timeout: Number = DEFAULT_LOCK_TIMEOUT,
    wait_timeout: Optional[Number] = None,
    auto_renew: bool = True,
) -> T:
    """The asyncio form of :func:`~django_redis_coord.get_or_set` (call it in a coroutine).

    >>> from django_redis_coord import aget_or_set                    # doctest: +SKIP
    >>> await aget_or_set("report:2026", abuild_report, timeout=300)     # doctest: +SKIP
    """
    fill = prepare(key, producer, timeout, version, cache, lock_timeout, wait_timeout, auto_renew)
    client = async_cache_client(fill.access.alias)
    found = await client.get(fill.key)
    if found is not None:  # a hit: one GET, as the cache's own get_or_set
        return fill.access.decode(found)  # type: ignore[no-any-return]
    if not fill.stores:
        return await _produce(producer)  # type: ignore[no-any-return]
    flight_key = (asyncio.get_running_loop(), *fill.flight_key)
    while True:
        flight, leading = _flights.join(flight_key, asyncio.get_running_loop().create_future)
        if leading:  # the other tasks of this loop asking for the key wait for this one's outcome
            found = None
            try:
                value, found = await _fill(fill, client, producer)
                return value  # type: ignore[no-any-return]
            finally:
                _flights.leave(flight_key, flight)
                flight.set_result(found)
        try:
            raw = await asyncio.wait_for(asyncio.shield(flight), fill.remaining())
        except asyncio.TimeoutError:
            raise fill.timed_out() from None
        if raw is not None:
            return fill.access.decode(raw)  # type: ignore[no-any-return]
        # The leader's producer raised (or its value could not be stored): try again.


async def _produce(producer: Callable[[], Any]) -> Any:
    value = producer()
    if inspect.isawaitable(value):
        value = await value
    return value


async def _fill(fill: Fill, client: Any, producer: Callable[[], Any]) -> tuple[Any, Optional[bytes]]:
    """As the sync ``_fill``: take the fill lock's write side, or wait for its read side (granted to
    every waiting reader together when the write ends) and read the value; when it is missing, take
    the write side and, holding it, read the value or produce and store it."""
    lock = FillLock(client, fill.lock_name, **fill.lock_arguments())
    if not await lock.write.acquire(blocking=False):
        if not await lock.read.acquire(blocking_timeout=fill.remaining()):
            raise fill.timed_out()
        try:
            raw = await client.get(fill.key)
        finally:
            await _release(lock.read)
        if raw is not None:
            return fill.access.decode(raw), raw
        if not await lock.write.acquire(blocking_timeout=fill.remaining()):
            raise fill.timed_out()
    try:
        raw = await client.get(fill.key)
        if raw is not None:
            return fill.access.decode(raw), raw
        value = await _produce(producer)
        encoded = fill.access.encode(value)
        script = async_scripts.get(client, "cache_fill_set")
        reply = await script(fill.write_keys(), fill.write_args(lock, encoded), client=client)
        return written(fill, reply, value, encoded, lock.write.fence)
    finally:
        await _release(lock.write)


async def _release(hold: RWHold) -> None:
    try:
        await hold.release()
    except LockError:  # the hold ended first (its TTL): the queue was served then
        pass
