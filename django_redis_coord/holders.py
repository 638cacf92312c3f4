"""The documented path ``django_redis_coord.holders``: its names live in
:mod:`django_redis_coord.core.holders`.  Nothing in the package imports this module."""

from __future__ import annotations

from .core.holders import (
    KINDS,
    MANY_HOLDERS,
    HolderInfo,
    async_rwlock_holders,
    async_semaphore_holders,
    format_ms,
    hold_digest,
    holder_id,
    holders,
    lock_holder,
    mask_token,
    masked_record,
    owner_fields,
    parse_holder_id,
    parse_info,
    permits_from_inspect,
    rwlock_holders,
    semaphore_holders,
    text,
    token_mode,
)

__all__ = [
    "HolderInfo",
    "KINDS",
    "MANY_HOLDERS",
    "async_rwlock_holders",
    "async_semaphore_holders",
    "format_ms",
    "hold_digest",
    "holder_id",
    "holders",
    "lock_holder",
    "mask_token",
    "masked_record",
    "owner_fields",
    "parse_holder_id",
    "parse_info",
    "permits_from_inspect",
    "rwlock_holders",
    "semaphore_holders",
    "text",
    "token_mode",
]
