"""Redis clients built from ``DJANGO_REDIS_COORD`` (see :mod:`django_redis_coord.conf`).

:func:`get_client` returns one pooled sync client per process; :func:`get_async_client` one
``redis.asyncio`` client per event loop (asyncio connections belong to the loop that made them).
Both come from the same settings:

* ``CACHE_ALIAS`` (or, with no source set, the ``default`` cache): the client of a django-redis
  cache (``django_redis.get_redis_connection``) or of Django's built-in ``RedisCache``.  The
  asyncio client reuses that cache's connection parameters (host, port, db, password, TLS,
  timeouts; Sentinel pools keep their sentinels and service name).
* ``URL`` plus ``CLIENT_OPTIONS`` (redis-py keyword arguments).
* ``SENTINEL``: ``{"SENTINELS": [(host, port), ...], "SERVICE_NAME": ..., "DB": 0,
  "SENTINEL_KWARGS": {...}}``; the client talks to the current master.
* ``CLUSTER``: ``True`` (the URL is a seed node) or ``{"STARTUP_NODES": [...], "OPTIONS": {...}}``.

Nothing here runs at import time, and building a client never connects: the first command does.
For the sources configured here (not a cache), ``socket_connect_timeout`` defaults to 2 s and
``socket_timeout`` to 5 s so that a server that stops answering fails a request (503 from
``@locked``) instead of hanging it; ``CLIENT_OPTIONS`` overrides both.

>>> from django_redis_coord.connection import get_client   # doctest: +SKIP
>>> get_client().ping()                                     # doctest: +SKIP
True
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from ..core.concurrency import drop_closed_loops
from .defaults import DEFAULT_CLIENT_OPTIONS, REDIS_CACHE_BACKENDS, SETTING_NAME
from .redis_options import for_asyncio, mirror_async
from .settings import CoordSettings, coord_settings, prefixed, unprefixed

__all__ = [
    "get_client",
    "get_async_client",
    "prefixed",
    "unprefixed",
    "describe_connection",
    "mirror_async",
    "reset_clients",
    "DEFAULT_CLIENT_OPTIONS",
]

_lock = threading.Lock()
_sync_client: Optional[Any] = None
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
#: The settings the clients were built from: when :func:`coord_settings` gives others (its cache
#: was cleared by ``setting_changed``), the clients are built again.
_built_from: Optional[CoordSettings] = None


def reset_clients() -> None:
    """Forget the clients built so far; the next call builds new ones from the current settings."""
    global _sync_client, _redlock_masters
    with _lock:
        _sync_client = None
        _async_clients.clear()
        _redlock_masters = None
        _async_redlock_masters.clear()


def _current_settings() -> CoordSettings:
    """The settings, after forgetting the clients built from earlier ones."""
    global _built_from
    settings = coord_settings()
    if settings is not _built_from:
        reset_clients()
        _built_from = settings
    return settings


# -- sync ----------------------------------------------------------------------------------------
def get_client() -> Any:
    """The process's sync client (``redis.Redis`` or ``redis.cluster.RedisCluster``)."""
    settings = _current_settings()
    client = _sync_client
    if client is not None:
        return client
    with _lock:
        if _sync_client is None:
            _set_sync(_build_sync(settings))
        return _sync_client


def _set_sync(client: Any) -> None:
    global _sync_client
    _sync_client = client


def _options(settings: CoordSettings) -> dict[str, Any]:
    return {**DEFAULT_CLIENT_OPTIONS, **settings.client_options}


def _node(node: Any) -> tuple[str, int]:
    if isinstance(node, str):
        host, _, port = node.rpartition(":")
        return host, int(port)
    host, port = node
    return host, int(port)


def _cache_backend(alias: str) -> str:
    from django.conf import settings as django_settings

    return REDIS_CACHE_BACKENDS[django_settings.CACHES[alias]["BACKEND"]]


def _build_sync(settings: CoordSettings) -> Any:
    if settings.source == "cache":
        alias = settings.cache_alias or "default"
        if _cache_backend(alias) == "django-redis":
            from django_redis import get_redis_connection

            return get_redis_connection(alias, write=True)
        from .cache_backends import cache_redis_client

        return cache_redis_client(alias)  # Django's RedisCache has no public way to its own client
    return _build(settings, asyncio=False)


def _build(settings: CoordSettings, *, asyncio: bool) -> Any:
    """A client for the URL, Sentinel or Cluster source, from redis-py's sync or asyncio library."""
    if asyncio:
        from redis.asyncio import Redis
        from redis.asyncio.cluster import ClusterNode, RedisCluster
        from redis.asyncio.sentinel import Sentinel
    else:
        from redis import Redis  # type: ignore[assignment]
        from redis.cluster import ClusterNode, RedisCluster  # type: ignore[assignment]
        from redis.sentinel import Sentinel  # type: ignore[assignment]

    def options(extra: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
        merged = {**_options(settings), **(extra or {})}
        return for_asyncio(merged) if asyncio else merged

    if settings.source == "sentinel":
        sentinel_conf = settings.sentinel or {}
        merged = options()
        # The sentinels get the same timeouts and retry policy as the master unless SENTINEL_KWARGS
        # says otherwise: a sentinel that stops answering must fail a request as quickly.
        to_sentinels = {key: value for key, value in merged.items() if key.startswith("socket_") or key == "retry"}
        sentinel = Sentinel(
            [_node(n) for n in sentinel_conf["SENTINELS"]],
            sentinel_kwargs={**to_sentinels, **(sentinel_conf.get("SENTINEL_KWARGS") or {})},
            **merged,
        )
        return sentinel.master_for(sentinel_conf["SERVICE_NAME"], db=sentinel_conf.get("DB", 0))
    if settings.source == "cluster":
        cluster = settings.cluster or {}
        nodes = cluster.get("STARTUP_NODES")
        if nodes:
            startup = [ClusterNode(*_node(n)) for n in nodes]
            return RedisCluster(startup_nodes=startup, **options(cluster.get("OPTIONS")))  # type: ignore[arg-type]
        return RedisCluster.from_url(str(settings.url), **options(cluster.get("OPTIONS")))
    return Redis.from_url(str(settings.url), **options())


# -- asyncio -------------------------------------------------------------------------------------
def get_async_client() -> Any:
    """The running event loop's ``redis.asyncio`` client (call it inside a coroutine)."""
    settings = _current_settings()
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is not None:
        return client
    # Built outside the lock: building never touches the network, and the sync client a cache
    # source mirrors takes the same lock.
    built = _build_async(settings)
    with _lock:
        # A WSGI server runs each async view in an event loop of its own: let the clients of the
        # loops that ended go (their sockets are closed when they are collected).
        drop_closed_loops(_async_clients)
        return _async_clients.setdefault(loop, built)


def _build_async(settings: CoordSettings) -> Any:
    if settings.source == "cache":
        return mirror_async(get_client())
    return _build(settings, asyncio=True)


# -- description ---------------------------------------------------------------------------------
def _mask(url: str) -> str:
    """``url`` with its secrets replaced by ``***``: the password in the user part or in a
    ``password`` query parameter."""
    base, question, query = url.partition("?")
    try:
        parts = urlsplit(base)
    except ValueError:  # not a URL a client could use: show nothing of it
        return "***"
    if "@" in parts.netloc:
        credentials, _, host = parts.netloc.rpartition("@")
        user, colon, _ = credentials.partition(":")
        base = urlunsplit(parts._replace(netloc=f"{user}:***@{host}" if colon else parts.netloc))
    if query:
        query = "&".join(
            f"{name}=***" if name.lower() == "password" else field
            for field in query.split("&")
            for name in [field.partition("=")[0]]
        )
    return base + question + query


def describe_connection(settings: Optional[CoordSettings] = None) -> str:
    """Where the locks live, for people (passwords masked); never connects."""
    settings = settings or coord_settings()
    if settings.source == "cache":
        from django.conf import settings as django_settings

        alias = settings.cache_alias or "default"
        location = django_settings.CACHES[alias].get("LOCATION")
        # django-redis takes several servers, as a list or comma-separated.
        urls = [str(each) for each in location] if isinstance(location, (list, tuple)) else str(location).split(",")
        return f"cache {alias!r} ({','.join(_mask(url) for url in urls)})"
    if settings.source == "sentinel":
        sentinel_conf = settings.sentinel or {}
        nodes = ", ".join("{}:{}".format(*_node(n)) for n in sentinel_conf.get("SENTINELS", ()))
        return f"sentinel service {sentinel_conf.get('SERVICE_NAME')!r} via {nodes}"
    if settings.source == "cluster":
        nodes_conf = (settings.cluster or {}).get("STARTUP_NODES")
        if nodes_conf:
            return "cluster via " + ", ".join("{}:{}".format(*_node(n)) for n in nodes_conf)
        return f"cluster via {_mask(settings.url or '')}"
    return _mask(settings.url or "")


# -- Redlock masters -------------------------------------------------------------------------------
# ``REDLOCK = {"MASTERS": [url, ...]}``: one client per independent master, for
# django_redis_coord.Redlock (``Redlock(get_redlock_masters(), name, ...)``).
_redlock_masters: Optional[tuple[Any, ...]] = None
_async_redlock_masters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, ...]] = (
    weakref.WeakKeyDictionary()
)


def _redlock_urls(settings: CoordSettings) -> list[str]:
    if not settings.redlock:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{SETTING_NAME}['REDLOCK']['MASTERS'] is not set: Redlock needs masters.")
    return [str(url) for url in settings.redlock["MASTERS"]]


def get_redlock_masters() -> tuple[Any, ...]:
    """The process's sync clients of ``REDLOCK["MASTERS"]`` (with ``CLIENT_OPTIONS``)."""
    global _redlock_masters
    settings = _current_settings()
    masters = _redlock_masters
    if masters is None:
        from redis import Redis

        built = tuple(Redis.from_url(url, **_options(settings)) for url in _redlock_urls(settings))
        with _lock:
            if _redlock_masters is None:
                _redlock_masters = built
            masters = _redlock_masters
    return masters


def get_async_redlock_masters() -> tuple[Any, ...]:
    """The running event loop's ``redis.asyncio`` clients of ``REDLOCK["MASTERS"]``."""
    from redis.asyncio import Redis

    settings = _current_settings()
    loop = asyncio.get_running_loop()
    masters = _async_redlock_masters.get(loop)
    if masters is None:
        options = for_asyncio(_options(settings))
        built = tuple(Redis.from_url(url, **options) for url in _redlock_urls(settings))
        with _lock:
            drop_closed_loops(_async_redlock_masters)  # as for get_async_client()
            masters = _async_redlock_masters.setdefault(loop, built)
    return masters
