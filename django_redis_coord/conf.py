"""The documented path ``django_redis_coord.conf``: its names live in
:mod:`django_redis_coord.config.settings`.  Nothing in the package imports this module."""

from __future__ import annotations

from .config.settings import (
    DEFAULT_CLIENT_OPTIONS,
    DEFAULTS,
    REDIS_CACHE_BACKENDS,
    SETTING_NAME,
    CoordSettings,
    Problem,
    clear_settings_cache,
    coord_settings,
    prefixed,
    settings_problems,
    unprefixed,
)

__all__ = [
    "CoordSettings",
    "DEFAULTS",
    "DEFAULT_CLIENT_OPTIONS",
    "Problem",
    "REDIS_CACHE_BACKENDS",
    "SETTING_NAME",
    "clear_settings_cache",
    "coord_settings",
    "prefixed",
    "settings_problems",
    "unprefixed",
]
