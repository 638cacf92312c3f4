"""Asyncio twins of the core primitives (same names and behaviour, over ``redis.asyncio``)."""

from __future__ import annotations

from ..holders import async_lock_holder
from .lock import Lock

__all__ = ["Lock", "async_lock_holder"]
