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
    SemaphoreLimitNotSet,
    TransactionConflict,
)
from .holders import HolderInfo, holders, lock_holder
from .identity import IdentityLock
from .lock import Lock

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
    "SemaphoreLimitNotSet",
    "TransactionConflict",
    "holders",
    "lock_holder",
]

# Names served lazily, so that importing the core never imports Django (or optional modules).
_LAZY: dict[str, str] = {}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)
