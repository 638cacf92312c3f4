"""The documented path ``django_redis_coord.signalling``: its names live in
:mod:`django_redis_coord.config.signalling`.  Nothing in the package imports this module."""

from __future__ import annotations

from .config.signalling import DjangoSignals, app_name, name_view, retry_after, retry_after_seconds, speak_for

__all__ = [
    "DjangoSignals",
    "app_name",
    "name_view",
    "retry_after",
    "retry_after_seconds",
    "speak_for",
]
