"""The documented path ``django_redis_coord.asyncio.durable``: its names live in
:mod:`django_redis_coord.core.durable.aio`.  Nothing in the package imports this module."""

from __future__ import annotations

from ..core.durable.aio import DurableLock, ReplicationNotAcknowledged

__all__ = [
    "DurableLock",
    "ReplicationNotAcknowledged",
]
