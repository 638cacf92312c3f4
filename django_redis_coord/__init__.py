"""Distributed locks and semaphores on Redis for Django, Celery workers and plain scripts.

The core primitives (:class:`Lock`, :class:`IdentityLock`, their asyncio twins in
``django_redis_coord.asyncio``) import nothing from Django.  The Django surfaces (settings,
``@locked``, the ``locks`` command and the admin page) load only when used.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .exceptions import (
    CoordError,
    InvalidLockArgument,
    InvalidLockArgumentType,
    LockAcquireTimeout,
    LockError,
    LockLostError,
    LockNotOwnedError,
    NameKindConflict,
    SemaphoreLimitNotSet,
    StaleFenceError,
    TransactionConflict,
)
from .expiry import NO_EXPIRY
from .holders import HolderInfo, holders, lock_holder
from .identity import IdentityLock
from .locks import Lock

__version__ = "0.1.0"

__all__ = [
    "CoordError",
    "HolderInfo",
    "IdentityLock",
    "InvalidLockArgument",
    "InvalidLockArgumentType",
    "Lock",
    "LockAcquireTimeout",
    "LockError",
    "LockLostError",
    "LockNotOwnedError",
    "NO_EXPIRY",
    "NameKindConflict",
    "SemaphoreLimitNotSet",
    "StaleFenceError",
    "TransactionConflict",
    "holders",
    "lock_holder",
]

# Names served lazily, so that importing the core never imports Django (or optional modules).
# Planned names and the module that defines each (see the issues); a missing module raises
# AttributeError like any unknown name.
_LAZY: dict[str, str] = {
    # core (no Django)
    "Semaphore": ".semaphores",
    "optimistic": ".transactions",
    "Redlock": ".redlock",
    "QuorumUnavailable": ".redlock",
    "DurableLock": ".durable",
    "ReplicationNotAcknowledged": ".durable",
    # Django glue
    "locked": ".decorators",
    "current_lock": ".decorators",
    "lock": ".shortcuts",
    "alock": ".shortcuts",
    "semaphore": ".shortcuts",
    "asemaphore": ".shortcuts",
    # The sync factory is django_redis_coord.shortcuts.redlock: the package's "redlock" is its module.
    "aredlock": ".shortcuts",
    "fenced_update": ".fencing",
    "afenced_update": ".fencing",
    "fenced_set": ".fencing",
    "afenced_set": ".fencing",
    "fenced_get": ".fencing",
    "afenced_get": ".fencing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        target = import_module(module, __name__)
    except ModuleNotFoundError as exc:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} ({exc})") from None
    return getattr(target, name)
