"""The documented path ``django_redis_coord.shortcuts``: its names live in
:mod:`django_redis_coord.config.shortcuts`.  Nothing in the package imports this module."""

from __future__ import annotations

from .config.shortcuts import (
    alock,
    aredlock,
    arwlock,
    asemaphore,
    lock,
    locked_primitive,
    made_lock,
    redlock,
    rwlock,
    semaphore,
)

__all__ = [
    "alock",
    "aredlock",
    "arwlock",
    "asemaphore",
    "lock",
    "locked_primitive",
    "made_lock",
    "redlock",
    "rwlock",
    "semaphore",
]
