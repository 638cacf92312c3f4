"""The documented path ``django_redis_coord.connection``: its names live in
:mod:`django_redis_coord.config.connection`.  Nothing in the package imports this module."""

from __future__ import annotations

from .config.connection import (
    DEFAULT_CLIENT_OPTIONS,
    describe_connection,
    get_async_client,
    get_async_redlock_masters,
    get_client,
    get_redlock_masters,
    mirror_async,
    prefixed,
    reset_clients,
    unprefixed,
)

__all__ = [
    "DEFAULT_CLIENT_OPTIONS",
    "describe_connection",
    "get_async_client",
    "get_async_redlock_masters",
    "get_client",
    "get_redlock_masters",
    "mirror_async",
    "prefixed",
    "reset_clients",
    "unprefixed",
]
