"""The listing's one write: an operator takes a hold back (``manage.py locks release``, the
admin's force-release button), or several (a bulk release: one hold after the other).  While
tracing is on, each is an event of the current span (:mod:`django_redis_coord.core.tracing`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..exceptions import InvalidLockArgument
from ..holders import KINDS, MANY_HOLDERS, HolderInfo
from ..keys import encode_name, keys_for
from ..queue.rules import META_RETENTION_MS
from ..scripts import sync_scripts
from ..tracing import add_force_release_event

__all__ = ["ForceReleaseResult", "ForceReleasing"]


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

    def what_followed(self, waiting: int) -> str:
        """What became of the callers waiting, for people, given the ``waiting`` callers listed with
        the hold: a semaphore's or read-write lock's other holds may still keep them out."""
        if self.handed_off:
            return "handed to the next waiter"
        if waiting:
            return f"{waiting} caller{'s' if waiting != 1 else ''} still waiting behind the other holds"
        return "nobody was waiting"


class ForceReleasing:
    """The force release of :class:`~django_redis_coord.listing.HolderListing`."""

    client: Any

    def force_release(
        self, name: Union[str, bytes], kind: str = "lock", *, expected_fence: Optional[int] = None
    ) -> ForceReleaseResult:
        """Release a hold whoever has it, fence the holder out and serve the next waiter.

        For a lock, ``expected_fence`` (optional) makes it a no-op unless the current hold has
        exactly that fence: an operator confirms a particular holder, not whoever holds the lock
        by then.  For a semaphore it is required: it names the permit to take back; for a
        read-write lock (``kind="rw"``) too: it names the read or write hold to take back (the
        waiters it kept out are then served in FIFO order, as a release serves them).
        """
        raw = encode_name(name)
        if kind not in KINDS:
            raise InvalidLockArgument(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}", lock_name=name)
        if expected_fence is not None and (isinstance(expected_fence, bool) or not isinstance(expected_fence, int)):
            raise InvalidLockArgument("expected_fence must be an int", lock_name=name)
        keys = keys_for(raw, kind.encode())
        member = kind.encode() + b":" + raw
        all_keys = (keys.name, keys.meta, keys.queue, keys.waiters, keys.registry)
        if kind in MANY_HOLDERS:
            if expected_fence is None:
                raise InvalidLockArgument(f"a hold of a {KINDS[kind].lower()} is named by its fence: give "
                                          "expected_fence", lock_name=name)
            script = sync_scripts.get(self.client, f"{kind}_force_release")
            args: tuple = (member, str(expected_fence), META_RETENTION_MS)
        else:
            script = sync_scripts.get(self.client, "force_release")
            args = (member, META_RETENTION_MS, "" if expected_fence is None else str(expected_fence))
        reply = script(all_keys, args, client=self.client)
        status = int(reply[0])
        result = ForceReleaseResult(
            released=status == 1,
            was_free=status == 0,
            fence_mismatch=status == -1,
            fence=int(reply[1] or 0),
            fence_after=int(reply[2] or 0),
            handed_off=bool(reply[3]),
        )
        add_force_release_event(kind, result="released" if result.released else "was_free" if result.was_free
                                else "fence_mismatch", fence=result.fence, fence_after=result.fence_after,
                                handed_off=result.handed_off)
        return result

    def force_release_holds(self, holds: Iterable[HolderInfo]) -> list[tuple[HolderInfo, ForceReleaseResult]]:
        """:meth:`force_release` each of ``holds`` (as read by the listing), each only while it
        still has the fence it was read with: one script call per hold, each atomic; a hold that
        ended or changed since it was read is left alone (``fence_mismatch`` or ``was_free``)."""
        return [(hold, self.force_release(hold.raw_name, hold.kind, expected_fence=hold.fence)) for hold in holds]
