"""The documented path ``django_redis_coord.durable``: its names live in
:mod:`django_redis_coord.core.durable.sync`.  Nothing in the package imports this module."""

from __future__ import annotations

from .core.durable.sync import DurableLock, ReplicationNotAcknowledged

__all__ = [
    "DurableLock",
    "ReplicationNotAcknowledged",
]
