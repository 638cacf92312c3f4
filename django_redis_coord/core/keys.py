"""Key layout: every key a primitive touches hashes to the Redis Cluster slot of its name.

A primitive named ``name`` stores its main value at exactly ``name``.  Its side keys (metadata
hash, wait queue, waiter records) carry a hash tag equal to the part of ``name`` that
Redis Cluster hashes, so they live in the same slot.  The per-slot registry of live holders is
named with a canonical tag for that slot, which lets the listing service read every registry
without scanning the keyspace.

All side keys contain the reserved marker ``:dcoord:``; names containing it are refused so a
primitive's name can never alias another primitive's side key.
"""

from __future__ import annotations

import os
import threading
from binascii import crc_hqx
from dataclasses import dataclass
from functools import lru_cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS as SLOTS
from redis.crc import key_slot  # the slot of a key, as redis-py computes it (importable from here)

from .exceptions import InvalidLockArgument, InvalidLockArgumentType

MARKER = b":dcoord:"
MAX_NAME_BYTES = 64 * 1024

#: Tags found so far by :func:`slot_tag` (slot -> tag), and the next number it would try.
_slot_tags: dict[int, bytes] = {}
_next_tag_number = 0
_slot_tags_lock = threading.Lock()


def _new_slot_tags_lock() -> None:
    """In a forked child: a new lock (a thread of the parent may have held it at the fork; the
    tags found so far are complete entries, safe to keep)."""
    global _slot_tags_lock
    _slot_tags_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_slot_tags_lock)


def encode_name(name: object) -> bytes:
    """Return ``name`` as bytes, refusing anything that is not a usable, non-empty str or bytes."""
    if isinstance(name, str):
        raw = name.encode("utf-8", "surrogatepass")
    elif isinstance(name, (bytes, bytearray, memoryview)):
        raw = bytes(name)
    else:
        raise InvalidLockArgumentType(
            f"name must be str or bytes, not {type(name).__name__}", lock_name=name
        )
    if not raw:
        raise InvalidLockArgument("name must not be empty", lock_name=name)
    if len(raw) > MAX_NAME_BYTES:
        raise InvalidLockArgument(
            f"name is {len(raw)} bytes long; the limit is {MAX_NAME_BYTES}", lock_name=name
        )
    if MARKER in raw:
        raise InvalidLockArgument(
            f"name must not contain the reserved marker {MARKER.decode()!r}", lock_name=name
        )
    return raw


def hash_part(key: bytes) -> bytes:
    """The part of ``key`` Redis Cluster hashes: the first non-empty ``{...}`` tag, else all of it."""
    start = key.find(b"{")
    if start != -1:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def slot_tag(slot: int) -> bytes:
    """A short tag (digits and letters only) whose own slot is ``slot``; stable across processes.

    The tag of a slot is the lowest hexadecimal number that hashes to it.  Numbers are tried in
    order only as far as the slots asked for need (about 16,000 for a slot, on average, and then
    fewer and fewer), so a process pays for the tags it uses, not for the whole table.
    """
    global _next_tag_number
    tag = _slot_tags.get(slot)
    if tag is not None:
        return tag
    if not 0 <= slot < SLOTS:
        raise ValueError(f"slot must be in 0..{SLOTS - 1}, got {slot!r}")
    with _slot_tags_lock:
        number = _next_tag_number
        while slot not in _slot_tags:
            candidate = b"%x" % number
            # key_slot(candidate), computed in C: a number in hex has no {tag}, and Redis Cluster's
            # CRC16 is CRC-CCITT (XMODEM), binascii's crc_hqx from 0.  Four times faster: a new slot
            # costs about 16,000 numbers, and other threads wait on the lock meanwhile.
            _slot_tags.setdefault(crc_hqx(candidate, 0) & (SLOTS - 1), candidate)
            number += 1
        _next_tag_number = number
        return _slot_tags[slot]


def registry_key(slot: int) -> bytes:
    """The sorted set listing live holders (member ``kind:name``, score expiry ms) of one slot."""
    return b"{" + slot_tag(slot) + b"}" + MARKER + b"registry"


@dataclass(frozen=True)
class KeySet:
    """Every key one named primitive uses, all in the slot of ``name``."""

    name: bytes
    slot: int
    meta: bytes
    queue: bytes
    waiters: bytes
    registry: bytes


#: Names longer than this (bytes) are never kept by a per-name cache (key sets, encoded
#: arguments, holder info, the locks ``@locked`` copies from): 4,096 cached names of 64 KiB, in a
#: few copies each, would be gigabytes.  Their keys are computed afresh on each use instead.
CACHED_NAME_MAX = 256


def cacheable(name: object) -> bool:
    """Whether a per-name cache may keep ``name`` (a str or bytes name, or a label)."""
    return name is None or len(name) <= CACHED_NAME_MAX  # type: ignore[arg-type]


def keys_for(name: bytes, kind: bytes = b"lock") -> KeySet:
    """The key set of the primitive ``name`` of the given kind (cached for short names)."""
    return _cached_keys_for(name, kind) if len(name) <= CACHED_NAME_MAX else _keys_for(name, kind)


def tag_for(name: bytes) -> bytes:
    """The hash tag of keys that must share ``name``'s slot (``b"{" + tag + b"}..."``): the part of
    ``name`` Redis Cluster hashes, or, when that is the whole name and it cannot sit inside braces
    (it contains ``}``), the canonical tag of its slot (:func:`slot_tag`)."""
    tag = hash_part(name)
    if tag == name and b"}" in name:
        tag = slot_tag(key_slot(name))
    return tag


def _keys_for(name: bytes, kind: bytes) -> KeySet:
    tag = tag_for(name)
    base = b"{" + tag + b"}" + MARKER + kind + b":"
    suffix = b"" if tag == name else b":" + name
    slot = key_slot(name)
    return KeySet(
        name=name,
        slot=slot,
        meta=base + b"meta" + suffix,
        queue=base + b"queue" + suffix,
        waiters=base + b"waiters" + suffix,
        registry=registry_key(slot),
    )


_cached_keys_for = lru_cache(maxsize=4096)(_keys_for)
