"""Step 1 of a listing: which primitives have a live holder, from the per-slot registries.

Every grant records its holder in the registry of its Redis Cluster slot (see
:func:`django_redis_coord.core.keys.registry_key`); reading those 16384 small sorted sets finds every
live hold without scanning the keyspace.  Expiry is judged by the server's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Optional

from redis.exceptions import ResponseError, SlotNotCoveredError

from ..arguments import as_bytes
from ..exceptions import InvalidLockArgument
from ..holders import KINDS, holder_id, text
from ..keys import SLOTS, registry_key
from ._redis import is_cluster, send_with_scripts, server_now_ms

__all__ = ["RegistryEntry", "RegistryReading"]

_LIVE_SCRIPT = "registry_live"


@dataclass
class RegistryEntry:
    """One live registry entry: a primitive that had a holder when the registries were read.

    (A plain dataclass, not a frozen one: a listing builds thousands of these.)
    """

    kind: str
    raw_name: bytes
    #: Expiry of the hold in server milliseconds, ``None`` for a hold without expiry.
    expires_at_ms: Optional[int]
    #: The server's clock (ms) when the registry was read.
    server_now_ms: int

    @property
    def name(self) -> str:
        return text(self.raw_name)

    @property
    def id(self) -> str:
        return holder_id(self.kind, self.raw_name)


class RegistryReading:
    """The registry reads of :class:`~django_redis_coord.listing.HolderListing`."""

    client: Any
    prefix: bytes
    #: The server has no ZUNION (before Redis 6.2): the registries are read by a script.
    _union_missing = False

    def entries(self, *, kind: Optional[str] = None, search: Optional[str] = None) -> list[RegistryEntry]:
        """Live registry entries, sorted by name then kind, filtered by ``kind`` and ``search``.

        ``search`` matches a substring of the name, case-insensitively; ``*``, ``?``, ``[`` and
        every other character are taken literally.
        """
        if kind is not None and kind not in KINDS:
            raise InvalidLockArgument(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
        raw = self._read_cluster_registries() if is_cluster(self.client) else self._read_registries()
        needle = search.casefold() if search else None
        found: dict[tuple[bytes, str], RegistryEntry] = {}
        for entry in raw:
            if kind is not None and entry.kind != kind:
                continue
            if not entry.raw_name.startswith(self.prefix):
                continue
            if needle is not None and needle not in entry.name.casefold():
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
            pipe.zunion(keys, withscores=True)  # no score_cast_func: redis-py 7+ only
            try:
                now, pairs = pipe.execute()
            except ResponseError as error:
                if "unknown command" not in str(error).lower():
                    raise
                cls._union_missing = True
            else:
                return list(_parse_entries(pairs, server_now_ms(now)))
        [reply] = send_with_scripts(self.client, [(_LIVE_SCRIPT, keys)])
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
            pipe = client.get_redis_connection(primary).pipeline(transaction=False)
            pipe.time()
            for slot in slots:
                pipe.zrange(registry_key(slot), 0, -1, withscores=True)
            replies = pipe.execute()
            now_ms = server_now_ms(replies[0])
            for pairs in replies[1:]:
                entries.extend(_parse_entries(pairs, now_ms))
        return entries


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
        value = float(score) if isinstance(score, (int, float)) else float(text(score))
        if value == float("inf"):
            expires: Optional[int] = None
        else:
            expires = int(value)
            if expires <= now_ms:
                continue
        yield RegistryEntry(kind=kind.decode("ascii", "replace"), raw_name=name, expires_at_ms=expires,
                            server_now_ms=now_ms)


@cache
def _registry_keys() -> list[bytes]:
    """The keys of the 16384 registries (made once: the registry read names them all)."""
    return [registry_key(slot) for slot in range(SLOTS)]
