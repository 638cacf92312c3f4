"""The ``DJANGO_REDIS_COORD`` setting's name, keys and defaults, and the shape of a problem found
in it (read by :mod:`~django_redis_coord.conf`, checked by :mod:`~django_redis_coord.config.validation`;
its ids are those of :mod:`~django_redis_coord.config.check_ids`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Optional

from .check_ids import CHECK_IDS, NOT_A_BOOL

__all__ = ["SETTING_NAME", "DEFAULTS", "REDIS_CACHE_BACKENDS", "URL_SCHEMES", "DEFAULT_CLIENT_OPTIONS", "Problem",
           "bool_problem"]

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
        # Metrics exporters: any of "prometheus", "otel", "history" (docs/metrics.md).
        "METRICS": (),
        # OpenTelemetry spans of the waits (needs opentelemetry-api; docs/metrics.md, "Tracing").
        "TRACING": False,
        # Rate limits of @rate_limited: {"DEFAULT_RATE": "100/m", "RATES": {...}, "ENABLED": True, ...}
        # (django_redis_coord.config.ratelimit_options).
        "RATELIMIT": None,
        # Where {client_ip} and @rate_limited(key="ip") read the client's address:
        # {"TRUSTED_PROXIES": 1, "HEADER": "X-Forwarded-For", "IPV6_PREFIX": 64}
        # (django_redis_coord.config.client_ip_options).
        "CLIENT_IP": None,
    }
)

#: Cache backends a connection can be taken from.
REDIS_CACHE_BACKENDS = {
    "django_redis.cache.RedisCache": "django-redis",
    "django.core.cache.backends.redis.RedisCache": "django",
}

URL_SCHEMES = ("redis", "rediss", "unix")

#: Client options applied under ``CLIENT_OPTIONS`` for the URL, Sentinel and Cluster sources.
DEFAULT_CLIENT_OPTIONS: Mapping[str, Any] = MappingProxyType({"socket_connect_timeout": 2.0, "socket_timeout": 5.0})


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the settings: a system-check id of
    :data:`~django_redis_coord.config.check_ids.CHECK_IDS` (``django_redis_coord.E0xx``)."""

    id: str
    msg: str
    hint: Optional[str] = None

    def __post_init__(self) -> None:
        if self.id not in CHECK_IDS:
            raise ValueError(f"{self.id!r} is not a check id of django_redis_coord.config.check_ids")


def bool_problem(name: str, value: object) -> Optional[Problem]:
    """A boolean setting (``AUTO_RENEW``, ``FAIL_OPEN``, ``TRACING``) that is not a bool."""
    if isinstance(value, bool):
        return None
    return Problem(NOT_A_BOOL, f"{SETTING_NAME}[{name!r}] must be True or False.",
                   f"{name} is {value!r}; write True or False.")


def unknown_key_problems(check_id: str, path: str, value: Mapping[Any, Any], known: Iterable[str]) -> list[Problem]:
    """A problem ``check_id`` for each key of the section ``value`` (at ``path``) not among
    ``known``, its hint the closest known key (or the list of them)."""
    known = list(known)
    problems = []
    for key in value:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            problems.append(Problem(check_id, f"{path} has an unknown key {key!r}.",
                                    f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(known)}."))
    return problems
