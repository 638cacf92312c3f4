"""Asyncio twins of the core primitives (same names and behaviour, over ``redis.asyncio``)."""

from __future__ import annotations

from ..core.durable.aio import DurableLock
from ..core.holders import async_lock_holder, async_rwlock_holders, async_semaphore_holders
from ..core.leader.aio import Leader
from ..core.lock.aio import Lock
from ..core.ratelimit.aio import RateLimit, SlidingWindowLimit
from ..core.redlock.aio import Redlock
from ..core.rwlock.aio import ReadWriteLock
from ..core.semaphore.aio import Semaphore

__all__ = [
    "DurableLock", "Leader", "Lock", "RateLimit", "ReadWriteLock", "Redlock", "Semaphore", "SlidingWindowLimit",
    "async_lock_holder", "async_rwlock_holders", "async_semaphore_holders",
]
