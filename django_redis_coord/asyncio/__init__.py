"""Asyncio twins of the core primitives (same names and behaviour, over ``redis.asyncio``)."""

from __future__ import annotations

from ..holders import async_lock_holder, async_rwlock_holders, async_semaphore_holders
from ..ratelimit.aio import RateLimit, SlidingWindowLimit
from .durable import DurableLock
from .leader import Leader
from .lock import Lock
from .redlock import Redlock
from .rwlock import ReadWriteLock
from .semaphore import Semaphore

__all__ = [
    "DurableLock", "Leader", "Lock", "RateLimit", "ReadWriteLock", "Redlock", "Semaphore", "SlidingWindowLimit",
    "async_lock_holder", "async_rwlock_holders", "async_semaphore_holders",
]
