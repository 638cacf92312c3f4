"""Who holds a named lock, read from Redis in one atomic step (no keyspace scan)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ._arguments import as_bytes
from .keys import encode_name, keys_for
from .scripts import async_scripts, sync_scripts

__all__ = ["lock_holder", "holders", "HolderInfo"]


@dataclass(frozen=True)
class HolderInfo:
    """A live holder of a named lock (see :func:`django_redis_coord.holders`)."""

    name: str
    kind: str
    #: The holder's secret: kept out of ``repr`` (and so out of logs); show ``masked_token``.
    token: bytes = field(repr=False)
    fence: int
    ttl_ms: Optional[int]
    acquired_at_ms: Optional[int]
    host: Optional[str]
    pid: Optional[int]
    thread: Optional[str]
    label: Optional[str]
    extra: dict
    waiters: int

    @property
    def masked_token(self) -> str:
        text = self.token.decode("utf-8", "replace")
        return text[:4] + "…" if len(text) > 4 else "…"

    @classmethod
    def from_inspect(cls, name: bytes, kind: str, reply: Any) -> Optional[HolderInfo]:
        token, pttl, fence, info, since, waiters = reply[:6]
        token = as_bytes(token)
        if token is None:
            return None
        meta: dict = {}
        if info:
            try:
                meta = json.loads(info)
            except ValueError:
                meta = {}
        pttl = int(pttl)
        return cls(
            name=name.decode("utf-8", "replace"),
            kind=kind,
            token=token,
            fence=int(fence or 0),
            ttl_ms=pttl if pttl >= 0 else None,
            acquired_at_ms=int(since) if since else None,
            host=meta.pop("host", None),
            pid=meta.pop("pid", None),
            thread=meta.pop("thread", None),
            label=meta.pop("label", None),
            extra=meta,
            waiters=int(waiters),
        )


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


# -- semaphores ------------------------------------------------------------------------------------
__all__ += ["semaphore_holders", "async_semaphore_holders", "permits_from_inspect"]


def permits_from_inspect(name: bytes, reply: Any) -> list[HolderInfo]:
    """The live permits in a ``sem_inspect.lua`` "full" reply, oldest grant first."""
    waiters = reply[3]
    permits = []
    for index in range(5, len(reply), 3):
        token, pttl, record = reply[index : index + 3]
        if isinstance(record, bytes):
            record = record.decode("utf-8", "replace")
        fence, since, _claim, info = (record or "0 0 0 {}").split(" ", 3)
        holder = HolderInfo.from_inspect(name, "semaphore", (token, pttl, fence, info, since or None, waiters))
        if holder is not None:
            permits.append(holder)
    permits.sort(key=lambda holder: holder.fence)
    return permits


def _sem_inspect_call(client: Any, registry: Any, name: Union[str, bytes]) -> tuple[bytes, Any]:
    raw = encode_name(name)
    keys = keys_for(raw, b"sem")
    script = registry.get(client, "sem_inspect")
    return raw, script((keys.name, keys.meta, keys.queue), ("full",), client=client)


def semaphore_holders(client: Any, name: Union[str, bytes]) -> list[HolderInfo]:
    """Every live permit of semaphore ``name`` with its holder's metadata (fence order)."""
    raw, reply = _sem_inspect_call(client, sync_scripts, name)
    return permits_from_inspect(raw, reply)


async def async_semaphore_holders(client: Any, name: Union[str, bytes]) -> list[HolderInfo]:
    """Asyncio twin of :func:`semaphore_holders`."""
    raw, reply = _sem_inspect_call(client, async_scripts, name)
    return permits_from_inspect(raw, await reply)
