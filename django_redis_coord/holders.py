"""Who holds a named lock, read from Redis in one atomic step (no keyspace scan)."""

from __future__ import annotations

from typing import Any, Optional, Union

from ._base import HolderInfo
from .keys import encode_name, keys_for
from .scripts import async_scripts, sync_scripts

__all__ = ["lock_holder", "holders", "HolderInfo"]


def _inspect_call(client: Any, registry: Any, name: Union[str, bytes]) -> tuple[bytes, Any]:
    raw = encode_name(name)
    keys = keys_for(raw, b"lock")
    script = registry.get(client, "lock_inspect")
    return raw, script((keys.name, keys.meta, keys.queue), (), client=client)


def lock_holder(client: Any, name: Union[str, bytes]) -> Optional[HolderInfo]:
    """The live holder of lock ``name`` with its metadata, or ``None`` when it is free."""
    raw, reply = _inspect_call(client, sync_scripts, name)
    return HolderInfo.from_inspect(raw, "lock", reply)


def holders(client: Any, name: Union[str, bytes]) -> list[HolderInfo]:
    """All live holders of ``name`` (at most one for a lock)."""
    holder = lock_holder(client, name)
    return [holder] if holder is not None else []


async def async_lock_holder(client: Any, name: Union[str, bytes]) -> Optional[HolderInfo]:
    """Asyncio twin of :func:`lock_holder`."""
    raw, reply = _inspect_call(client, async_scripts, name)
    return HolderInfo.from_inspect(raw, "lock", await reply)
