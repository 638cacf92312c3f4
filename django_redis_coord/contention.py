"""The documented path ``django_redis_coord.contention``: its names live in
:mod:`django_redis_coord.decorator.contention`.  Nothing in the package imports this module."""

from __future__ import annotations

from .decorator.contention import (
    Contention,
    Skipped,
    answer_async,
    answer_sync,
    contended_error,
    contention,
    is_skipped,
    skipped,
)

__all__ = [
    "Contention",
    "Skipped",
    "answer_async",
    "answer_sync",
    "contended_error",
    "contention",
    "is_skipped",
    "skipped",
]
