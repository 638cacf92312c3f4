"""Redis cannot be reached or cannot take writes: how ``@locked`` tells, and its 503 answer."""

from __future__ import annotations

from django.http import HttpResponse
from redis.exceptions import (
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..config.settings import CoordSettings

__all__ = ["UNAVAILABLE_ERRORS", "UNAVAILABLE_CODES", "REDIS_ERRORS", "RETRY_AFTER", "redis_unavailable",
           "unavailable_response"]

#: Errors meaning "Redis cannot be reached or cannot take writes right now".
UNAVAILABLE_ERRORS = (RedisConnectionError, RedisTimeoutError, ReadOnlyError, OutOfMemoryError, TryAgainError,
                      ClusterError, SlotNotCoveredError)
#: The error codes of the same conditions (and of writes refused after a failed save), as a
#: command refused inside a Lua script reports them: a ResponseError whose text holds "-CODE ".
UNAVAILABLE_CODES = ("OOM", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MISCONF")
#: What the acquire and release sites catch before telling "unavailable" from other errors (re-raised).
REDIS_ERRORS = (RedisError, RedisClusterException)
#: The ``Retry-After`` of the 503, in seconds: about what a Sentinel or Cluster failover takes
#: (a standalone Redis that is down may take longer; the client is told to come back, not when).
RETRY_AFTER = 5


def redis_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` means Redis cannot be reached or cannot take writes right now (out of
    memory, read-only, a cluster or Sentinel master down): ``@locked`` answers 503 or fails open."""
    if isinstance(exc, UNAVAILABLE_ERRORS):
        return True
    if not isinstance(exc, ResponseError):
        return False
    text = str(exc)
    return any(text.startswith(code + " ") or f"-{code} " in text for code in UNAVAILABLE_CODES)


def unavailable_response(name: str, settings: CoordSettings) -> HttpResponse:
    """A view's answer when it fails closed: ``UNAVAILABLE_STATUS`` (503), with ``Retry-After``."""
    response = HttpResponse(
        f"{name}: the coordination service is unavailable; try again in {RETRY_AFTER} s.\n",
        status=settings.unavailable_status,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(RETRY_AFTER)
    return response
