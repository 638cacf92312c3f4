"""Distributed locks, semaphores and rate limits on Redis for Django, Celery workers and plain scripts.

The core primitives (:class:`Lock`, :class:`Semaphore`, :class:`Redlock`, :class:`DurableLock`,
:class:`IdentityLock`, :class:`Leader`, their asyncio twins in ``django_redis_coord.asyncio``)
import nothing from Django.  The Django surfaces (settings, ``@locked``, the ``lock()`` shortcuts, the ``locks``
command and the admin page) load only when used: their names below are served on first access.

``django_redis_coord.holders`` is a module; the function that lists a lock's holders is
:func:`lock_holders`.  The Redlock and read-write lock factories configured from the settings are
:func:`get_redlock` and :func:`get_rwlock` (``redlock`` and ``rwlock`` in ``django_redis_coord.shortcuts``).
The other import paths the documentation teaches are listed in docs/architecture.md ("Import paths").
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .core.events import Events
from .core.exceptions import (
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
    RateLimitExceeded,
    ReplicationNotAcknowledged,
    SemaphoreLimitNotSet,
    StaleFenceError,
    TransactionConflict,
    UnsupportedCacheBackend,
)
from .core.expiry import NO_EXPIRY
from .core.holders import HolderInfo, lock_holder, rwlock_holders
from .core.holders import holders as lock_holders
from .core.identity import IdentityLock
from .core.lock.sync import Lock

if TYPE_CHECKING:  # what __getattr__ serves, as type checkers should see it
    from . import holders  # the documented module served as an attribute (see __getattr__)
    from .config.shortcuts import alock, aredlock, arwlock, asemaphore, lock, semaphore
    from .config.shortcuts import redlock as get_redlock
    from .config.shortcuts import rwlock as get_rwlock
    from .core.durable.sync import DurableLock
    from .core.leader.sync import Leader
    from .core.ratelimit import Rate, RateLimit, RateLimitReply, SlidingWindowLimit, parse_rate
    from .core.redlock.sync import Redlock
    from .core.rwlock.sync import ReadWriteLock
    from .core.semaphore.sync import Semaphore
    from .core.transactions import optimistic
    from .decorator.locked import KeyTemplateError, LockContended, current_lock, locked
    from .integrations.cache_fill.aio import aget_or_set
    from .integrations.cache_fill.sync import get_or_set
    from .integrations.fencing import afenced_get, afenced_set, afenced_update, fenced_get, fenced_set, fenced_update
    from .key_templates.client_ip import client_ip
    from .key_templates.template import KeyTooLong, MissingKeyValue
    from .metrics import MetricsEvents
    from .ratelimited import rate_limited

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
    "RateLimitReply",
    "SlidingWindowLimit",
    "parse_rate",
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
    "RateLimitExceeded",
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
    "client_ip",
    "semaphore",
    "afenced_get",
    "afenced_set",
    "afenced_update",
    "fenced_get",
    "fenced_set",
    "fenced_update",
    "get_or_set",
    "aget_or_set",
]

#: The documented module served as an attribute: ``django_redis_coord.holders``.
_MODULES = ("holders",)

# Names served lazily, so that importing the core never imports Django (or optional modules):
# each name and the module that defines it ("module:attribute" when the name differs).
_LAZY: dict[str, str] = {
    # core (no Django)
    "Semaphore": ".core.semaphore.sync",
    "optimistic": ".core.transactions",
    "Redlock": ".core.redlock.sync",
    "DurableLock": ".core.durable.sync",
    "Leader": ".core.leader.sync",
    "MetricsEvents": ".metrics",
    "ReadWriteLock": ".core.rwlock.sync",
    "Rate": ".core.ratelimit",
    "RateLimit": ".core.ratelimit",
    "RateLimitReply": ".core.ratelimit",
    "SlidingWindowLimit": ".core.ratelimit",
    "parse_rate": ".core.ratelimit",
    # Django glue
    "locked": ".decorator.locked",
    "current_lock": ".decorator.locked",
    "rate_limited": ".ratelimited",
    "client_ip": ".key_templates.client_ip",
    "LockContended": ".decorator.locked",
    "KeyTemplateError": ".decorator.locked",
    "MissingKeyValue": ".key_templates.template",
    "KeyTooLong": ".key_templates.template",
    "lock": ".config.shortcuts",
    "alock": ".config.shortcuts",
    "semaphore": ".config.shortcuts",
    "asemaphore": ".config.shortcuts",
    # The sync Redlock and read-write lock factories, "redlock" and "rwlock" in .shortcuts.
    "get_redlock": ".config.shortcuts:redlock",
    "aredlock": ".config.shortcuts",
    "get_rwlock": ".config.shortcuts:rwlock",
    "arwlock": ".config.shortcuts",
    "fenced_update": ".integrations.fencing",
    "afenced_update": ".integrations.fencing",
    "fenced_set": ".integrations.fencing",
    "afenced_set": ".integrations.fencing",
    "fenced_get": ".integrations.fencing",
    "afenced_get": ".integrations.fencing",
    "get_or_set": ".integrations.cache_fill.sync",
    "aget_or_set": ".integrations.cache_fill.aio",
}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return import_module(f".{name}", __name__)
    module, _, attribute = _LAZY.get(name, "").partition(":")
    if not module:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        target = import_module(module, __name__)
    except ModuleNotFoundError as exc:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} ({exc})") from None
    return getattr(target, attribute or name)
