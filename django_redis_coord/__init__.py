"""Distributed locks and semaphores on Redis for Django, Celery workers and plain scripts.

The core primitives (:class:`Lock`, :class:`Semaphore`, :class:`Redlock`, :class:`DurableLock`,
:class:`IdentityLock`, :class:`Leader`, their asyncio twins in ``django_redis_coord.asyncio``)
import nothing from Django.  The Django surfaces (settings, ``@locked``, the ``lock()`` shortcuts, the ``locks``
command and the admin page) load only when used: their names below are served on first access.

``django_redis_coord.redlock`` and ``django_redis_coord.holders`` are modules; the Redlock
factory configured from the settings is :func:`get_redlock` (``django_redis_coord.shortcuts.redlock``)
and the function that lists a lock's holders is :func:`lock_holders`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from . import holders
from .events import Events
from .exceptions import (
    CoordError,
    CoordLockError,
    CostTooHigh,
    InvalidLockArgument,
    InvalidLockArgumentType,
    InvalidRate,
    LockAcquireTimeout,
    LockError,
    LockForkedError,
    LockLostError,
    LockNotOwnedError,
    LockUpgradeError,
    NameKindConflict,
    QuorumUnavailable,
    ReplicationNotAcknowledged,
    SemaphoreLimitNotSet,
    StaleFenceError,
    TransactionConflict,
    UnsupportedCacheBackend,
)
from .expiry import NO_EXPIRY
from .holders import HolderInfo, lock_holder, rwlock_holders
from .holders import holders as lock_holders
from .identity import IdentityLock
from .locks import Lock

if TYPE_CHECKING:  # what __getattr__ serves, as type checkers should see it
    from . import redlock, rwlock
    from .asyncio.cache_fill import aget_or_set
    from .cache_fill import get_or_set
    from .decorators import KeyTemplateError, KeyTooLong, LockContended, MissingKeyValue, current_lock, locked
    from .durable import DurableLock
    from .exceptions import RateLimitExceeded
    from .fencing import afenced_get, afenced_set, afenced_update, fenced_get, fenced_set, fenced_update
    from .leader import Leader
    from .metrics import MetricsEvents
    from .ratelimit import Rate, RateLimit, SlidingWindowLimit
    from .ratelimited import rate_limited
    from .redlock import Redlock
    from .rwlock import ReadWriteLock
    from .semaphores import Semaphore
    from .shortcuts import alock, aredlock, arwlock, asemaphore, lock, semaphore
    from .shortcuts import redlock as get_redlock
    from .shortcuts import rwlock as get_rwlock
    from .transactions import optimistic

__version__ = "0.1.0"

__all__ = [
    # core primitives (no Django)
    "DurableLock",
    "Events",
    "IdentityLock",
    "Leader",
    "MetricsEvents",
    "ReadWriteLock",
    "Lock",
    "Redlock",
    "Semaphore",
    "optimistic",
    "NO_EXPIRY",
    "Rate",
    "RateLimit",
    "SlidingWindowLimit",
    # who holds what
    "HolderInfo",
    "holders",
    "lock_holder",
    "lock_holders",
    "rwlock_holders",
    # exceptions (see django_redis_coord.exceptions for the hierarchy)
    "CoordError",
    "CoordLockError",
    "CostTooHigh",
    "InvalidLockArgument",
    "InvalidLockArgumentType",
    "InvalidRate",
    "KeyTemplateError",
    "KeyTooLong",
    "LockAcquireTimeout",
    "LockContended",
    "LockError",
    "LockForkedError",
    "LockLostError",
    "LockNotOwnedError",
    "LockUpgradeError",
    "MissingKeyValue",
    "NameKindConflict",
    "QuorumUnavailable",
    "ReplicationNotAcknowledged",
    "SemaphoreLimitNotSet",
    "StaleFenceError",
    "TransactionConflict",
    "UnsupportedCacheBackend",
    # Django glue, configured from settings.DJANGO_REDIS_COORD
    "alock",
    "aredlock",
    "asemaphore",
    "current_lock",
    "get_redlock",
    "get_rwlock",
    "arwlock",
    "lock",
    "locked",
    "rate_limited",
    "RateLimitExceeded",
    "semaphore",
    "afenced_get",
    "afenced_set",
    "afenced_update",
    "fenced_get",
    "fenced_set",
    "fenced_update",
    "get_or_set",
    "aget_or_set",
    # modules
    "redlock",
    "rwlock",
]

# Names served lazily, so that importing the core never imports Django (or optional modules):
# each name and the module that defines it ("module:attribute" when the name differs).
_LAZY: dict[str, str] = {
    # core (no Django)
    "Semaphore": ".semaphores",
    "optimistic": ".transactions",
    "Redlock": ".redlock",
    "DurableLock": ".durable",
    "Leader": ".leader",
    "MetricsEvents": ".metrics",
    "ReadWriteLock": ".rwlock",
    "Rate": ".ratelimit",
    "RateLimit": ".ratelimit",
    "SlidingWindowLimit": ".ratelimit",
    # Django glue
    "locked": ".decorators",
    "current_lock": ".decorators",
    "rate_limited": ".ratelimited",
    "RateLimitExceeded": ".exceptions",
    "LockContended": ".decorators",
    "KeyTemplateError": ".decorators",
    "MissingKeyValue": ".decorators",
    "KeyTooLong": ".decorators",
    "lock": ".shortcuts",
    "alock": ".shortcuts",
    "semaphore": ".shortcuts",
    "asemaphore": ".shortcuts",
    # The package's "redlock" is its module: the sync factory is served as get_redlock.
    "get_redlock": ".shortcuts:redlock",
    "aredlock": ".shortcuts",
    # The same for "rwlock", the read-write lock's module: its factory is served as get_rwlock.
    "get_rwlock": ".shortcuts:rwlock",
    "arwlock": ".shortcuts",
    "fenced_update": ".fencing",
    "afenced_update": ".fencing",
    "fenced_set": ".fencing",
    "afenced_set": ".fencing",
    "fenced_get": ".fencing",
    "afenced_get": ".fencing",
    "get_or_set": ".cache_fill",
    "aget_or_set": ".asyncio.cache_fill",
}


def __getattr__(name: str) -> Any:
    if name in ("redlock", "rwlock"):
        return import_module(f".{name}", __name__)
    module, _, attribute = _LAZY.get(name, "").partition(":")
    if not module:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        target = import_module(module, __name__)
    except ModuleNotFoundError as exc:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} ({exc})") from None
    return getattr(target, attribute or name)
