"""Every exception django_redis_coord defines, in one hierarchy.

Catch :class:`CoordError` to catch them all.  Every error about a lock or a permit is also a
:class:`redis.exceptions.LockError` (through :class:`CoordLockError`), so code written for
redis-py's ``Lock`` keeps catching it.  Bad arguments are also ``ValueError`` or ``TypeError`` as
Python code expects.  The tree (``also``: further base classes)::

    CoordError                          every error defined here
    ├── CoordLockError                  also redis LockError: about a lock or a permit
    │   ├── InvalidLockArgument         also ValueError; nothing was written to Redis
    │   │   ├── InvalidLockArgumentType also TypeError
    │   │   ├── NameKindConflict        the name is used by another kind of primitive
    │   │   ├── InvalidRate             a rate limit's rate that cannot be parsed or used
    │   │   ├── CostTooHigh             a rate limit's cost above its capacity (never admissible)
    │   │   └── KeyTemplateError        an ``@locked`` key template that cannot be used or filled
    │   │       ├── MissingKeyValue     also Django's BadRequest: a 400 in views
    │   │       └── KeyTooLong          also Django's BadRequest: a 400 in views
    │   ├── LockContended               ``@locked``: the key is held (plain functions, ``with``)
    │   ├── LockAcquireTimeout          a ``with`` block could not acquire in time
    │   ├── LockLostError               also redis LockNotOwnedError: the hold ended unreleased
    │   ├── LockForkedError             a hold used in a forked child, not in the process that took it
    │   ├── LockUpgradeError            a write asked for by the holder of a read (read-write lock)
    │   ├── ConnectionPoolTooSmall      also ValueError
    │   ├── SemaphoreLimitNotSet        also TypeError
    │   ├── StaleFenceError             a fenced write from a holder older than one seen
    │   ├── QuorumUnavailable           also redis ConnectionError: too few Redlock masters answered
    │   └── ReplicationNotAcknowledged  too few replicas confirmed a DurableLock's grant
    ├── RateLimitExceeded               ``@rate_limited`` refused a call outside a view
    ├── TransactionConflict             also redis WatchError: optimistic() ran out of retries
    ├── UnsupportedCacheBackend         also TypeError: a cache fill on a cache that is not Redis
    └── RedisServerNotFound             also RuntimeError: no redis-server binary (testing helpers)

:class:`TransactionConflict` is not a lock error: an optimistic transaction takes no lock, and
it is what redis-py raises for one conflict (``WatchError``) after every retry.  Until 0.1 it was
a ``LockError``; catch ``CoordError`` (or ``WatchError``) instead.

``MissingKeyValue`` and ``KeyTooLong`` subclass Django's ``BadRequest`` as well: they are defined
Django-side, with the key templates (:mod:`django_redis_coord.key_templates.template`), since this
module imports nothing from Django.
"""

from __future__ import annotations

from typing import Any, Optional

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError, LockNotOwnedError, WatchError

__all__ = [
    "LockError",
    "LockNotOwnedError",
    "CoordError",
    "CoordLockError",
    "InvalidLockArgument",
    "InvalidLockArgumentType",
    "NameKindConflict",
    "InvalidRate",
    "CostTooHigh",
    "LockLostError",
    "LockForkedError",
    "LockAcquireTimeout",
    "LockUpgradeError",
    "QuorumUnavailable",
    "ReplicationNotAcknowledged",
    "RedisServerNotFound",
    "ConnectionPoolTooSmall",
    "SemaphoreLimitNotSet",
    "TransactionConflict",
    "UnsupportedCacheBackend",
    "StaleFenceError",
    "KeyTemplateError",
    "LockContended",
    "RateLimitExceeded",
]


class CoordError(Exception):
    """Base class of the errors defined by django_redis_coord (``lock_name``: the name concerned)."""

    def __init__(self, message: Optional[str] = None, lock_name: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.lock_name = lock_name


class CoordLockError(CoordError, LockError):
    """Base class of the errors about a lock or a permit: also a redis-py ``LockError``."""


class InvalidLockArgument(CoordLockError, ValueError):
    """An argument has a value a lock cannot work with; nothing was written to Redis."""


class InvalidLockArgumentType(InvalidLockArgument, TypeError):
    """An argument has the wrong type; nothing was written to Redis."""


class NameKindConflict(InvalidLockArgument):
    """The name is in use by another kind of primitive (a lock's name held by a semaphore, or the
    reverse) or holds another kind of Redis value; nothing was written to Redis."""


class InvalidRate(InvalidLockArgument):
    """A rate limit's rate (``"100/m"``) that cannot be parsed or is out of range; nothing was written."""


class CostTooHigh(InvalidLockArgument):
    """A rate limit call whose cost is above the limit's capacity: it could never be admitted."""


class LockAcquireTimeout(CoordLockError):
    """A context manager could not acquire the lock within ``blocking_timeout``."""


class ConnectionPoolTooSmall(CoordLockError, ValueError):
    """A blocking acquire needs one connection of the client's pool for its process's waiting
    connection (see ``django_redis_coord.core.waiting``) and at least one more for its commands."""


class LockLostError(CoordLockError, LockNotOwnedError):
    """The hold ended without a release: it expired, was taken over or could not be renewed."""


class LockForkedError(CoordLockError):
    """A hold was released, extended or renewed in a forked child of the process that took it.

    Refused with nothing sent to Redis: the hold stays with the process that acquired it (that
    process's watchdog renews it, its ``valid`` and ``on_lost`` describe it), so the parent keeps a
    hold that no other process can end behind its back.  The child takes holds of its own."""


class LockUpgradeError(CoordLockError):
    """A thread (or task) holding a read hold of a read-write lock asked for its write hold.

    Refused at once, with nothing sent to Redis: the write could only be granted once every read
    has ended, this thread's own included, so waiting for it would wait for ever (or until
    ``blocking_timeout``).  Release the read first, or take the write from the start."""


class StaleFenceError(CoordLockError):
    """A fenced read or write came from a holder older than one the resource has already seen."""

    def __init__(self, message: str, fence: int = 0, highest: int = 0, lock_name: Any = None) -> None:
        super().__init__(message, lock_name=lock_name)
        self.fence = fence
        self.highest = highest


class QuorumUnavailable(CoordLockError, RedisConnectionError):
    """Fewer Redlock masters than the quorum answered within the per-master timeout.

    ``failures`` maps each master that did not answer (``"host:port"``) to its error.  Also a
    redis-py ``ConnectionError``, so code that handles an unreachable Redis handles this too.
    """

    def __init__(
        self,
        message: str,
        failures: Optional[dict[str, BaseException]] = None,
        lock_name: Any = None,
    ) -> None:
        super().__init__(message, lock_name=lock_name)
        self.failures: dict[str, BaseException] = dict(failures or {})


class ReplicationNotAcknowledged(CoordLockError):
    """Fewer than the required replicas acknowledged a DurableLock's grant in time; the hold was
    released (see :class:`~django_redis_coord.DurableLock`)."""

    def __init__(self, message: str, acknowledged: int, required: int, lock_name: Any = None) -> None:
        super().__init__(message, lock_name=lock_name)
        self.acknowledged = acknowledged
        self.required = required


class RedisServerNotFound(CoordError, RuntimeError):
    """No redis-server binary could be found (see :mod:`django_redis_coord.testing`)."""


class SemaphoreLimitNotSet(CoordLockError, TypeError):
    """A semaphore was used before its limit was set (see ``set_max_size``)."""


class TransactionConflict(CoordError, WatchError):
    """An optimistic (WATCH/MULTI/EXEC) transaction kept conflicting until its retries ran out."""

    def __init__(self, message: str, attempts: int = 0, lock_name: Any = None) -> None:
        super().__init__(message, lock_name=lock_name)
        self.attempts = attempts


class UnsupportedCacheBackend(CoordError, TypeError):
    """A cache fill (``get_or_set``) was asked of a Django cache it cannot write to atomically: not
    django-redis nor Django's own ``RedisCache`` (``LocMemCache``, memcached, the database cache),
    or a django-redis client class that stores values its own way (``HerdClient``) or spreads
    them over several servers (``ShardClient``).  ``lock_name`` is the cache alias."""


# -- the Django layer (``@locked``, ``@rate_limited``) ------------------------------------------------
class KeyTemplateError(InvalidLockArgument):
    """A key template that is malformed or names a value the decorated function cannot provide."""


class LockContended(CoordLockError):
    """The key is held (or all ``limit`` permits are taken): raised by plain functions and ``with``."""

    def __init__(self, message: str, lock_name: Any = None, retry_after: Optional[int] = None) -> None:
        super().__init__(message, lock_name=lock_name)
        self.retry_after = retry_after


class RateLimitExceeded(CoordError):
    """``@rate_limited`` refused a call outside a view (a task, a function, ``on_limited="raise"``).

    ``retry_after``: seconds until a call of the same cost would be admitted (a float)."""

    def __init__(self, message: str, lock_name: Any = None, retry_after: float = 0.0) -> None:
        super().__init__(message, lock_name=lock_name)
        self.retry_after = retry_after


# Each error is named by its documented path (in tracebacks, reprs, pickles and the error paths a
# task result records), which imports the same classes: ``django_redis_coord.exceptions``.
for _error in list(globals().values()):
    if isinstance(_error, type) and _error.__module__ == __name__:
        _error.__module__ = "django_redis_coord.exceptions"
del _error
