"""Step 2 of a listing: the holders of given primitives (holder info, fence, remaining TTL,
waiters), read in one round trip, each kind by its read-only inspect script; and the callers
queued for one primitive.  A primitive whose hold ended since step 1 is left out: its key must
still exist when its details are read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ..arguments import as_bytes
from ..exceptions import InvalidLockArgument
from ..holders import KINDS, HolderInfo, mask_token, masked_record, owner_fields, parse_info, token_mode
from ..keys import encode_name, key_slot, keys_for
from ._redis import is_cluster, run_scripts, server_now_ms
from .registries import RegistryEntry

__all__ = ["DetailReading", "Waiter"]


@dataclass(frozen=True)
class Waiter:
    """A caller queued for a primitive (position 0 is served first)."""

    position: int
    token: bytes = field(repr=False)
    #: The waiter's place lapses at this server instant unless it refreshes it (ms).
    lease_until_ms: Optional[int]
    host: Optional[str] = None
    pid: Optional[int] = None
    thread: Optional[str] = None
    label: Optional[str] = None
    extra: dict = field(default_factory=dict)
    #: What a read-write lock's waiter asks for, ``"read"`` or ``"write"`` (``None``: another kind).
    mode: Optional[str] = None

    @property
    def masked_token(self) -> str:
        return mask_token(self.token)

    def as_dict(self, server_now_ms: int) -> dict[str, Any]:
        lease_ms = None if self.lease_until_ms is None else self.lease_until_ms - server_now_ms
        return {
            "position": self.position,
            "token": self.masked_token,
            "lease_ms": lease_ms,
            "owner": {"host": self.host, "pid": self.pid, "thread": self.thread, "label": self.label},
            "mode": self.mode,
            "extra": self.extra,
        }


class DetailReading:
    """The detail reads of :class:`~django_redis_coord.listing.HolderListing`."""

    client: Any
    prefix: bytes

    def details(self, entries: Sequence[RegistryEntry]) -> list[HolderInfo]:
        """Holders of ``entries`` (in their order), read in one round trip.

        One read-only script call per kind (per kind and slot on a Redis Cluster).  An entry
        whose hold ended since the registries were read is left out.
        """
        cluster = is_cluster(self.client)
        groups: dict[tuple[str, int], list[RegistryEntry]] = {}
        for entry in entries:
            if entry.kind not in _KIND_SUPPORT:
                continue
            slot = key_slot(entry.raw_name) if cluster else 0
            groups.setdefault((entry.kind, slot), []).append(entry)
        if not groups:
            return []
        calls = []
        for (kind, _), members in groups.items():
            support = _KIND_SUPPORT[kind]
            calls.append((support.script, [key for entry in members for key in support.keys(entry.raw_name)]))
        replies = run_scripts(self.client, calls)
        found: dict[tuple[bytes, str], list[dict[str, Any]]] = {}
        for ((kind, _), members), reply in zip(groups.items(), replies):
            records = _netstrings(reply)
            now_ms = int(records[0] or 0)
            for entry, record in zip(members, records[1:]):
                found[(entry.raw_name, kind)] = _KIND_SUPPORT[kind].parse(kind, entry.raw_name, record or b"", now_ms)
        drafts = [draft for entry in entries for draft in found.get((entry.raw_name, entry.kind), ())]
        return self._build_holders(drafts)

    def _build_holders(self, drafts: Sequence[dict[str, Any]]) -> list[HolderInfo]:
        """HolderInfo objects from the fields the parsers read (``info`` still raw JSON)."""
        raw = [draft.pop("info") for draft in drafts]
        infos = _decode_infos(raw)
        return [HolderInfo(**draft, **owner_fields(meta, draft["token"], info), prefix=self.prefix)
                for draft, meta, info in zip(drafts, infos, raw)]

    def holder(self, name: Union[str, bytes], kind: str = "lock") -> list[HolderInfo]:
        """The live holders of one primitive (a lock has at most one), read directly."""
        raw = encode_name(name)
        if kind not in _KIND_SUPPORT:
            raise InvalidLockArgument(f"unknown or unavailable kind {kind!r}", lock_name=name)
        return self.details([RegistryEntry(kind=kind, raw_name=raw, expires_at_ms=None, server_now_ms=0)])

    def waiters(self, name: Union[str, bytes], kind: str = "lock") -> list[Waiter]:
        """The callers queued for the lock (semaphore, read-write lock) ``name``, first served first."""
        raw = encode_name(name)
        if kind not in KINDS:
            raise InvalidLockArgument(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}", lock_name=name)
        keys = keys_for(raw, kind.encode())
        pipe = self.client.pipeline(transaction=True)
        pipe.zrange(keys.queue, 0, -1)
        pipe.hgetall(keys.waiters)
        queued, records = pipe.execute()
        if isinstance(records, list):  # a cluster's MULTI/EXEC in redis-py before 8 leaves HGETALL's RESP2 reply flat
            records = dict(zip(records[0::2], records[1::2]))
        records = {as_bytes(k): as_bytes(v) for k, v in records.items()}
        result = []
        for position, token in enumerate(queued):
            token = as_bytes(token) or b""
            result.append(_parse_waiter(position, token, records.get(token), token_mode(kind, token)))
        return result

    def server_time_ms(self) -> int:
        return server_now_ms(self.client.time())


def _decode_infos(raw: Sequence[bytes]) -> list[dict]:
    """The holder-info JSON objects of many holders, decoded in one ``json.loads`` call."""
    try:
        parsed = json.loads(b"[" + b",".join(item or b"null" for item in raw) + b"]")
    except ValueError:
        parsed = None
    if not isinstance(parsed, list) or len(parsed) != len(raw):  # a record that is not JSON
        parsed = [parse_info(item) for item in raw]
    return [item if isinstance(item, dict) else {} for item in parsed]


def _lock_keys(name: bytes) -> tuple[bytes, ...]:
    keys = keys_for(name, b"lock")
    return (keys.name, keys.meta, keys.queue)


def _lock_parse(kind: str, name: bytes, record: bytes, now_ms: int) -> list[dict[str, Any]]:
    """One lock's record from ``lock_inspect_many.lua``: the fields of its holder, if any."""
    if record == b"-2":
        return []
    pttl, fence, since, waiters, size, rest = record.split(b" ", 5)
    token_length = int(size)
    ttl = int(pttl)
    if ttl == -2 or ttl == 0:
        return []
    return [
        {
            "kind": kind,
            "raw_name": name,
            "token": rest[:token_length],
            "fence": int(fence) if fence != b"-" else 0,
            "ttl_ms": ttl if ttl > 0 else None,
            "acquired_at_ms": int(since) if since != b"-" else None,
            "waiters": int(waiters),
            "server_now_ms": now_ms,
            "info": rest[token_length:],
        }
    ]


def _sem_keys(name: bytes) -> tuple[bytes, ...]:
    keys = keys_for(name, b"sem")
    return (keys.name, keys.meta, keys.queue)


def _rw_keys(name: bytes) -> tuple[bytes, ...]:
    keys = keys_for(name, b"rw")
    return (keys.name, keys.meta, keys.queue)


def _sem_parse(kind: str, name: bytes, record: bytes, now_ms: int) -> list[dict[str, Any]]:
    """One semaphore's record: limit, live permits, queue length, then one record per permit (a
    read-write lock's the same, one per hold, without a limit: ``used`` is how many hold it).

    Both kinds keep a sorted set at the name and their records in a meta hash of their own kind:
    read as the other kind (``locks show NAME`` tries each in turn), a live member has no record
    (the script gives fence 0, which no grant has), and is left out."""
    limit, used, _waiting, rest = record.split(b" ", 3)
    drafts = []
    for permit in _netstrings(rest):
        for draft in _lock_parse(kind, name, permit or b"", now_ms):
            if draft["fence"] == 0:  # no record of this kind (see above): another kind's hold
                continue
            draft["used"] = int(used)
            draft["limit"] = int(limit) if limit != b"-" else None
            drafts.append(draft)
    drafts.sort(key=lambda draft: draft["fence"])
    return drafts


@dataclass(frozen=True)
class _KindSupport:
    """How the listing reads the holders of one kind of primitive, many at a time."""

    #: a read-only script taking the keys of many primitives, returning the server's now in ms
    #: and one record per primitive, as netstrings
    script: str
    #: name -> the keys of one primitive, in the order the script expects
    keys: Callable[[bytes], tuple[bytes, ...]]
    #: (kind, name, record, server now ms) -> the fields of its live holders (one per permit for
    #: a semaphore), their holder info still raw JSON under "info"
    parse: Callable[[str, bytes, bytes, int], list[dict[str, Any]]]


_KIND_SUPPORT: dict[str, _KindSupport] = {
    "lock": _KindSupport("lock_inspect_many", _lock_keys, _lock_parse),
    "sem": _KindSupport("sem_inspect_many", _sem_keys, _sem_parse),
    # A read-write lock keeps its holds as a semaphore keeps its permits (see _rwlock_base).
    "rw": _KindSupport("sem_inspect_many", _rw_keys, _sem_parse),
}


def _netstrings(data: Any) -> list[Optional[bytes]]:
    """Decode ``"<length>:<bytes>"`` items (``"-:"`` is ``None``) as written by the inspect scripts."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    out: list[Optional[bytes]] = []
    append = out.append
    find = data.find
    i, end = 0, len(data)
    while i < end:
        colon = find(b":", i)
        if colon < 0:
            raise ValueError("truncated netstring reply")
        if data[i:colon] == b"-":
            append(None)
            i = colon + 1
            continue
        stop = colon + 1 + int(data[i:colon])
        append(data[colon + 1 : stop])
        i = stop
    return out


def _parse_waiter(position: int, token: bytes, record: Optional[bytes], mode: Optional[str] = None) -> Waiter:
    """A waiter record is ``"ttl lease_until lease channel id info"`` (ms, ms, ms, where its grant
    is announced, JSON: see ``parse_waiter`` in lua/common.lua)."""
    if record is None:
        return Waiter(position=position, token=token, lease_until_ms=None, mode=mode)
    parts = record.split(b" ", 5)
    lease_until = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    info = parts[5] if len(parts) == 6 else b"{}"
    meta = masked_record(parse_info(info), token, info)
    return Waiter(
        position=position,
        token=token,
        lease_until_ms=lease_until,
        host=meta.pop("host", None),
        pid=meta.pop("pid", None),
        thread=meta.pop("thread", None),
        label=meta.pop("label", None),
        extra=meta,
        mode=mode,
    )
