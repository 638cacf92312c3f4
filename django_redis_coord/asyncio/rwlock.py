"""The documented path ``django_redis_coord.asyncio.rwlock``: its names live in
:mod:`django_redis_coord.core.rwlock.aio`.  Nothing in the package imports this module."""

from __future__ import annotations

from ..core.rwlock.aio import ReadWriteLock, RWHold

__all__ = [
    "RWHold",
    "ReadWriteLock",
]
