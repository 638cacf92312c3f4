"""The ``DJANGO_REDIS_COORD`` setting: defaults, validation and a cached reader.

Settings are read through :func:`coord_settings`, never at import time, and the cached value is
dropped whenever Django sends ``setting_changed`` for ``DJANGO_REDIS_COORD`` or ``CACHES`` (the
receiver is connected in :meth:`DjangoRedisCoordConfig.ready`), so ``override_settings`` works.

Example::

    DJANGO_REDIS_COORD = {
        "CACHE_ALIAS": "default",     # or "URL": "redis://127.0.0.1:6379/0"
        "KEY_PREFIX": "shop",         # lock "orders" lives at the key "shop:orders"
        "DEFAULT_TIMEOUT": 30,        # seconds a lock lives unless renewed
    }

:func:`settings_problems` reports what is wrong with a settings dict without raising; the
system checks (``django_redis_coord.checks``) and :func:`coord_settings` share it.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Optional, Union
from urllib.parse import parse_qs, urlsplit

from .expiry import WHY, is_no_expiry

__all__ = [
    "DEFAULTS",
    "SETTING_NAME",
    "CoordSettings",
    "Problem",
    "coord_settings",
    "clear_settings_cache",
    "settings_problems",
    "prefixed",
    "unprefixed",
    "REDIS_CACHE_BACKENDS",
]

SETTING_NAME = "DJANGO_REDIS_COORD"

#: Every key of ``DJANGO_REDIS_COORD`` with its default value.
DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        # Where Redis is: at most one of CACHE_ALIAS, URL, SENTINEL (CLUSTER goes with URL or
        # its own STARTUP_NODES).  With none of them, the "default" cache is used when it is a
        # Redis cache.
        "CACHE_ALIAS": None,
        "URL": None,
        "CLIENT_OPTIONS": MappingProxyType({}),
        "SENTINEL": None,
        "CLUSTER": None,
        # Prepended to every name as "<KEY_PREFIX>:<name>".
        "KEY_PREFIX": "",
        # Lock lifetime in seconds for the factories and @locked ("never", NO_EXPIRY: no expiry).
        "DEFAULT_TIMEOUT": 60,
        # Renew holds with the watchdog by default.
        "AUTO_RENEW": False,
        # Answer of @locked when the key is taken, and when Redis cannot be reached.
        "CONTENTION_STATUS": 409,
        "CONTENTION_HANDLER": None,
        "UNAVAILABLE_STATUS": 503,
        # Run the view without the lock when Redis cannot be reached (logged).
        "FAIL_OPEN": False,
        # Independent masters for Redlock: {"MASTERS": ["redis://a:6379/0", ...]}.
        "REDLOCK": None,
    }
)

#: Cache backends a connection can be taken from.
REDIS_CACHE_BACKENDS = {
    "django_redis.cache.RedisCache": "django-redis",
    "django.core.cache.backends.redis.RedisCache": "django",
}

URL_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the settings: a system-check id (``django_redis_coord.E0xx``)."""

    id: str
    msg: str
    hint: Optional[str] = None


@dataclass(frozen=True)
class CoordSettings:
    """The validated ``DJANGO_REDIS_COORD`` with defaults filled in (read-only).

    Attributes are the lower-case setting names; ``settings["KEY_PREFIX"]`` works too.
    """

    cache_alias: Optional[str]
    url: Optional[str]
    client_options: Mapping[str, Any]
    sentinel: Optional[Mapping[str, Any]]
    cluster: Optional[Mapping[str, Any]]
    key_prefix: str
    default_timeout: Optional[float]
    auto_renew: bool
    contention_status: int
    contention_handler: Optional[Union[str, Callable[..., Any]]]
    unavailable_status: int
    fail_open: bool
    redlock: Optional[Mapping[str, Any]]
    #: Which source the connection comes from: "cache", "url", "sentinel" or "cluster".
    source: str = field(default="url")

    def __getitem__(self, key: str) -> Any:
        if key not in DEFAULTS:
            raise KeyError(key)
        return getattr(self, key.lower())

    def prefixed(self, name: Union[str, bytes]) -> Union[str, bytes]:
        """``name`` with ``KEY_PREFIX`` applied (see :func:`prefixed`)."""
        return _apply_prefix(self.key_prefix, name)

    def unprefixed(self, name: Union[str, bytes]) -> Union[str, bytes]:
        """``name`` without ``KEY_PREFIX`` (unchanged when it does not carry the prefix)."""
        return _strip_prefix(self.key_prefix, name)


def _apply_prefix(prefix: str, name: Union[str, bytes]) -> Union[str, bytes]:
    if not prefix:
        return name
    if isinstance(name, (bytes, bytearray)):
        return prefix.encode() + b":" + bytes(name)
    return f"{prefix}:{name}"


def _strip_prefix(prefix: str, name: Union[str, bytes]) -> Union[str, bytes]:
    if not prefix:
        return name
    if isinstance(name, (bytes, bytearray)):
        head = prefix.encode() + b":"
        return bytes(name)[len(head) :] if bytes(name).startswith(head) else name
    head_s = prefix + ":"
    return name[len(head_s) :] if name.startswith(head_s) else name


def prefixed(name: Union[str, bytes]) -> Union[str, bytes]:
    """Apply the configured ``KEY_PREFIX``: ``"orders"`` becomes ``"shop:orders"``."""
    return _apply_prefix(coord_settings().key_prefix, name)


def unprefixed(name: Union[str, bytes]) -> Union[str, bytes]:
    """Remove the configured ``KEY_PREFIX`` from a name read back from Redis."""
    return _strip_prefix(coord_settings().key_prefix, name)


# -- validation --------------------------------------------------------------------------------
def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


URL_HINT = 'Use a URL such as "redis://127.0.0.1:6379/0", "rediss://host:6380/0" or "unix:///path/redis.sock?db=0".'


def _url_problem(key: str, url: object, *, client: bool = True) -> Optional[Problem]:
    """What is wrong with a Redis URL, read the way redis-py reads it (never connects).

    ``client``: a standalone client is built from the URL (``Redis.from_url``), so the URL alone
    must give redis-py a connection it accepts; a Cluster seed URL is read by ``RedisCluster``.
    """
    if not isinstance(url, str) or not url:
        return Problem(
            "django_redis_coord.E006", f"{SETTING_NAME}[{key!r}] must be a non-empty string URL, not {url!r}.", URL_HINT
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return Problem("django_redis_coord.E006", f"{SETTING_NAME}[{key!r}] is not a valid URL: {exc}.", URL_HINT)
    if parts.scheme not in URL_SCHEMES:
        return Problem(
            "django_redis_coord.E006",
            f"{SETTING_NAME}[{key!r}] has the scheme {parts.scheme or '(none)'!r}; expected one of "
            f"{', '.join(URL_SCHEMES)}.",
            URL_HINT,
        )
    if parts.scheme == "unix":
        if not parts.path:
            return Problem("django_redis_coord.E006", f"{SETTING_NAME}[{key!r}] names no socket path.", URL_HINT)
    elif not parts.hostname:
        return Problem("django_redis_coord.E006", f"{SETTING_NAME}[{key!r}] names no host.", URL_HINT)
    else:
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            return Problem(
                "django_redis_coord.E006",
                f"{SETTING_NAME}[{key!r}] has the database {db!r}; it must be a number.",
                URL_HINT,
            )
    from redis.connection import parse_url

    try:
        parse_url(url)
    except ValueError as exc:
        return Problem(
            "django_redis_coord.E006",
            f"{SETTING_NAME}[{key!r}] is refused by redis-py: {exc}",
            "Give each query option a value of its type, e.g. ?db=2&socket_timeout=0.5&retry_on_timeout=yes.",
        )
    names = _option_names("client" if client else "cluster")
    for option in parse_qs(parts.query):
        if option not in names:
            return Problem(
                "django_redis_coord.E006",
                f"{SETTING_NAME}[{key!r}] has the query option {option!r}, which redis-py does not know.",
                _close_hint(option, names) or "Query options are redis-py connection arguments, e.g. ?db=2.",
            )
    if client:
        refused = _url_refused(url)
        if refused:
            return Problem("django_redis_coord.E006", f"{SETTING_NAME}[{key!r}] is refused by redis-py: {refused}",
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
def _option_names(kind: str) -> frozenset[str]:
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


def _close_hint(name: object, names: frozenset[str]) -> Optional[str]:
    close = difflib.get_close_matches(str(name), sorted(names), n=3)
    if not close:
        return None
    return f"Did you mean {' or '.join(repr(c) for c in close)}?"


def _unknown_option_problems(where: str, options: Mapping[str, Any], kind: str) -> list[Problem]:
    names = _option_names(kind)
    return [
        Problem(
            "django_redis_coord.E018",
            f"{SETTING_NAME}{where} has the option {key!r}, which redis-py does not accept.",
            _close_hint(key, names) or "Use keyword arguments of redis.Redis (e.g. socket_timeout, "
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


def _host_port_problem(key: str, node: object) -> Optional[Problem]:
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
        "django_redis_coord.E008" if key.startswith("SENTINEL") else "django_redis_coord.E009",
        f"{SETTING_NAME}[{key!r}] contains {node!r}, which is not a node address.",
        'Give each node as ("host", port) or "host:port".',
    )


def settings_problems(raw: object, caches: Optional[Mapping[str, Any]] = None) -> list[Problem]:
    """Everything wrong with the value of ``DJANGO_REDIS_COORD`` (never connects, never raises).

    ``caches`` is the ``CACHES`` setting (read from Django's settings when omitted).
    """
    if caches is None:
        from django.conf import settings

        caches = getattr(settings, "CACHES", {}) or {}
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return [
            Problem(
                "django_redis_coord.E001",
                f"{SETTING_NAME} must be a dict, not {type(raw).__name__}.",
                'For example: DJANGO_REDIS_COORD = {"URL": "redis://127.0.0.1:6379/0"}.',
            )
        ]
    problems: list[Problem] = []
    for key in raw:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(str(key), list(DEFAULTS), n=1)
            problems.append(
                Problem(
                    "django_redis_coord.E002",
                    f"{SETTING_NAME} has an unknown key {key!r}.",
                    f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(DEFAULTS)}.",
                )
            )
    values = {**DEFAULTS, **{k: v for k, v in raw.items() if k in DEFAULTS}}

    # -- connection source ----------------------------------------------------------------
    cache_alias, url, sentinel, cluster = values["CACHE_ALIAS"], values["URL"], values["SENTINEL"], values["CLUSTER"]
    sources = [name for name in ("CACHE_ALIAS", "URL", "SENTINEL") if values[name] is not None]
    if len(sources) > 1:
        problems.append(
            Problem(
                "django_redis_coord.E003",
                f"{SETTING_NAME} sets more than one connection source: {', '.join(sources)}.",
                "Keep exactly one of CACHE_ALIAS, URL and SENTINEL.",
            )
        )
    if cache_alias is not None:
        problems.extend(_cache_alias_problems(cache_alias, caches, explicit=True))
    if url is not None:
        problem = _url_problem("URL", url, client=cluster is None or cluster is False)
        if problem:
            problems.append(problem)
    if sentinel is not None:
        problems.extend(_sentinel_problems(sentinel))
    if cluster is not None and cluster is not False:
        problems.extend(_cluster_problems(cluster, values))
    if not sources and not _cluster_has_nodes(cluster):
        default = caches.get("default") if isinstance(caches, Mapping) else None
        backend = default.get("BACKEND") if isinstance(default, Mapping) else None
        if backend not in REDIS_CACHE_BACKENDS:
            problems.append(
                Problem(
                    "django_redis_coord.E014",
                    f"{SETTING_NAME} names no Redis server and the 'default' cache is not a Redis cache.",
                    'Set "URL" (e.g. "redis://127.0.0.1:6379/0") or "CACHE_ALIAS" naming a Redis cache.',
                )
            )

    options = values["CLIENT_OPTIONS"]
    if not isinstance(options, Mapping):
        problems.append(
            Problem(
                "django_redis_coord.E007",
                f"{SETTING_NAME}['CLIENT_OPTIONS'] must be a dict of redis-py client arguments.",
                'For example: {"socket_timeout": 5, "health_check_interval": 30}.',
            )
        )
    else:
        if options.get("decode_responses"):
            problems.append(
                Problem(
                    "django_redis_coord.E007",
                    f"{SETTING_NAME}['CLIENT_OPTIONS'] sets decode_responses, which lock tokens cannot use.",
                    "Remove decode_responses: the locks read raw bytes.",
                )
            )
        for name in ("socket_timeout", "socket_connect_timeout"):
            value = options.get(name)
            if value is not None and (not _is_number(value) or value <= 0):
                problems.append(
                    Problem(
                        "django_redis_coord.E007",
                        f"{SETTING_NAME}['CLIENT_OPTIONS'][{name!r}] must be a positive number of seconds, "
                        f"not {value!r}.",
                        "Leave it out for the default (socket_connect_timeout 2, socket_timeout 5): a server that "
                        "stops answering then fails a request instead of hanging it.",
                    )
                )
        kind = "cluster" if cluster is not None and cluster is not False else "sentinel" if sentinel else "client"
        unknown = _unknown_option_problems("['CLIENT_OPTIONS']", options, kind)
        problems.extend(unknown)
        if not unknown and not any(p.id == "django_redis_coord.E007" for p in problems):
            problems.extend(_options_refused(options, values, client_url=kind == "client" and url is not None))

    # -- behaviour ------------------------------------------------------------------------
    prefix = values["KEY_PREFIX"]
    if not isinstance(prefix, str):
        problems.append(
            Problem("django_redis_coord.E010", f"{SETTING_NAME}['KEY_PREFIX'] must be a str, not {prefix!r}.",
                    'For example "shop"; "" (the default) for no prefix.')
        )
    elif any(part in prefix for part in ("{", "}", ":dcoord:")):
        problems.append(
            Problem(
                "django_redis_coord.E010",
                f"{SETTING_NAME}['KEY_PREFIX'] {prefix!r} contains '{{', '}}' or ':dcoord:'.",
                "Braces would change the Redis Cluster slot of every name; use letters, digits, '-', '_', '.'.",
            )
        )
    timeout = None if is_no_expiry(values["DEFAULT_TIMEOUT"]) else values["DEFAULT_TIMEOUT"]
    if values["DEFAULT_TIMEOUT"] is None:
        problems.append(
            Problem(
                "django_redis_coord.E011",
                f"{SETTING_NAME}['DEFAULT_TIMEOUT'] is None: locks and permits taken with it would never expire, "
                f"and {WHY}.",
                'Give a number of seconds (30 or 60 are typical), or "never" (django_redis_coord.NO_EXPIRY) to '
                "ask for holds without expiry by name.",
            )
        )
    elif timeout is not None and (not _is_number(timeout) or timeout <= 0 or timeout == float("inf")):
        problems.append(
            Problem(
                "django_redis_coord.E011",
                f"{SETTING_NAME}['DEFAULT_TIMEOUT'] must be a positive number of seconds or 'never', "
                f"not {timeout!r}.",
                "Locks expire after this many seconds unless renewed; 30 or 60 are typical.",
            )
        )
    elif timeout is not None:
        problem = _lock_timeout_problem(timeout)
        if problem:
            problems.append(problem)
    if values["AUTO_RENEW"] and timeout is None and values["DEFAULT_TIMEOUT"] is not None:
        problems.append(
            Problem(
                "django_redis_coord.E011",
                f"{SETTING_NAME}['AUTO_RENEW'] needs a DEFAULT_TIMEOUT to renew.",
                "Set DEFAULT_TIMEOUT to a number of seconds.",
            )
        )
    for name in ("CONTENTION_STATUS", "UNAVAILABLE_STATUS"):
        status = values[name]
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            problems.append(
                Problem(
                    "django_redis_coord.E012",
                    f"{SETTING_NAME}[{name!r}] must be an HTTP error status (400-599), not {status!r}.",
                    "409 (Conflict), 423 (Locked) or 429 (Too Many Requests) for contention; 503 when unavailable.",
                )
            )
    for name in ("AUTO_RENEW", "FAIL_OPEN"):
        if not isinstance(values[name], bool):
            problems.append(
                Problem("django_redis_coord.E013", f"{SETTING_NAME}[{name!r}] must be True or False.",
                        f"{name} is {values[name]!r}; write True or False.")
            )
    handler = values["CONTENTION_HANDLER"]
    if handler is not None and not callable(handler):
        if not isinstance(handler, str):
            problems.append(
                Problem(
                    "django_redis_coord.E016",
                    f"{SETTING_NAME}['CONTENTION_HANDLER'] must be a callable or its dotted path.",
                    'For example "myapp.views.busy", a function taking (request, contention).',
                )
            )
        else:
            from django.utils.module_loading import import_string

            try:
                target = import_string(handler)
            except ImportError as exc:
                problems.append(
                    Problem(
                        "django_redis_coord.E016",
                        f"{SETTING_NAME}['CONTENTION_HANDLER'] {handler!r} cannot be imported: {exc}.",
                        "Give the dotted path of a function taking (request, contention), e.g. "
                        '"myapp.views.busy".',
                    )
                )
            else:
                if not callable(target):
                    problems.append(
                        Problem("django_redis_coord.E016", f"{SETTING_NAME}['CONTENTION_HANDLER'] is not callable.",
                                f"{handler!r} names {type(target).__name__} object; name a function taking "
                                "(request, contention).")
                    )
    problems.extend(_redlock_problems(values["REDLOCK"]))
    return problems


def _options_refused(options: Mapping[str, Any], values: Mapping[str, Any], *, client_url: bool) -> list[Problem]:
    """``CLIENT_OPTIONS`` redis-py would refuse with the URL the client or a Redlock master is
    built from (every request would raise it); checked without connecting."""
    from .connection import DEFAULT_CLIENT_OPTIONS

    urls = [("URL", values["URL"])] if client_url else []
    redlock = values["REDLOCK"]
    masters = redlock.get("MASTERS") if isinstance(redlock, Mapping) else None
    if isinstance(masters, (list, tuple)):
        urls += [(f"REDLOCK['MASTERS'][{i}]", master) for i, master in enumerate(masters)]
    merged = {**DEFAULT_CLIENT_OPTIONS, **options}
    problems = []
    for where, url in urls:
        if _url_problem(where, url) is not None:
            continue  # reported as E006 / E015
        refused = _refused(url, merged)
        if refused:
            problems.append(
                Problem(
                    "django_redis_coord.E007",
                    f"{SETTING_NAME}['CLIENT_OPTIONS'] is refused by redis-py for the {where} connection: {refused}",
                    "Fix or remove the option named: every request would fail with this error.  TLS options "
                    "(ssl_*) need a rediss:// URL; TCP options (socket_keepalive...) do not apply to unix:// sockets.",
                )
            )
    return problems


def _lock_timeout_problem(timeout: float) -> Optional[Problem]:
    """``DEFAULT_TIMEOUT`` checked by the very rules a lock applies to its ``timeout``."""
    from ._base import MAX_SECONDS, LockBase
    from .exceptions import InvalidLockArgument

    try:
        LockBase(None, SETTING_NAME, timeout=timeout)  # checks its arguments; no client, nothing sent
    except InvalidLockArgument as exc:
        sleep = inspect.signature(LockBase.__init__).parameters["sleep"].default
        return Problem(
            "django_redis_coord.E011",
            f"{SETTING_NAME}['DEFAULT_TIMEOUT'] is {timeout!r}, which a lock refuses: {exc}.",
            f"Give between {sleep} seconds (a lock's default sleep) and {MAX_SECONDS} seconds (ten years); "
            "30 or 60 are typical.",
        )
    return None


def _cache_alias_problems(alias: object, caches: Mapping[str, Any], *, explicit: bool) -> list[Problem]:
    if not isinstance(alias, str):
        return [Problem("django_redis_coord.E004", f"{SETTING_NAME}['CACHE_ALIAS'] must be a str, not {alias!r}.",
                        'Name a Redis cache of CACHES, e.g. "default".')]
    if alias not in caches:
        known = ", ".join(repr(name) for name in caches) or "none"
        return [
            Problem(
                "django_redis_coord.E004",
                f"{SETTING_NAME}['CACHE_ALIAS'] is {alias!r}, which is not in CACHES.",
                f"Configured cache aliases: {known}.",
            )
        ]
    backend = caches[alias].get("BACKEND") if isinstance(caches[alias], Mapping) else None
    if backend not in REDIS_CACHE_BACKENDS:
        return [
            Problem(
                "django_redis_coord.E005",
                f"The cache {alias!r} uses {backend!r}, which does not talk to Redis.",
                "Point CACHE_ALIAS at a django_redis.cache.RedisCache or "
                "django.core.cache.backends.redis.RedisCache cache, or set URL instead.",
            )
        ]
    return []


def _sentinel_problems(sentinel: object) -> list[Problem]:
    hint = 'For example: {"SENTINELS": [("10.0.0.1", 26379)], "SERVICE_NAME": "mymaster", "DB": 0}.'
    if not isinstance(sentinel, Mapping):
        return [Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL'] must be a dict.", hint)]
    problems = _section_problems("SENTINEL", sentinel, {"SENTINELS", "SERVICE_NAME", "DB", "SENTINEL_KWARGS"},
                                 "SENTINELS", "django_redis_coord.E008", hint)
    if sentinel.get("SENTINELS") is None:
        problems.append(
            Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL']['SENTINELS'] must list sentinels.", hint)
        )
    service = sentinel.get("SERVICE_NAME")
    if not isinstance(service, str) or not service:
        problems.append(
            Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL']['SERVICE_NAME'] must be a str.", hint)
        )
    db = sentinel.get("DB", 0)
    if not isinstance(db, int) or isinstance(db, bool) or db < 0:
        problems.append(
            Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL']['DB'] must be a database number.", hint)
        )
    kwargs = sentinel.get("SENTINEL_KWARGS")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        problems.append(
            Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL']['SENTINEL_KWARGS'] must be a dict.", hint)
        )
    elif kwargs is not None:
        problems.extend(_unknown_option_problems("['SENTINEL']['SENTINEL_KWARGS']", kwargs, "sentinel_kwargs"))
    return problems


def _section_problems(
    section: str, value: Mapping[str, Any], known: set[str], nodes_key: str, problem_id: str, hint: str
) -> list[Problem]:
    """Unknown keys of a SENTINEL or CLUSTER dict, and a malformed list of node addresses."""
    problems = []
    unknown = set(value) - known
    if unknown:
        problems.append(
            Problem(
                problem_id,
                f"{SETTING_NAME}[{section!r}] has unknown keys: {', '.join(sorted(map(str, unknown)))}.",
                hint,
            )
        )
    nodes = value.get(nodes_key)
    if nodes is None:
        return problems
    if not isinstance(nodes, (list, tuple)) or not nodes:
        problems.append(Problem(problem_id, f"{SETTING_NAME}[{section!r}][{nodes_key!r}] must list nodes.", hint))
        return problems
    for node in nodes:
        problem = _host_port_problem(section, node)
        if problem:
            problems.append(problem)
    return problems


def _cluster_has_nodes(cluster: object) -> bool:
    return isinstance(cluster, Mapping) and bool(cluster.get("STARTUP_NODES"))


def _cluster_problems(cluster: object, values: Mapping[str, Any]) -> list[Problem]:
    hint = 'Set "CLUSTER": True with a seed "URL", or {"STARTUP_NODES": [("10.0.0.1", 7000), ...]}.'
    if cluster is True:
        cluster = {}
    if not isinstance(cluster, Mapping):
        return [Problem("django_redis_coord.E009", f"{SETTING_NAME}['CLUSTER'] must be True, False or a dict.", hint)]
    problems = _section_problems("CLUSTER", cluster, {"STARTUP_NODES", "OPTIONS"}, "STARTUP_NODES",
                                 "django_redis_coord.E009", hint)
    if cluster.get("STARTUP_NODES") is None and values["URL"] is None:
        problems.append(Problem("django_redis_coord.E009", f"{SETTING_NAME}['CLUSTER'] needs a URL or nodes.", hint))
    if values["CACHE_ALIAS"] is not None or values["SENTINEL"] is not None:
        problems.append(
            Problem(
                "django_redis_coord.E009",
                f"{SETTING_NAME}['CLUSTER'] cannot be combined with CACHE_ALIAS or SENTINEL.",
                hint,
            )
        )
    options = cluster.get("OPTIONS")
    if options is not None and not isinstance(options, Mapping):
        problems.append(
            Problem("django_redis_coord.E009", f"{SETTING_NAME}['CLUSTER']['OPTIONS'] must be a dict.", hint)
        )
    elif options is not None:
        problems.extend(_unknown_option_problems("['CLUSTER']['OPTIONS']", options, "cluster"))
    return problems


def _redlock_problems(redlock: object) -> list[Problem]:
    if redlock is None:
        return []
    hint = 'For example: {"MASTERS": ["redis://10.0.0.1:6379/0", "redis://10.0.0.2:6379/0", "redis://10.0.0.3:6379/0"]}.'
    if not isinstance(redlock, Mapping):
        return [Problem("django_redis_coord.E015", f"{SETTING_NAME}['REDLOCK'] must be a dict.", hint)]
    masters = redlock.get("MASTERS")
    if not isinstance(masters, (list, tuple)) or not masters:
        return [Problem("django_redis_coord.E015", f"{SETTING_NAME}['REDLOCK']['MASTERS'] must list URLs.", hint)]
    problems = []
    for master in masters:
        problem = _url_problem("REDLOCK", master)
        if problem:
            msg = problem.msg.replace("['REDLOCK']", "['REDLOCK']['MASTERS']")
            problems.append(Problem("django_redis_coord.E015", msg, hint))
    node_timeout = redlock.get("NODE_TIMEOUT")
    if node_timeout is not None and (
        isinstance(node_timeout, bool) or not isinstance(node_timeout, (int, float)) or not node_timeout > 0
    ):
        problems.append(Problem(
            "django_redis_coord.E015",
            f"{SETTING_NAME}['REDLOCK']['NODE_TIMEOUT'] must be a positive number of seconds.",
            "The time each master gets to answer, e.g. 0.05; it is capped at a quarter of the lock timeout.",
        ))
    return problems


# -- cached reader -----------------------------------------------------------------------------
def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


@functools.cache
def coord_settings() -> CoordSettings:
    """The validated settings; raises ``ImproperlyConfigured`` listing every problem found."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    raw = getattr(settings, SETTING_NAME, None)
    problems = settings_problems(raw, getattr(settings, "CACHES", {}) or {})
    if problems:
        lines = [f"{p.id}: {p.msg}" + (f" HINT: {p.hint}" if p.hint else "") for p in problems]
        raise ImproperlyConfigured("\n".join(lines))
    values = {**DEFAULTS, **(raw or {})}
    cluster = values["CLUSTER"]
    if cluster is True:
        cluster = {}
    elif cluster is False:
        cluster = None
    if cluster is not None:
        source = "cluster"
    elif values["SENTINEL"] is not None:
        source = "sentinel"
    elif values["URL"] is not None:
        source = "url"
    else:
        source = "cache"
    return CoordSettings(
        cache_alias=values["CACHE_ALIAS"] or ("default" if source == "cache" else None),
        url=values["URL"],
        client_options=_freeze(values["CLIENT_OPTIONS"]),
        sentinel=_freeze(values["SENTINEL"]),
        cluster=_freeze(cluster),
        key_prefix=values["KEY_PREFIX"],
        default_timeout=None if is_no_expiry(values["DEFAULT_TIMEOUT"]) else values["DEFAULT_TIMEOUT"],
        auto_renew=values["AUTO_RENEW"],
        contention_status=values["CONTENTION_STATUS"],
        contention_handler=values["CONTENTION_HANDLER"],
        unavailable_status=values["UNAVAILABLE_STATUS"],
        fail_open=values["FAIL_OPEN"],
        redlock=_freeze(values["REDLOCK"]),
        source=source,
    )


#: Functions called after the settings cache is cleared (the connection module registers its own).
_on_clear: list[Callable[[], None]] = []


def clear_settings_cache() -> None:
    """Forget the cached settings (and the clients built from them)."""
    coord_settings.cache_clear()
    for callback in list(_on_clear):
        callback()


def on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: the settings or the caches they may point at changed."""
    if setting in (SETTING_NAME, "CACHES"):
        clear_settings_cache()
