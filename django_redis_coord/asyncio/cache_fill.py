"""The documented path ``django_redis_coord.asyncio.cache_fill``: its names live in
:mod:`django_redis_coord.integrations.cache_fill.aio`.  Nothing in the package imports this module."""

from __future__ import annotations

from ..integrations.cache_fill.aio import DEFAULT_LOCK_TIMEOUT, aget_or_set

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "aget_or_set",
]
