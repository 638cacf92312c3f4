"""redis-py's client arguments and URLs, checked the way redis-py reads them (never connects):
the options a client, pool or connection takes, whether redis-py would refuse a URL with them, and
the same options for ``redis.asyncio`` (:func:`mirror_async`: an asyncio client with a sync client's
connection parameters)."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

from . import check_ids as ids
from .defaults import DEFAULT_CLIENT_OPTIONS, SETTING_NAME, Problem

__all__ = ["url_problem", "init_parameters", "client_parameters", "option_names", "suggested_names",
           "unknown_option_problems",
           "options_refused", "host_port_problem", "close_hint", "is_number", "for_asyncio", "mirror_async"]


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


URL_HINT = 'Use a URL such as "redis://127.0.0.1:6379/0", "rediss://host:6380/0" or "unix:///path/redis.sock?db=0".'


def url_problem(key: str, url: object, *, client: bool = True) -> Optional[Problem]:
    """What is wrong with a Redis URL, read the way redis-py reads it (never connects).

    ``client``: a standalone client is built from the URL (``Redis.from_url``), so the URL alone
    must give redis-py a connection it accepts; a Cluster seed URL is read by ``RedisCluster``.
    """
    if not isinstance(url, str) or not url:
        return Problem(
            ids.BAD_URL, f"{SETTING_NAME}[{key!r}] must be a non-empty string URL, not {url!r}.", URL_HINT
        )
    from redis.connection import parse_url

    try:
        parse_url(url)  # the scheme, the host, the port, the query options' values
    except ValueError as exc:
        return Problem(ids.BAD_URL, f"{SETTING_NAME}[{key!r}] is refused by redis-py: {exc}",
                       f"{URL_HINT} Give each query option a value of its type, e.g. ?socket_timeout=0.5.")
    # What redis-py reads without complaint yet not as written: a database that is not a number
    # (it connects to database 0) and a socket URL without a path (it fails at the first command).
    parts = urlsplit(url)
    if parts.scheme == "unix":
        if not parts.path:
            return Problem(ids.BAD_URL, f"{SETTING_NAME}[{key!r}] names no socket path.", URL_HINT)
    else:
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            return Problem(
                ids.BAD_URL,
                f"{SETTING_NAME}[{key!r}] has the database {db!r}; it must be a number.",
                URL_HINT,
            )
    kind = "client" if client else "cluster"
    names = option_names(kind)
    for option in parse_qs(parts.query):
        if option not in names:
            return Problem(
                ids.BAD_URL,
                f"{SETTING_NAME}[{key!r}] has the query option {option!r}, which redis-py does not know.",
                close_hint(option, suggested_names(kind))
                or "Query options are redis-py connection arguments, e.g. ?db=2.",
            )
    if client:
        refused = _url_refused(url)
        if refused:
            return Problem(ids.BAD_URL, f"{SETTING_NAME}[{key!r}] is refused by redis-py: {refused}",
                           URL_HINT)
    return None


# -- redis-py client arguments -----------------------------------------------------------------
def init_parameters(cls: type, *, inherited: bool = False) -> set[str]:
    """The keyword arguments ``cls(...)`` takes; with ``inherited``, also those its ``**kwargs``
    hands on to the ``__init__`` of its base classes."""
    names: set[str] = set()
    for klass in cls.__mro__ if inherited else (cls,):
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    names.discard("self")
    return names


def client_parameters(library: Any) -> set[str]:
    """The keyword arguments a client of ``library`` (``redis`` or ``redis.asyncio``) takes for
    itself, its pool and its connections (TCP, TLS, Unix socket)."""
    names = init_parameters(library.Redis) | init_parameters(library.ConnectionPool)
    for connection_class in (library.Connection, library.SSLConnection, library.UnixDomainSocketConnection):
        names |= init_parameters(connection_class, inherited=True)
    return names


@functools.cache
def option_names(kind: str) -> frozenset[str]:
    """Every keyword argument the installed redis-py accepts for a client of ``kind``: "client"
    (``Redis``, its pool and connections), "cluster" (plus ``RedisCluster``), "sentinel" (plus
    ``Sentinel``) or "sentinel_kwargs" (the sentinels' own ``Redis``)."""
    import redis
    from redis.cluster import RedisCluster
    from redis.sentinel import Sentinel

    if kind == "sentinel_kwargs":
        return frozenset(init_parameters(redis.Redis))
    names = client_parameters(redis)
    if kind == "cluster":
        names |= init_parameters(RedisCluster) - {"startup_nodes", "url"}
    elif kind == "sentinel":
        names |= init_parameters(Sentinel) - {"sentinels", "sentinel_kwargs"}
    return frozenset(names)


@functools.cache
def suggested_names(kind: str) -> frozenset[str]:
    """The options of :func:`option_names` a "did you mean" may offer: the arguments of the
    constructors redis-py documents for a client of ``kind`` (``Redis``, ``ConnectionPool``,
    ``RedisCluster``, ``Sentinel``).  The arguments only its connection classes take are left out:
    most are internals its pools fill in themselves (``orig_socket_timeout``, ``maintenance_state``,
    ``command_packer``...), accepted when given but never worth suggesting."""
    import redis
    from redis.cluster import RedisCluster
    from redis.sentinel import Sentinel

    if kind == "sentinel_kwargs":
        return option_names(kind)
    names = init_parameters(redis.Redis) | init_parameters(redis.ConnectionPool)
    if kind == "cluster":
        names |= init_parameters(RedisCluster)
    elif kind == "sentinel":
        names |= init_parameters(Sentinel)
    return frozenset(names & option_names(kind))


def close_hint(name: object, names: frozenset[str]) -> Optional[str]:
    close = difflib.get_close_matches(str(name), sorted(names), n=3)
    if not close:
        return None
    return f"Did you mean {' or '.join(repr(c) for c in close)}?"


def unknown_option_problems(where: str, options: Mapping[str, Any], kind: str) -> list[Problem]:
    names = option_names(kind)
    return [
        Problem(
            ids.UNKNOWN_REDIS_OPTION,
            f"{SETTING_NAME}{where} has the option {key!r}, which redis-py does not accept.",
            close_hint(key, suggested_names(kind)) or "Use keyword arguments of redis.Redis (e.g. socket_timeout, "
            "health_check_interval, retry_on_timeout, ssl_ca_certs).",
        )
        for key in options
        if key not in names
    ]


@functools.lru_cache(maxsize=64)
def _url_refused(url: str) -> Optional[str]:
    return _refused(url, {})


def _refused(url: str, options: Mapping[str, Any]) -> Optional[str]:
    """Why redis-py would refuse a connection made from ``url`` and ``options`` (None: it would
    not).  Builds the pool and one connection object as ``Redis.from_url`` does; never connects."""
    from redis import ConnectionPool

    kwargs = dict(options)
    kwargs.pop("single_connection_client", None)  # taken by Redis.from_url, not the pool
    try:
        pool = ConnectionPool.from_url(url, **kwargs)
        pool.connection_class(**pool.connection_kwargs)
    except Exception as exc:  # noqa: BLE001 - whatever redis-py raises is what a request would raise
        return f"{type(exc).__name__}: {exc}"
    return None


def host_port_problem(key: str, node: object) -> Optional[Problem]:
    """A node given as ``("host", port)`` or ``"host:port"``."""
    if isinstance(node, str) and ":" in node:
        host, _, port = node.rpartition(":")
        if host and port.isdigit():
            return None
    elif isinstance(node, (list, tuple)) and len(node) == 2:
        host, port = node
        if isinstance(host, str) and host and isinstance(port, int) and not isinstance(port, bool):
            return None
    return Problem(
        ids.BAD_SENTINEL if key.startswith("SENTINEL") else ids.BAD_CLUSTER,
        f"{SETTING_NAME}[{key!r}] contains {node!r}, which is not a node address.",
        'Give each node as ("host", port) or "host:port".',
    )


def options_refused(options: Mapping[str, Any], values: Mapping[str, Any], *, client_url: bool) -> list[Problem]:
    """``CLIENT_OPTIONS`` redis-py would refuse with the URL the client or a Redlock master is
    built from (every request would raise it); checked without connecting."""
    urls = [("URL", values["URL"])] if client_url else []
    redlock = values["REDLOCK"]
    masters = redlock.get("MASTERS") if isinstance(redlock, Mapping) else None
    if isinstance(masters, (list, tuple)):
        urls += [(f"REDLOCK['MASTERS'][{i}]", master) for i, master in enumerate(masters)]
    merged = {**DEFAULT_CLIENT_OPTIONS, **options}
    problems = []
    for where, url in urls:
        if url_problem(where, url) is not None:
            continue  # reported as E006 / E015
        refused = _refused(url, merged)
        if refused:
            problems.append(
                Problem(
                    ids.CLIENT_OPTIONS_REFUSED,
                    f"{SETTING_NAME}['CLIENT_OPTIONS'] is refused by redis-py for the {where} connection: {refused}",
                    "Fix or remove the option named: every request would fail with this error.  TLS options "
                    "(ssl_*) need a rediss:// URL; TCP options (socket_keepalive...) do not apply to unix:// sockets.",
                )
            )
    return problems


# -- the same options for redis.asyncio --------------------------------------------------------------
def for_asyncio(options: Mapping[str, Any]) -> dict[str, Any]:
    """``CLIENT_OPTIONS`` minus the objects of the sync library (a sync connection class, parser,
    retry policy or pool cannot serve the asyncio client, which then uses its defaults) and the
    options only the sync library has (client-side caching, OCSP checks): the asyncio client
    goes without them."""
    from redis.asyncio.connection import AbstractConnection
    from redis.asyncio.retry import Retry

    kept = {}
    for key, value in options.items():
        if key == "connection_class" and not (isinstance(value, type) and issubclass(value, AbstractConnection)):
            continue
        if key == "retry" and not isinstance(value, Retry):
            continue
        if key in ("parser_class", "connection_pool", "redis_connect_func") or key in _sync_only_options():
            continue
        kept[key] = value
    return kept


@functools.cache
def _sync_only_options() -> frozenset[str]:
    """The keyword arguments redis-py's sync client, pool and connections take and their asyncio
    twins do not (client-side caching, OCSP checks, ...).  Options of neither (a Cluster's or a
    Sentinel's own) are not among them: they go to those clients as given."""
    import redis
    import redis.asyncio as aioredis

    return frozenset(client_parameters(redis) - client_parameters(aioredis))


#: Connection arguments that are objects of the sync library and cannot be handed to asyncio.
_SYNC_ONLY = {"parser_class", "retry", "connection_pool", "redis_connect_func", "event_dispatcher", "command_packer"}


def _async_kwargs(kwargs: Mapping[str, Any], connection_class: type) -> dict[str, Any]:
    accepted = init_parameters(connection_class, inherited=True)
    return {k: v for k, v in kwargs.items() if k in accepted and k not in _SYNC_ONLY}


def mirror_async(client: Any) -> Any:
    """A ``redis.asyncio`` client with the connection parameters of the sync ``client``."""
    import redis
    import redis.asyncio as aioredis
    from redis.sentinel import SentinelConnectionPool

    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        from redis.asyncio.sentinel import Sentinel, SentinelManagedConnection

        manager = pool.sentinel_manager
        nodes = [
            (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs.get("port", 26379))
            for s in manager.sentinels
        ]
        kwargs = _async_kwargs(pool.connection_kwargs, SentinelManagedConnection)
        sentinel = Sentinel(
            nodes,
            min_other_sentinels=manager.min_other_sentinels,
            sentinel_kwargs=for_asyncio(manager.sentinel_kwargs or {}),
        )
        return sentinel.master_for(pool.service_name, **kwargs)
    if issubclass(pool.connection_class, redis.UnixDomainSocketConnection):
        connection_class: type = aioredis.UnixDomainSocketConnection
    elif issubclass(pool.connection_class, redis.SSLConnection):
        connection_class = aioredis.SSLConnection
    else:
        connection_class = aioredis.Connection
    kwargs = _async_kwargs(pool.connection_kwargs, connection_class)
    async_pool = aioredis.ConnectionPool(
        connection_class=connection_class, max_connections=pool.max_connections, **kwargs
    )
    return aioredis.Redis(connection_pool=async_pool)
