"""The documented path ``django_redis_coord.fencing``: its names live in
:mod:`django_redis_coord.integrations.fencing`.  Nothing in the package imports this module."""

from __future__ import annotations

from .integrations.fencing import afenced_get, afenced_set, afenced_update, fenced_get, fenced_set, fenced_update

__all__ = [
    "afenced_get",
    "afenced_set",
    "afenced_update",
    "fenced_get",
    "fenced_set",
    "fenced_update",
]
