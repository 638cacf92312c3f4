"""The documented path ``django_redis_coord.tasks``: its names live in
:mod:`django_redis_coord.integrations.django_tasks`.  Nothing in the package imports this module."""

from __future__ import annotations

from .integrations.django_tasks import (
    ON_DUPLICATE,
    RESERVATION_ARGUMENT,
    Skipped,
    TaskAlreadyEnqueued,
    is_skipped,
    unique_task,
)

__all__ = [
    "ON_DUPLICATE",
    "RESERVATION_ARGUMENT",
    "Skipped",
    "TaskAlreadyEnqueued",
    "is_skipped",
    "unique_task",
]
