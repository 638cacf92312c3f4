"""The documented path ``django_redis_coord.rwlock``: its names live in
:mod:`django_redis_coord.core.rwlock.sync`.  Nothing in the package imports this module."""

from __future__ import annotations

from .core.rwlock.sync import ReadWriteLock, RWHold

__all__ = [
    "RWHold",
    "ReadWriteLock",
]
