"""The documented path ``django_redis_coord.cache_fill``: its names live in
:mod:`django_redis_coord.integrations.cache_fill.sync`.  Nothing in the package imports this module."""

from __future__ import annotations

from .integrations.cache_fill.sync import DEFAULT_LOCK_TIMEOUT, get_or_set

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "get_or_set",
]
