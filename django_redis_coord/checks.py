"""System checks for ``DJANGO_REDIS_COORD`` (``manage.py check``, ``check --deploy``).

The normal checks read settings only and never connect.  The deploy checks connect to the
configured Redis (short timeouts) and warn about what silently breaks locks in production:

* ``django_redis_coord.W001``: ``maxmemory-policy`` is not ``noeviction``, so Redis may evict a
  held lock under memory pressure and let a second holder in.
* ``django_redis_coord.W002``: a cache lives in the same Redis database as the locks; its
  ``clear()`` runs ``FLUSHDB`` and deletes every lock.
* ``django_redis_coord.W003``: the deploy checks could not reach Redis.

The ids of the settings errors (E001-E016) are listed in :mod:`django_redis_coord.conf`.
``django_redis_coord.E017``: something was decorated with ``@locked(redlock=True)`` but
``REDLOCK["MASTERS"]`` is not set.
"""

from __future__ import annotations

import sys
from typing import Any, Optional
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from .conf import REDIS_CACHE_BACKENDS, SETTING_NAME, settings_problems

__all__ = ["check_settings", "check_redlock_users", "check_redis_for_deploy", "redis_location"]

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
def check_redlock_users(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``@locked(redlock=True)`` needs ``REDLOCK["MASTERS"]`` (no connection)."""
    decorators = sys.modules.get("django_redis_coord.decorators")
    users = sorted(set(getattr(decorators, "redlock_users", {}).values()))
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
            id="django_redis_coord.E017",
        )
    ]


def redis_location(url: str) -> Optional[tuple[str, int, int]]:
    """``(host, port, db)`` of a Redis URL (``("unix:<path>", 0, db)`` for a socket), else None."""
    try:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            query = dict(item.split("=", 1) for item in parts.query.split("&") if "=" in item)
            return f"unix:{parts.path}", 0, int(query.get("db", 0))
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            return None
        db = parts.path.lstrip("/")
        return parts.hostname, parts.port or 6379, int(db) if db else 0
    except (ValueError, TypeError):
        return None


def _cache_locations(config: Any) -> list[str]:
    location = config.get("LOCATION") if isinstance(config, dict) else None
    if isinstance(location, str):
        return [part for part in location.split(",") if part] if "," in location else [location]
    if isinstance(location, (list, tuple)):
        return [part for part in location if isinstance(part, str)]
    return []


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

    from .connection import describe_connection, get_client

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
                id="django_redis_coord.W003",
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
                id="django_redis_coord.W001",
            )
        )
    where = _client_location(client)
    if where is not None:
        for alias, config in (getattr(settings, "CACHES", {}) or {}).items():
            if not isinstance(config, dict) or config.get("BACKEND") not in REDIS_CACHE_BACKENDS:
                continue
            for location in _cache_locations(config):
                other = redis_location(location)
                if other is not None and other[1:] == where[1:] and _same_host(other[0], where[0]):
                    messages.append(
                        Warning(
                            f"The cache {alias!r} uses the Redis database that holds the locks "
                            f"({where[0]}:{where[1]}/{where[2]}); cache.clear() runs FLUSHDB and deletes every lock.",
                            hint="Give the locks another database number (e.g. .../1 for the cache and .../2 for "
                            "the locks) or another Redis.",
                            obj=SETTING_NAME,
                            id="django_redis_coord.W002",
                        )
                    )
                    break
    return messages
