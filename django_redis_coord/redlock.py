"""The documented path ``django_redis_coord.redlock``: its names live in
:mod:`django_redis_coord.core.redlock.sync`.  Nothing in the package imports this module."""

from __future__ import annotations

from .core.redlock.sync import DEFAULT_RETRY_DELAY, DEFAULT_TIMEOUT, QuorumUnavailable, Redlock

__all__ = [
    "DEFAULT_RETRY_DELAY",
    "DEFAULT_TIMEOUT",
    "QuorumUnavailable",
    "Redlock",
]
