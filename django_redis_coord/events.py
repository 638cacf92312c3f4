"""The documented path ``django_redis_coord.events``: its names live in
:mod:`django_redis_coord.core.events`.  Nothing in the package imports this module."""

from __future__ import annotations

from .core.events import Events

__all__ = [
    "Events",
]
