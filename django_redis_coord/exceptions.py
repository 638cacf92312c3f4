"""Exception hierarchy.

Every error a primitive raises about a lock is a :class:`redis.exceptions.LockError`, so code
written for redis-py's ``Lock`` keeps catching it.  Bad arguments are also ``ValueError`` or
``TypeError`` as Python code expects.
"""

from __future__ import annotations

from typing import Any, Optional

from redis.exceptions import LockError, LockNotOwnedError

__all__ = [
    "LockError",
    "LockNotOwnedError",
    "CoordError",
    "InvalidLockArgument",
    "InvalidLockArgumentType",
    "NameKindConflict",
    "LockLostError",
    "LockAcquireTimeout",
    "ConnectionPoolTooSmall",
    "SemaphoreLimitNotSet",
    "TransactionConflict",
    "StaleFenceError",
]


class CoordError(LockError):
    """Base class of the errors defined by django_redis_coord (a redis-py ``LockError``)."""

    def __init__(self, message: Optional[str] = None, lock_name: Any = None) -> None:
        super().__init__(message, lock_name=lock_name)


class InvalidLockArgument(CoordError, ValueError):
    """An argument has a value a lock cannot work with; nothing was written to Redis."""


class InvalidLockArgumentType(InvalidLockArgument, TypeError):
    """An argument has the wrong type; nothing was written to Redis."""


class NameKindConflict(InvalidLockArgument):
    """The name is in use by another kind of primitive (a lock's name held by a semaphore, or the
    reverse) or holds another kind of Redis value; nothing was written to Redis."""


class LockAcquireTimeout(CoordError):
    """A context manager could not acquire the lock within ``blocking_timeout``."""


class ConnectionPoolTooSmall(CoordError, ValueError):
    """A blocking acquire needs one connection of the client's pool for its process's waiting
    connection (see :mod:`django_redis_coord.waiting`) and at least one more for its commands."""


class LockLostError(CoordError, LockNotOwnedError):
    """The hold ended without a release: it expired, was taken over or could not be renewed."""


class StaleFenceError(CoordError):
    """A fenced read or write came from a holder older than one the resource has already seen."""

    def __init__(self, message: str, fence: int = 0, highest: int = 0, lock_name: Any = None) -> None:
        super().__init__(message, lock_name=lock_name)
        self.fence = fence
        self.highest = highest


class SemaphoreLimitNotSet(CoordError, TypeError):
    """A semaphore was used before its limit was set (see ``set_max_size``)."""


class TransactionConflict(CoordError):
    """An optimistic (WATCH/MULTI/EXEC) transaction kept conflicting until its retries ran out."""

    def __init__(self, message: str, attempts: int = 0, lock_name: Any = None) -> None:
        super().__init__(message, lock_name=lock_name)
        self.attempts = attempts
