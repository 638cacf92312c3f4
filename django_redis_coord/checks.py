"""System checks for ``DJANGO_REDIS_COORD`` (``manage.py check``, ``check --deploy``).

The normal checks read settings only and never connect.  The deploy checks connect to the
configured Redis (short timeouts) and warn about what silently breaks locks in production:

* ``django_redis_coord.W001``: ``maxmemory-policy`` is not ``noeviction``, so Redis may evict a
  held lock under memory pressure and let a second holder in.
* ``django_redis_coord.W002``: a cache lives in the same Redis database as the locks; its
  ``clear()`` runs ``FLUSHDB`` and deletes every lock.
* ``django_redis_coord.W003``: the deploy checks could not reach Redis.
* ``django_redis_coord.W004``: the server can lose its fence counters in a restart (no AOF with
  ``appendfsync always``): fences then rest on its clock alone (see docs/safety.md).  When
  ``CONFIG GET`` is refused, ``django_redis_coord.I001`` says it was not checked.

The settings errors (E001-E016, E018-E022, E024-E027) come from :func:`django_redis_coord.conf.settings_problems`
(listed in docs/django.md); none of them connects.  Every id is one of
:mod:`django_redis_coord.config.check_ids`, each meaning one kind of problem.
``django_redis_coord.E017``: something was decorated with ``@locked(redlock=True)`` but
``REDLOCK["MASTERS"]`` is not set.
``django_redis_coord.E023``: something is decorated with ``@rate_limited`` whose rate comes from the
settings (``rate="api"``, or no rate: ``DEFAULT_RATE``), and the settings lack it.
``django_redis_coord.W005``: ``DJANGO_REDIS_COORD`` is not set but the settings define a name close
to it (``DJANGO_REDIS_CORD``): the locks would silently use the ``default`` cache's Redis.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Mapping
from typing import Any, Optional

from django.conf import settings
from django.core.checks import CheckMessage, Error, Info, Tags, Warning, register

from .config import check_ids as ids
from .config.settings import REDIS_CACHE_BACKENDS, SETTING_NAME, settings_problems

__all__ = ["check_settings", "check_setting_name", "check_redlock_users", "check_rate_names", "check_redis_for_deploy",
           "redis_location"]

TAG = "django_redis_coord"


@register(TAG, Tags.caches)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every problem of the settings dict, as errors with ids and hints (no connection)."""
    raw = getattr(settings, SETTING_NAME, None)
    return [
        Error(problem.msg, hint=problem.hint, obj=SETTING_NAME, id=problem.id)
        for problem in settings_problems(raw, getattr(settings, "CACHES", {}) or {})
    ]


@register(TAG)
def check_setting_name(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A warning when ``DJANGO_REDIS_COORD`` is not set but a name close to it is (a misspelling
    that would leave the locks on the ``default`` cache's Redis, without their prefix)."""
    if hasattr(settings, SETTING_NAME):
        return []
    defined = [name for name in dir(settings) if name.isupper() and settings.is_overridden(name)]
    close = difflib.get_close_matches(SETTING_NAME, defined, n=3, cutoff=0.75)
    if not close:
        return []
    shown = " and ".join(repr(name) for name in close)
    return [
        Warning(
            f"The settings define {shown} but not {SETTING_NAME}: the locks use the 'default' cache's Redis "
            "and none of those values.",
            hint=f"Did you mean {SETTING_NAME}? Rename the setting to {SETTING_NAME}.",
            obj=close[0],
            id=ids.SETTING_NAME_MISSPELLED,
        )
    ]


@register(TAG)
def check_redlock_users(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``@locked(redlock=True)`` needs ``REDLOCK["MASTERS"]`` (no connection)."""
    from .decorator.locked import redlock_user_names

    users = redlock_user_names()
    raw = getattr(settings, SETTING_NAME, None)
    if not users or (isinstance(raw, dict) and raw.get("REDLOCK") is not None):
        return []  # a malformed REDLOCK is E015
    shown = ", ".join(users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
    return [
        Error(
            f"@locked(redlock=True) is used ({shown}) but {SETTING_NAME}['REDLOCK'] is not set.",
            hint=f'Set {SETTING_NAME}["REDLOCK"] = {{"MASTERS": ["redis://10.0.0.1:6379/0", '
            '"redis://10.0.0.2:6379/0", "redis://10.0.0.3:6379/0"]}, or drop redlock=True.',
            obj=SETTING_NAME,
            id=ids.REDLOCK_NOT_SET,
        )
    ]


@register(TAG)
def check_rate_names(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``@rate_limited(rate="api")`` needs ``RATELIMIT["RATES"]["api"]``, and no rate needs
    ``DEFAULT_RATE`` (no connection)."""
    from .ratelimited.checks import missing_rates

    return [Error(msg, hint=hint, obj=SETTING_NAME, id=ids.RATE_NOT_SET) for msg, hint in missing_rates()]


def redis_location(url: str, options: Optional[Mapping[str, Any]] = None) -> Optional[tuple[str, int, int]]:
    """``(host, port, db)`` a pool made by ``ConnectionPool.from_url(url, **options)`` talks to
    (``("unix:<path>", 0, db)`` for a socket), else None.

    The URL is read by redis-py's own ``parse_url``: a ``?db=`` query wins over the path, and what
    the URL leaves out comes from ``options`` and then from the defaults of ``redis.Connection``.
    """
    from redis import Connection
    from redis.connection import parse_url

    try:
        kwargs = {**(options or {}), **parse_url(url)}
        db = int(kwargs.get("db") or 0)
        if url.startswith("unix://"):
            return f"unix:{kwargs.get('path', '')}", 0, db
        defaults = inspect.signature(Connection.__init__).parameters
        host = kwargs.get("host") or defaults["host"].default
        return str(host), int(kwargs.get("port") or defaults["port"].default), db
    except (ValueError, TypeError):
        return None


def _cache_servers(config: Any) -> list[tuple[str, int, int]]:
    """Where a Redis cache's clients connect, as :func:`redis_location` reads each server: Django's
    ``RedisCache`` hands its ``OPTIONS`` to the pool, django-redis its
    ``OPTIONS["CONNECTION_POOL_KWARGS"]``; in both, what the URL says wins."""
    if not isinstance(config, Mapping):
        return []
    options = config.get("OPTIONS")
    options = options if isinstance(options, Mapping) else {}
    location = config.get("LOCATION")
    if config.get("BACKEND") == "django.core.cache.backends.redis.RedisCache":
        pool_options: Any = options
        separators = "[;,]"
    else:
        pool_options = options.get("CONNECTION_POOL_KWARGS")
        separators = ","
    if not isinstance(pool_options, Mapping):
        pool_options = {}
    if isinstance(location, str):
        urls = [part for part in re.split(separators, location) if part]
    elif isinstance(location, (list, tuple)):
        urls = [part for part in location if isinstance(part, str)]
    else:
        urls = []
    servers = [redis_location(url, pool_options) for url in urls]
    return [server for server in servers if server is not None]


def _client_location(client: Any) -> Optional[tuple[str, int, int]]:
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return None
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}", 0, int(kwargs.get("db", 0) or 0)
    if "host" not in kwargs:
        return None
    return kwargs["host"], int(kwargs.get("port", 6379)), int(kwargs.get("db", 0) or 0)


def _same_host(a: str, b: str) -> bool:
    loopback = {"localhost", "127.0.0.1", "::1"}
    return a == b or (a in loopback and b in loopback)


@register(TAG, Tags.caches, deploy=True)
def check_redis_for_deploy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Connect to the configured Redis and warn about eviction and shared-database flushes."""
    if check_settings():
        return []  # the settings errors say it all
    from redis.exceptions import RedisError

    from .config.connection import describe_connection, get_client

    messages: list[CheckMessage] = []
    try:
        client = get_client()
        if hasattr(client, "get_primaries"):  # redis.cluster.RedisCluster: ask every node
            memory = client.info("memory", target_nodes=client.ALL_NODES)
        else:
            memory = client.info("memory")
    except RedisError as exc:
        return [
            Warning(
                f"Could not reach Redis at {describe_connection()} to check it: {exc}.",
                hint="Run `manage.py check --deploy` where the production Redis is reachable.",
                obj=SETTING_NAME,
                id=ids.DEPLOY_UNREACHABLE,
            )
        ]
    # A cluster client answers for each node: {node: info}.
    per_node = memory.values() if "maxmemory_policy" not in memory and memory else [memory]
    policies = sorted({str(info.get("maxmemory_policy")) for info in per_node if isinstance(info, dict)} - {"None"})
    evicting = [policy for policy in policies if policy != "noeviction"]
    if evicting:
        messages.append(
            Warning(
                f"Redis maxmemory-policy is {', '.join(repr(p) for p in evicting)}: under memory pressure Redis "
                "may evict a held lock and let a second holder in.",
                hint="Set `maxmemory-policy noeviction` on the Redis that holds the locks "
                "(or give the locks a Redis of their own).",
                obj=SETTING_NAME,
                id=ids.EVICTION_POLICY,
            )
        )
    messages.extend(_fence_persistence(client, describe_connection()))
    where = _client_location(client)
    if where is not None:
        for alias, config in (getattr(settings, "CACHES", {}) or {}).items():
            if not isinstance(config, dict) or config.get("BACKEND") not in REDIS_CACHE_BACKENDS:
                continue
            for other in _cache_servers(config):
                if other[1:] == where[1:] and _same_host(other[0], where[0]):
                    messages.append(
                        Warning(
                            f"The cache {alias!r} uses the Redis database that holds the locks "
                            f"({where[0]}:{where[1]}/{where[2]}); cache.clear() runs FLUSHDB and deletes every lock.",
                            hint="Give the locks another database number (e.g. .../1 for the cache and .../2 for "
                            "the locks) or another Redis.",
                            obj=SETTING_NAME,
                            id=ids.CACHE_SHARES_DATABASE,
                        )
                    )
                    break
    return messages


def _fence_persistence(client: Any, where: str) -> list[CheckMessage]:
    """W004 when a server can lose its fence counters in a restart; I001 when CONFIG is refused."""
    from redis.exceptions import RedisError

    from .core.persistence import counter_loss, servers

    try:
        losses = [(node, counter_loss(server)) for node, server in servers(client)]
    except RedisError as exc:
        return [Info(f"Could not read the persistence settings of Redis at {where} (CONFIG GET: {exc}); whether "
                     "fences survive a restart was not checked.", obj=SETTING_NAME, id=ids.PERSISTENCE_UNREAD)]
    return [
        Warning(
            f"Redis at {node or where} {loss}. After such a restart a fence is the server clock in µs alone: "
            "it stays above earlier fences only if that clock never went back.",
            hint="For fences that never go backwards: `appendonly yes` with `appendfsync always`; or DurableLock "
            "(WAIT) with failover to the replicas that acknowledged; or Redlock over independent masters. "
            "See docs/safety.md, 'Fences across restarts'.",
            obj=SETTING_NAME,
            id=ids.FENCES_NOT_DURABLE,
        )
        for node, loss in losses
        if loss is not None
    ]
