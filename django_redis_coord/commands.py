"""The documented path ``django_redis_coord.commands``: its names live in
:mod:`django_redis_coord.management.singleton`.  Nothing in the package imports this module."""

from __future__ import annotations

from .management.singleton import EX_TEMPFAIL, ExclusiveRun, SingletonCommand, parsed_command

__all__ = [
    "EX_TEMPFAIL",
    "ExclusiveRun",
    "SingletonCommand",
    "parsed_command",
]
