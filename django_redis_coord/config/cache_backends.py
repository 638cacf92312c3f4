"""The Redis server behind a Django cache, reached through public APIs only.

:func:`cache_access` gives, for a cache alias, what a cache fill needs to write a value exactly as
the cache's own ``set()`` would, and to read it as its ``get()`` does: the raw Redis client (the
server the cache writes to), the full key (``KEY_PREFIX``, ``VERSION``, ``KEY_FUNCTION``), the
encoded value (serializer, compressor) and the expiry.  Two backends are supported:

* **django-redis** (``django_redis.cache.RedisCache``, with its ``DefaultClient`` or
  ``SentinelClient``): the client is ``django_redis.get_redis_connection(alias, write=True)``
  (the cache's own pool); keys come from ``cache.make_key()``, values from the cache client's
  public ``encode()`` / ``decode()``.  ``HerdClient`` (it stores values wrapped in its own
  envelope) and ``ShardClient`` (no single server: ``get_redis_connection`` refuses it) are not
  supported.
* **Django's** ``django.core.cache.backends.redis.RedisCache``: it offers no public access to
  its raw client (only its private ``_cache`` attribute).  So a ``RedisCacheClient``, the public
  class that backend builds its client from, is built here from the alias's ``CACHES`` entry
  (``LOCATION`` split on ``;`` and ``,`` as the backend does, ``OPTIONS`` passed as they are),
  once per process; its ``get_client(write=True)`` is the first server's client, with a pool of
  its own.  Values are encoded by the serializer ``OPTIONS["serializer"]`` names (default
  ``RedisSerializer``), the one the backend's ``get()`` decodes with; keys come from
  ``cache.make_and_validate_key()``.  A subclass of that backend that swaps its client class is
  read as the base class.

Any other backend raises :class:`~django_redis_coord.exceptions.UnsupportedCacheBackend`.
:func:`async_cache_client` is the asyncio client of the same server (one per event loop and
alias; neither backend has one of its own).  Nothing here connects: the first command does.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.signals import setting_changed
from django.dispatch import receiver

from ..core.concurrency import drop_closed_loops
from ..core.exceptions import InvalidLockArgument, InvalidLockArgumentType, UnsupportedCacheBackend

__all__ = ["CacheAccess", "cache_access", "async_cache_client", "cache_redis_client", "SUPPORTED"]

#: The cache backends :func:`cache_access` works with.
SUPPORTED = ("django_redis.cache.RedisCache", "django.core.cache.backends.redis.RedisCache")

_lock = threading.Lock()
#: Per alias: its access, made once per process (every part of it is fixed by ``CACHES``).
_accesses: dict[str, CacheAccess] = {}
#: Per alias, for Django's RedisCache: the sync client and the serializer built from CACHES.
_django_clients: dict[str, tuple[Any, Any]] = {}
#: Per event loop, per alias: the asyncio client.
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = weakref.WeakKeyDictionary()


@receiver(setting_changed, dispatch_uid="django_redis_coord.cache_backends")
def on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: the clients built from ``CACHES`` are built again."""
    if setting == "CACHES":
        with _lock:
            _accesses.clear()
            _django_clients.clear()
            _async_clients.clear()


@dataclass(frozen=True)
class CacheAccess:
    """One cache alias, as a cache fill writes to it (see the module's docstring)."""

    alias: str
    #: "django-redis" or "django".
    backend: str
    cache: Any
    #: The sync redis-py client of the server the cache writes to.
    client: Any
    #: A value as the cache stores it (bytes, or an int stored as its digits).
    encode: Callable[[Any], Union[bytes, int]]
    #: What the cache's ``get()`` returns for the bytes it stored.
    decode: Callable[[bytes], Any]

    def make_key(self, key: str, version: Optional[int]) -> bytes:
        """The Redis key of ``key`` (the cache's ``KEY_PREFIX``, ``VERSION`` and ``KEY_FUNCTION``)."""
        if not isinstance(key, str):
            raise InvalidLockArgumentType(f"a cache key must be a str, not {type(key).__name__}", lock_name=key)
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise InvalidLockArgumentType(f"version must be an int or None, not {type(version).__name__}",
                                          lock_name=key)
        if self.backend == "django":
            made = self.cache.make_and_validate_key(key, version=version)
        else:
            made = self.cache.make_key(key, version=version)
        return str(made).encode()

    @functools.cached_property
    def default_expiry_ms(self) -> Optional[int]:
        """:meth:`expiry_ms` of the cache's default timeout (``TIMEOUT``), worked out once."""
        return self._expiry_ms(self.cache.default_timeout)

    def expiry_ms(self, timeout: Any) -> Optional[int]:
        """The expiry the cache's ``set(key, value, timeout)`` gives, in ms: ``None`` for none,
        0 when it stores nothing (a timeout of 0 or less, as Django's caches read it)."""
        if timeout is DEFAULT_TIMEOUT:
            return self.default_expiry_ms
        return self._expiry_ms(timeout)

    def _expiry_ms(self, timeout: Any) -> Optional[int]:
        if timeout is None:
            return None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise InvalidLockArgumentType(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
        if timeout != timeout or timeout in (float("inf"), float("-inf")):
            raise InvalidLockArgument(f"timeout must be finite, got {timeout!r}")
        if self.backend == "django":  # whole seconds, as the backend's set() sends them
            seconds = self.cache.get_backend_timeout(timeout)
            return None if seconds is None else int(seconds) * 1000
        return max(0, int(timeout * 1000))  # django-redis sends PX milliseconds


def _django_redis(alias: str, cache: Any) -> CacheAccess:
    from django_redis import get_redis_connection
    from django_redis.client import DefaultClient, HerdClient, ShardClient

    client_class = type(cache.client)
    if not issubclass(client_class, DefaultClient) or issubclass(client_class, (HerdClient, ShardClient)):
        raise UnsupportedCacheBackend(
            f"cache {alias!r} uses django-redis's {client_class.__name__}: a cache fill needs one server and the "
            "values stored as DefaultClient stores them (DefaultClient or SentinelClient)",
            lock_name=alias,
        )
    client = cache.client
    return CacheAccess(alias, "django-redis", cache, get_redis_connection(alias, write=True), client.encode,
                       client.decode)


def _location(location: Any) -> list[str]:
    """The servers of a Django RedisCache's ``LOCATION``, split as the backend splits it."""
    return re.split("[;,]", location) if isinstance(location, str) else list(location)


def _django_parts(alias: str) -> tuple[Any, Any]:
    """The sync client and serializer of Django's RedisCache ``alias``, built once per process."""
    built = _django_clients.get(alias)
    if built is not None:
        return built
    from django.conf import settings
    from django.core.cache.backends.redis import RedisCacheClient, RedisSerializer
    from django.utils.module_loading import import_string

    config = settings.CACHES[alias]
    options = dict(config.get("OPTIONS") or {})
    serializer = options.get("serializer")
    if isinstance(serializer, str):
        serializer = import_string(serializer)
    if callable(serializer):
        serializer = serializer()
    client = RedisCacheClient(_location(config.get("LOCATION", "")), **options).get_client(None, write=True)
    with _lock:
        return _django_clients.setdefault(alias, (client, serializer or RedisSerializer()))


def _django(alias: str, cache: Any) -> CacheAccess:
    client, serializer = _django_parts(alias)
    return CacheAccess(alias, "django", cache, client, serializer.dumps, serializer.loads)


def cache_access(alias: str) -> CacheAccess:
    """The cache ``alias`` (``django.core.cache.caches[alias]``) as a cache fill uses it.

    Raises Django's ``InvalidCacheBackendError`` for an alias ``CACHES`` lacks, and
    :class:`~django_redis_coord.exceptions.UnsupportedCacheBackend` for a cache that is not one of
    :data:`SUPPORTED` (``LocMemCache``, memcached, the database cache, ...).  Made once per alias
    and process (again when ``CACHES`` changes): a cache's key function, serializer, default
    timeout and client pool are fixed by its settings, whichever thread's cache object reads them.
    """
    if not isinstance(alias, str):
        raise InvalidLockArgumentType(f"cache must be the alias of a cache (a str), not {type(alias).__name__}")
    access = _accesses.get(alias)
    if access is not None:
        return access
    made = _access(alias)
    with _lock:
        return _accesses.setdefault(alias, made)


def _access(alias: str) -> CacheAccess:
    from django.core.cache import caches
    from django.core.cache.backends.redis import RedisCache

    cache = caches[alias]
    if isinstance(cache, RedisCache):
        return _django(alias, cache)
    from django_redis.cache import RedisCache as DjangoRedisCache

    if isinstance(cache, DjangoRedisCache):
        return _django_redis(alias, cache)
    kind = f"{type(cache).__module__}.{type(cache).__qualname__}"
    raise UnsupportedCacheBackend(
        f"cache {alias!r} is a {kind}: a cache fill needs a Redis cache ({' or '.join(SUPPORTED)})",
        lock_name=alias,
    )


def cache_redis_client(alias: str) -> Any:
    """The sync redis-py client of the server the cache ``alias`` writes to."""
    return cache_access(alias).client


def async_cache_client(alias: str) -> Any:
    """The running event loop's ``redis.asyncio`` client of the server the cache ``alias`` writes
    to, with the sync client's connection parameters (call it inside a coroutine)."""
    from .redis_options import mirror_async

    loop = asyncio.get_running_loop()
    per_alias = _async_clients.get(loop)
    client = per_alias.get(alias) if per_alias is not None else None
    if client is not None:
        return client
    built = mirror_async(cache_redis_client(alias))
    with _lock:
        drop_closed_loops(_async_clients)
        return _async_clients.setdefault(loop, {}).setdefault(alias, built)
