"""The documented path ``django_redis_coord.decorators``: its names live in
:mod:`django_redis_coord.decorator.locked`.  Nothing in the package imports this module."""

from __future__ import annotations

from .decorator.locked import (
    Contention,
    KeyTemplateError,
    KeyTooLong,
    LockContended,
    Locked,
    MissingKeyValue,
    current_lock,
    locked,
    redlock_user_names,
)

__all__ = [
    "Contention",
    "KeyTemplateError",
    "KeyTooLong",
    "LockContended",
    "Locked",
    "MissingKeyValue",
    "current_lock",
    "locked",
    "redlock_user_names",
]
