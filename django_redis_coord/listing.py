"""The documented path ``django_redis_coord.listing``: its names live in
:mod:`django_redis_coord.core.listing`.  Nothing in the package imports this module."""

from __future__ import annotations

from .core.listing import (
    KINDS,
    ForceReleaseResult,
    HolderInfo,
    HolderListing,
    HoldSelection,
    RegistryEntry,
    Waiter,
    format_ms,
    holder_id,
    mask_token,
    parse_duration,
    parse_holder_id,
)

__all__ = [
    "ForceReleaseResult",
    "HoldSelection",
    "HolderInfo",
    "HolderListing",
    "KINDS",
    "RegistryEntry",
    "Waiter",
    "format_ms",
    "holder_id",
    "mask_token",
    "parse_duration",
    "parse_holder_id",
]
