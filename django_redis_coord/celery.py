"""The documented path ``django_redis_coord.celery``: its names live in
:mod:`django_redis_coord.integrations.celery`.  Nothing in the package imports this module."""

from __future__ import annotations

from .integrations.celery import (
    SKIPPED,
    TOKEN_PREFIX,
    DuplicateTask,
    UniqueTask,
    retry_contended,
    task_token,
)

__all__ = [
    "DuplicateTask",
    "SKIPPED",
    "TOKEN_PREFIX",
    "UniqueTask",
    "retry_contended",
    "task_token",
]
