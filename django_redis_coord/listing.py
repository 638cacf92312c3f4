"""Who holds what: the live holders of locks and semaphore permits, for operators.

One service shared by the ``locks`` management command and the admin page; it imports nothing
from Django.  It never scans the keyspace (locks often share a database with a large cache):
every grant records its holder in the registry of its Redis Cluster slot (see
:func:`django_redis_coord.keys.registry_key`), so listing reads those 16384 small sorted sets and
nothing else.

* On a standalone server the registries are read by one ``ZUNION`` (with ``TIME``, in one
  ``MULTI``/``EXEC`` pipeline); a server without ZUNION gets one static script that declares
  all of them (``lua/registry_live.lua``).  On a Redis Cluster, each primary is asked for the
  registries of the slots it serves, in one pipeline per primary.
* The details of the live entries (holder metadata, fence, remaining TTL, waiters) are then
  fetched in one more round trip, each entry by its kind's read-only inspect script.
* Expiry is judged by the server's clock, twice: the registry entry must not have expired, and
  the holder's key must still exist when its details are read.

>>> listing = HolderListing(client)                      # doctest: +SKIP
>>> for holder in listing.holders(search="report"):     # doctest: +SKIP
...     print(holder.name, holder.kind, holder.fence, holder.ttl_ms, holder.owner)
reports:nightly lock 1764000000123456 27310 web-1 pid 4242 MainThread

Force release (an operator's action) deletes the hold, moves the lock's fence counter past it so
the old holder is fenced out, and hands the lock to the next live waiter::

    result = listing.force_release("reports:nightly", expected_fence=holder.fence)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from typing import Any, Optional, Union

from redis.exceptions import NoScriptError, ResponseError, SlotNotCoveredError

from ._base import META_RETENTION_MS, as_bytes
from .exceptions import InvalidLockArgument
from .keys import SLOTS, encode_name, key_slot, keys_for, registry_key
from .scripts import sync_scripts

__all__ = [
    "KINDS",
    "format_ms",
    "mask_token",
    "HolderListing",
    "LiveHolder",
    "RegistryEntry",
    "Waiter",
    "ForceReleaseResult",
    "holder_id",
    "parse_holder_id",
]

#: Kinds of primitive the registry can hold, with a human title.
KINDS: dict[str, str] = {"lock": "Lock", "sem": "Semaphore"}

_LIVE_SCRIPT = "registry_live"


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def format_ms(ms: Optional[int]) -> str:
    """A duration for people: ``850ms``, ``12.3s``, ``5m03s``, ``2h05m``; ``∞`` for ``None``."""
    if ms is None:
        return "∞"
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def holder_id(kind: str, name: bytes) -> str:
    """A URL-safe identifier of ``kind`` + raw ``name`` (any bytes round-trip)."""
    return base64.urlsafe_b64encode(kind.encode() + b":" + name).decode().rstrip("=")


def parse_holder_id(value: str) -> tuple[str, bytes]:
    """Inverse of :func:`holder_id`; raises :class:`InvalidLockArgument` on garbage.  The id of
    one semaphore permit (``<id>.<fence>``, see :attr:`LiveHolder.id`) gives its semaphore."""
    head, dot, fence = value.partition(".")
    if dot and fence.isdigit() and fence.isascii():
        value = head
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (ValueError, TypeError):
        raise InvalidLockArgument(f"not a holder id: {value!r}")
    kind, sep, name = raw.partition(b":")
    if not sep or kind.decode("ascii", "replace") not in KINDS or not name:
        raise InvalidLockArgument(f"not a holder id: {value!r}")
    return kind.decode(), name


class _Named:
    """``name`` (decoded) and ``id`` (URL-safe) of something with ``kind`` and ``raw_name``."""

    kind: str
    raw_name: bytes

    @property
    def name(self) -> str:
        return _text(self.raw_name)

    @property
    def id(self) -> str:
        return holder_id(self.kind, self.raw_name)


def mask_token(token: bytes) -> str:
    """The first characters of a token only: enough to tell holders apart, not to forge one."""
    text = _text(token)
    return text[:4] + "…" if len(text) > 8 else "…"


@dataclass
class RegistryEntry(_Named):
    """One live registry entry: a primitive that had a holder when the registries were read.

    (Plain dataclasses, not frozen: a listing builds thousands of these and frozen ones cost
    eight times as much to create.)
    """

    kind: str
    raw_name: bytes
    #: Expiry of the hold in server milliseconds, ``None`` for a hold without expiry.
    expires_at_ms: Optional[int]
    #: The server's clock (ms) when the registry was read.
    server_now_ms: int


@dataclass
class LiveHolder(_Named):
    """A live holder of a lock, or of one semaphore permit, with what operators need to know."""

    kind: str
    raw_name: bytes
    token: bytes = field(repr=False)
    fence: int
    #: Remaining time of the hold in ms when it was read; ``None``: no expiry.
    ttl_ms: Optional[int]
    #: When the hold was granted, in server milliseconds since the epoch.
    acquired_at_ms: Optional[int]
    host: Optional[str] = None
    pid: Optional[int] = None
    thread: Optional[str] = None
    label: Optional[str] = None
    view: Optional[str] = None
    extra: dict = field(default_factory=dict)
    #: Callers queued for the primitive.
    waiters: int = 0
    #: Semaphores: permits in use and the limit (``None`` for a lock).
    used: Optional[int] = None
    limit: Optional[int] = None
    #: The server's clock (ms) when the details were read.
    server_now_ms: int = 0


    @property
    def id(self) -> str:
        """One hold's own id: the primitive's (:func:`holder_id`), and for a semaphore permit its
        fence after a dot, since several permits of one semaphore are listed at once."""
        primitive = holder_id(self.kind, self.raw_name)
        return f"{primitive}.{self.fence}" if self.kind == "sem" else primitive

    @property
    def kind_title(self) -> str:
        return KINDS.get(self.kind, self.kind)

    @property
    def masked_token(self) -> str:
        return mask_token(self.token)

    @property
    def owner(self) -> str:
        """``host pid N thread`` (what is known of it), for tables."""
        parts = [self.host or "?"]
        if self.pid is not None:
            parts.append(f"pid {self.pid}")
        if self.thread:
            parts.append(self.thread)
        return " ".join(parts)

    @property
    def acquired_at(self) -> Optional[datetime]:
        if self.acquired_at_ms is None:
            return None
        return datetime.fromtimestamp(self.acquired_at_ms / 1000.0, tz=timezone.utc)

    @property
    def held_for_ms(self) -> Optional[int]:
        if self.acquired_at_ms is None or not self.server_now_ms:
            return None
        return max(0, self.server_now_ms - self.acquired_at_ms)

    @property
    def usage(self) -> Optional[str]:
        """``"n/limit"`` for a semaphore permit, ``None`` for a lock."""
        if self.used is None:
            return None
        return f"{self.used}/{self.limit if self.limit is not None else '?'}"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the token masked)."""
        acquired = self.acquired_at
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "fence": self.fence,
            "ttl_ms": self.ttl_ms,
            "acquired_at": acquired.isoformat() if acquired else None,
            "acquired_at_ms": self.acquired_at_ms,
            "held_for_ms": self.held_for_ms,
            "owner": {
                "host": self.host,
                "pid": self.pid,
                "thread": self.thread,
                "label": self.label,
                "view": self.view,
            },
            "token": self.masked_token,
            "waiters": self.waiters,
            "used": self.used,
            "limit": self.limit,
            "extra": self.extra,
        }


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
            "extra": self.extra,
        }


@dataclass(frozen=True)
class ForceReleaseResult:
    """Outcome of :meth:`HolderListing.force_release`."""

    #: True when a hold was removed.
    released: bool
    #: Nobody held the primitive (nothing changed).
    was_free: bool
    #: The hold's fence was not the expected one (nothing changed).
    fence_mismatch: bool
    #: Fence of the released hold (or of the current one, on a mismatch).
    fence: int
    #: The lock's fence counter right after the release: every later grant is above it.
    fence_after: int
    #: The lock (or permit) went straight to a waiter.
    handed_off: bool = False


def _split_info(info: Any) -> dict:
    if not info:
        return {}
    try:
        meta = json.loads(info)
    except (TypeError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _decode_infos(raw: Sequence[bytes]) -> list[dict]:
    """The holder-info JSON objects of many holders, decoded in one ``json.loads`` call."""
    try:
        parsed = json.loads(b"[" + b",".join(item or b"null" for item in raw) + b"]")
    except ValueError:
        parsed = None
    if not isinstance(parsed, list) or len(parsed) != len(raw):  # a record that is not JSON
        parsed = [_split_info(item) for item in raw]
    return [item if isinstance(item, dict) else {} for item in parsed]


def _build_holders(drafts: Sequence[dict[str, Any]]) -> list[LiveHolder]:
    """LiveHolder objects from the fields the parsers read (``info`` still raw JSON)."""
    infos = _decode_infos([draft.pop("info") for draft in drafts])
    holders = []
    for draft, meta in zip(drafts, infos):
        holders.append(
            LiveHolder(
                **draft,
                host=meta.pop("host", None),
                pid=meta.pop("pid", None),
                thread=meta.pop("thread", None),
                label=meta.pop("label", None),
                view=meta.pop("view", None),
                extra=meta,
            )
        )
    return holders


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


def _sem_keys(name: bytes) -> tuple[bytes, ...]:
    keys = keys_for(name, b"sem")
    return (keys.name, keys.meta, keys.queue)


def _sem_parse(kind: str, name: bytes, record: bytes, now_ms: int) -> list[dict[str, Any]]:
    """One semaphore's record: limit, live permits, queue length, then one record per permit."""
    limit, used, _waiting, rest = record.split(b" ", 3)
    drafts = []
    for permit in _netstrings(rest):
        for draft in _lock_parse(kind, name, permit or b"", now_ms):
            draft["used"] = int(used)
            draft["limit"] = int(limit) if limit != b"-" else None
            drafts.append(draft)
    drafts.sort(key=lambda draft: draft["fence"])
    return drafts


_KIND_SUPPORT: dict[str, _KindSupport] = {
    "lock": _KindSupport("lock_inspect_many", _lock_keys, _lock_parse),
    "sem": _KindSupport("sem_inspect_many", _sem_keys, _sem_parse),
}


def _support(kind: str) -> Optional[_KindSupport]:
    return _KIND_SUPPORT.get(kind)


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


def _is_cluster(client: Any) -> bool:
    return hasattr(client, "get_primaries") and hasattr(client, "nodes_manager")


def _casefold(value: str) -> str:
    return value.casefold()


class HolderListing:
    """Read the live holders of a Redis server or cluster; force-release a lock.

    ``client`` is a sync ``redis.Redis`` (or ``redis.cluster.RedisCluster``).  ``prefix``
    restricts everything to names starting with it (e.g. a Django site's ``KEY_PREFIX``).
    """

    #: The server has no ZUNION (before Redis 6.2): the registries are read by a script.
    _union_missing = False

    def __init__(self, client: Any, *, prefix: Union[str, bytes] = b"") -> None:
        self.client = client
        self.prefix = prefix.encode() if isinstance(prefix, str) else bytes(prefix)

    # -- step 1: the registries ----------------------------------------------------------------
    def entries(self, *, kind: Optional[str] = None, search: Optional[str] = None) -> list[RegistryEntry]:
        """Live registry entries, sorted by name then kind, filtered by ``kind`` and ``search``.

        ``search`` matches a substring of the name, case-insensitively; ``*``, ``?``, ``[`` and
        every other character are taken literally.
        """
        if kind is not None and kind not in KINDS:
            raise InvalidLockArgument(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
        if _is_cluster(self.client):
            raw = self._read_cluster_registries()
        else:
            raw = self._read_registries()
        needle = _casefold(search) if search else None
        found: dict[tuple[bytes, str], RegistryEntry] = {}
        for entry in raw:
            if kind is not None and entry.kind != kind:
                continue
            if not entry.raw_name.startswith(self.prefix):
                continue
            if needle is not None and needle not in _casefold(entry.name):
                continue
            found[(entry.raw_name, entry.kind)] = entry
        return [found[key] for key in sorted(found)]

    def _read_registries(self) -> list[RegistryEntry]:
        """The server's clock and the union of the 16384 registries, in one round trip.

        ``TIME`` and ``ZUNION <all registries> WITHSCORES`` in one ``MULTI``/``EXEC`` pipeline.
        A server without ZUNION (before Redis 6.2) gets one static script instead.
        """
        keys = _registry_keys()
        cls = type(self)
        if not cls._union_missing:
            pipe = self.client.pipeline(transaction=True)
            pipe.time()
            pipe.zunion(keys, withscores=True, score_cast_func=_score)
            try:
                (seconds, micros), pairs = pipe.execute()
            except ResponseError as error:
                if "unknown command" not in str(error).lower():
                    raise
                cls._union_missing = True
            else:
                return list(_parse_entries(pairs, int(seconds) * 1000 + int(micros) // 1000))
        [reply] = self._send_with_scripts(self.client, [(_LIVE_SCRIPT, keys)])
        return list(_parse_entries(reply[1:], int(reply[0])))

    def _read_cluster_registries(self) -> list[RegistryEntry]:
        """Per primary: its clock, then the registries of the slots it serves, in one pipeline."""
        client = self.client
        slots_by_node: dict[str, tuple[Any, list[int]]] = {}
        for slot, key in enumerate(_registry_keys()):
            try:
                primary = client.get_node_from_key(key)  # the cluster's public map of slots to primaries
            except SlotNotCoveredError:
                continue
            slots_by_node.setdefault(primary.name, (primary, []))[1].append(slot)
        entries: list[RegistryEntry] = []
        for primary, slots in slots_by_node.values():
            node_client = client.get_redis_connection(primary)
            pipe = node_client.pipeline(transaction=False)
            pipe.time()
            for slot in slots:
                pipe.zrange(registry_key(slot), 0, -1, withscores=True, score_cast_func=_score)
            replies = pipe.execute()
            seconds, micros = replies[0]
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            for pairs in replies[1:]:
                entries.extend(_parse_entries(pairs, now_ms))
        return entries

    # -- step 2: details -----------------------------------------------------------------------
    def details(self, entries: Sequence[RegistryEntry]) -> list[LiveHolder]:
        """Holders of ``entries`` (in their order), read in one round trip.

        One read-only script call per kind (per kind and slot on a Redis Cluster).  An entry
        whose hold ended since the registries were read is left out.
        """
        cluster = _is_cluster(self.client)
        groups: dict[tuple[str, int], list[RegistryEntry]] = {}
        for entry in entries:
            if _support(entry.kind) is None:
                continue
            slot = key_slot(entry.raw_name) if cluster else 0
            groups.setdefault((entry.kind, slot), []).append(entry)
        if not groups:
            return []
        calls = []
        for (kind, _), members in groups.items():
            support = _KIND_SUPPORT[kind]
            keys = [key for entry in members for key in support.keys(entry.raw_name)]
            calls.append((support.script, keys))
        replies = self._run_scripts(calls)
        found: dict[tuple[bytes, str], list[dict[str, Any]]] = {}
        for ((kind, _), members), reply in zip(groups.items(), replies):
            support = _KIND_SUPPORT[kind]
            records = _netstrings(reply)
            now_ms = int(records[0] or 0)
            for entry, record in zip(members, records[1:]):
                found[(entry.raw_name, kind)] = support.parse(kind, entry.raw_name, record or b"", now_ms)
        return _build_holders([draft for entry in entries for draft in found.get((entry.raw_name, entry.kind), ())])

    def _run_scripts(self, calls: Sequence[tuple[str, Sequence[bytes]]]) -> list[Any]:
        """EVALSHA each ``(script name, keys)`` call: one round trip (per primary on a cluster)."""
        if not _is_cluster(self.client):
            return self._send_with_scripts(self.client, calls)
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for index, (_, keys) in enumerate(calls):
            node = self.client.get_node_from_key(keys[0])
            by_node.setdefault(node.name, (node, []))[1].append(index)
        replies: list[Any] = [None] * len(calls)
        for node, indexes in by_node.values():
            node_client = self.client.get_redis_connection(node)
            answers = self._send_with_scripts(node_client, [calls[i] for i in indexes])
            for index, answer in zip(indexes, answers):
                replies[index] = answer
        return replies

    @staticmethod
    def _send_with_scripts(client: Any, calls: Sequence[tuple[str, Sequence[bytes]]]) -> list[Any]:
        """EVALSHA the ``(script name, keys)`` calls in one pipeline; load the scripts the server
        lacks (NOSCRIPT: nothing ran) and send the calls once more; raise the first error."""
        scripts = [sync_scripts.get(client, name) for name, _ in calls]
        for attempt in range(2):
            pipe = client.pipeline(transaction=False)
            for script, (_, keys) in zip(scripts, calls):
                pipe.evalsha(script.sha, len(keys), *keys)
            replies = pipe.execute(raise_on_error=False)
            missing = {id(s): s for s, reply in zip(scripts, replies) if isinstance(reply, NoScriptError)}
            if not missing or attempt:
                break
            for script in missing.values():
                client.script_load(script.script)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    # -- the public reads ----------------------------------------------------------------------
    def holders(
        self,
        *,
        kind: Optional[str] = None,
        search: Optional[str] = None,
        offset: int = 0,
        limit: Optional[int] = None,
    ) -> list[LiveHolder]:
        """Live holders sorted by name (then kind), optionally filtered and sliced.

        Slicing applies to the registry entries before their details are read, so a page costs
        the same however many holders there are elsewhere.
        """
        entries = self.entries(kind=kind, search=search)
        end = None if limit is None else offset + limit
        return self.details(entries[offset:end])

    def holder(self, name: Union[str, bytes], kind: str = "lock") -> list[LiveHolder]:
        """The live holders of one primitive (a lock has at most one), read directly."""
        raw = encode_name(name)
        support = _support(kind)
        if support is None:
            raise InvalidLockArgument(f"unknown or unavailable kind {kind!r}", lock_name=name)
        entry = RegistryEntry(kind=kind, raw_name=raw, expires_at_ms=None, server_now_ms=0)
        return self.details([entry])

    def waiters(self, name: Union[str, bytes], kind: str = "lock") -> list[Waiter]:
        """The callers queued for the lock (or semaphore) ``name``, first served first."""
        raw = encode_name(name)
        if kind not in KINDS:
            raise InvalidLockArgument(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}", lock_name=name)
        keys = keys_for(raw, kind.encode())
        pipe = self.client.pipeline(transaction=True)
        pipe.zrange(keys.queue, 0, -1)
        pipe.hgetall(keys.waiters)
        queued, records = pipe.execute()
        records = {as_bytes(k): as_bytes(v) for k, v in records.items()}
        result = []
        for position, token in enumerate(queued):
            token = as_bytes(token) or b""
            result.append(_parse_waiter(position, token, records.get(token)))
        return result

    def server_time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # -- the one write -------------------------------------------------------------------------
    def force_release(
        self, name: Union[str, bytes], kind: str = "lock", *, expected_fence: Optional[int] = None
    ) -> ForceReleaseResult:
        """Release a hold whoever has it, fence the holder out and serve the next waiter.

        For a lock, ``expected_fence`` (optional) makes it a no-op unless the current hold has
        exactly that fence: an operator confirms a particular holder, not whoever holds the lock
        by then.  For a semaphore it is required: it names the permit to take back.
        """
        raw = encode_name(name)
        if kind not in KINDS:
            raise InvalidLockArgument(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}", lock_name=name)
        if expected_fence is not None and (isinstance(expected_fence, bool) or not isinstance(expected_fence, int)):
            raise InvalidLockArgument("expected_fence must be an int", lock_name=name)
        keys = keys_for(raw, kind.encode())
        member = kind.encode() + b":" + raw
        all_keys = (keys.name, keys.meta, keys.queue, keys.waiters, keys.registry)
        if kind == "sem":
            if expected_fence is None:
                raise InvalidLockArgument("a semaphore permit is named by its fence: give expected_fence",
                                          lock_name=name)
            script = sync_scripts.get(self.client, "sem_force_release")
            args: tuple = (member, str(expected_fence), META_RETENTION_MS)
        else:
            script = sync_scripts.get(self.client, "force_release")
            args = (member, META_RETENTION_MS, "" if expected_fence is None else str(expected_fence))
        reply = script(all_keys, args, client=self.client)
        status = int(reply[0])
        return ForceReleaseResult(
            released=status == 1,
            was_free=status == 0,
            fence_mismatch=status == -1,
            fence=int(reply[1] or 0),
            fence_after=int(reply[2] or 0),
            handed_off=bool(reply[3]),
        )


def _score(value: Any) -> Any:
    return value


def _score_pairs(reply: Sequence[Any]) -> Iterable[tuple[Any, Any]]:
    """(member, score) pairs of a WITHSCORES reply: flat under RESP2, nested under RESP3."""
    if reply and isinstance(reply[0], (list, tuple)):
        return (tuple(pair) for pair in reply)  # type: ignore[misc]
    return zip(reply[0::2], reply[1::2])


def _parse_entries(reply: Sequence[Any], now_ms: int) -> Iterable[RegistryEntry]:
    for member, score in _score_pairs(reply):
        member = as_bytes(member) or b""
        kind, sep, name = member.partition(b":")
        if not sep or not name:
            continue
        value = float(score) if isinstance(score, (int, float)) else float(_text(score))
        if value == float("inf"):
            expires: Optional[int] = None
        else:
            expires = int(value)
            if expires <= now_ms:
                continue
        yield RegistryEntry(kind=kind.decode("ascii", "replace"), raw_name=name, expires_at_ms=expires,
                            server_now_ms=now_ms)


def _parse_waiter(position: int, token: bytes, record: Optional[bytes]) -> Waiter:
    """A waiter record is ``"ttl lease_until lease channel id info"`` (ms, ms, ms, where its grant
    is announced, JSON: see ``parse_waiter`` in lua/common.lua)."""
    if record is None:
        return Waiter(position=position, token=token, lease_until_ms=None)
    parts = record.split(b" ", 5)
    lease_until = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    meta = _split_info(parts[5] if len(parts) == 6 else b"{}")
    return Waiter(
        position=position,
        token=token,
        lease_until_ms=lease_until,
        host=meta.pop("host", None),
        pid=meta.pop("pid", None),
        thread=meta.pop("thread", None),
        label=meta.pop("label", None),
        extra=meta,
    )


@cache
def _registry_keys() -> list[bytes]:
    """The keys of the 16384 registries (made once: the registry read names them all)."""
    return [registry_key(slot) for slot in range(SLOTS)]
