"""The documented path ``django_redis_coord.exceptions``: every exception the package raises.

Catch :class:`CoordError` to catch them all.  Every error about a lock or a permit is also redis-py's
``LockError`` (through :class:`CoordLockError`), so code written for redis-py's ``Lock`` keeps
catching it; bad arguments are also ``ValueError`` or ``TypeError``.  They are defined in
``django_redis_coord.core.exceptions`` (whose text draws the whole tree) and importable from
``django_redis_coord`` as well.  Nothing in the package imports this module."""

from __future__ import annotations

from typing import Any

from .core.exceptions import (
    ConnectionPoolTooSmall,
    CoordError,
    CoordLockError,
    CostTooHigh,
    InvalidLockArgument,
    InvalidLockArgumentType,
    InvalidRate,
    KeyTemplateError,
    LockAcquireTimeout,
    LockContended,
    LockError,
    LockForkedError,
    LockLostError,
    LockNotOwnedError,
    LockUpgradeError,
    NameKindConflict,
    QuorumUnavailable,
    RateLimitExceeded,
    RedisServerNotFound,
    ReplicationNotAcknowledged,
    SemaphoreLimitNotSet,
    StaleFenceError,
    TransactionConflict,
    UnsupportedCacheBackend,
)

#: Django's BadRequest as well: served from :mod:`django_redis_coord.key_templates.template` on first
#: use, so that importing this module imports no Django.
__all__ = [
    "ConnectionPoolTooSmall",
    "CoordError",
    "CoordLockError",
    "CostTooHigh",
    "InvalidLockArgument",
    "InvalidLockArgumentType",
    "InvalidRate",
    "KeyTemplateError",
    "LockAcquireTimeout",
    "LockContended",
    "LockError",
    "LockForkedError",
    "LockLostError",
    "LockNotOwnedError",
    "LockUpgradeError",
    "NameKindConflict",
    "QuorumUnavailable",
    "RateLimitExceeded",
    "RedisServerNotFound",
    "ReplicationNotAcknowledged",
    "SemaphoreLimitNotSet",
    "StaleFenceError",
    "TransactionConflict",
    "UnsupportedCacheBackend",
    "KeyTooLong",  # noqa: F822 - served by __getattr__
    "MissingKeyValue",  # noqa: F822
]


def __getattr__(name: str) -> Any:
    if name in ("KeyTooLong", "MissingKeyValue"):
        from .key_templates import template

        return getattr(template, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
