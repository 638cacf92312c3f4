"""Asyncio twins of the core primitives (same names and behaviour, over ``redis.asyncio``)."""

from __future__ import annotations

from ..holders import async_lock_holder
from .lock import Lock
from .redlock import Redlock
from .semaphore import Semaphore

__all__ = ["Lock", "Redlock", "Semaphore", "async_lock_holder"]
