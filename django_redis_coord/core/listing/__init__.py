"""Who holds what: the live holders of locks and semaphore permits, for operators.

One service shared by the ``locks`` management command and the admin page; it imports nothing
from Django.  It never scans the keyspace (locks often share a database with a large cache):
every grant records its holder in the registry of its Redis Cluster slot (see
:func:`django_redis_coord.core.keys.registry_key`), so listing reads those 16384 small sorted sets and
nothing else.  One module per step:

* :mod:`.registries` — on a standalone server the registries are read by one ``ZUNION`` (with
  ``TIME``, in one ``MULTI``/``EXEC`` pipeline); a server without ZUNION gets one static script
  that declares all of them (``lua/registry_live.lua``).  On a Redis Cluster, each primary is
  asked for the registries of the slots it serves, in one pipeline per primary.
* :mod:`.details` — the details of the live entries (holder metadata, fence, remaining TTL,
  waiters) are then fetched in one more round trip, each entry by its kind's read-only inspect
  script, as :class:`~django_redis_coord.holders.HolderInfo` records.
* Expiry is judged by the server's clock, twice: the registry entry must not have expired, and
  the holder's key must still exist when its details are read.
* :mod:`.force_release` — the one write; :mod:`.selection` chooses holds for a bulk release.

>>> listing = HolderListing(client)                      # doctest: +SKIP
>>> for holder in listing.holders(search="report"):     # doctest: +SKIP
...     print(holder.name, holder.kind, holder.fence, holder.ttl_ms, holder.owner)
reports:nightly lock 1764000000123456 27310 web-1 pid 4242 MainThread

Force release (an operator's action) deletes the hold, moves the lock's fence counter past it so
the old holder is fenced out, and hands the lock to the next live waiter::

    result = listing.force_release("reports:nightly", expected_fence=holder.fence)
"""

from __future__ import annotations

from typing import Any, Optional, Union

from ..holders import KINDS, HolderInfo, format_ms, holder_id, mask_token, parse_holder_id
from .details import DetailReading, Waiter
from .force_release import ForceReleaseResult, ForceReleasing
from .registries import RegistryEntry, RegistryReading
from .selection import HoldSelection, parse_duration

__all__ = [
    "KINDS",
    "format_ms",
    "mask_token",
    "HolderListing",
    "HolderInfo",
    "RegistryEntry",
    "Waiter",
    "ForceReleaseResult",
    "HoldSelection",
    "parse_duration",
    "holder_id",
    "parse_holder_id",
]

class HolderListing(RegistryReading, DetailReading, ForceReleasing):
    """Read the live holders of a Redis server or cluster; force-release a lock.

    ``client`` is a sync ``redis.Redis`` (or ``redis.cluster.RedisCluster``).  ``prefix``
    restricts everything to names starting with it (e.g. a Django site's ``KEY_PREFIX``), and is
    what each holder's ``short_name`` leaves out.
    """

    def __init__(self, client: Any, *, prefix: Union[str, bytes] = b"") -> None:
        self.client = client
        self.prefix = prefix.encode() if isinstance(prefix, str) else bytes(prefix)

    def holders(
        self,
        *,
        kind: Optional[str] = None,
        search: Optional[str] = None,
        offset: int = 0,
        limit: Optional[int] = None,
    ) -> list[HolderInfo]:
        """Live holders sorted by name (then kind), optionally filtered and sliced.

        Slicing applies to the registry entries before their details are read, so a page costs
        the same however many holders there are elsewhere.
        """
        entries = self.entries(kind=kind, search=search)
        end = None if limit is None else offset + limit
        return self.details(entries[offset:end])

    def select(self, selection: HoldSelection) -> list[HolderInfo]:
        """The live holds ``selection`` matches, sorted by name: the details of every live hold
        (of its kind) are read in one round trip, then filtered here."""
        return [holder for holder in self.details(self.entries(kind=selection.kind)) if selection.matches(holder)]
