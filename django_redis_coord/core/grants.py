"""The outcome of an acquire attempt (:class:`Grant`, read from a script's reply) and of a
refresh that could not reach Redis (:class:`Outage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from redis.exceptions import ClusterDownError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["Grant", "Outage", "OUTAGE_GRACE", "OUTAGE_ERRORS"]


@dataclass
class Grant:
    """Outcome of one acquire attempt."""

    acquired: bool
    fence: int = 0
    #: Remaining time of the hold (when acquired) or of the current holder; -1 none, -2 no holder.
    pttl: int = -2
    provisional: bool = False
    #: A semaphore's refusal: the limit stored in Redis, which is the one in force.
    limit: Optional[int] = None

    @classmethod
    def from_reply(cls, reply: Any) -> Grant:
        if int(reply[0]) == 1:
            return cls(True, int(reply[1]), int(reply[2]), bool(int(reply[3])))
        if len(reply) == 1:
            return cls(False)
        return cls(False, pttl=int(reply[1]), limit=int(reply[2]) if len(reply) > 2 else None)


#: How long a queued waiter keeps waiting while its refreshes cannot reach Redis (seconds in a
#: row): long enough for a Sentinel or Cluster failover, after which it finds its place again
#: (or the grant made meanwhile).  Its ``blocking_timeout`` still applies.
OUTAGE_GRACE = 30.0
#: The errors of a refresh that count as Redis being out of reach for a while (see :class:`Outage`).
OUTAGE_ERRORS = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError)


class Outage:
    """The refreshes of one waiter that could not reach Redis, in a row (see :data:`OUTAGE_GRACE`)."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since: Optional[float] = None

    def began(self, at: float) -> Grant:
        """A refresh sent at ``at`` failed: re-raise the error once the outage lasted
        :data:`OUTAGE_GRACE`, else the grant to wait on until the next refresh (a holder with no
        expiry: the waiter looks again after its refresh period, or when woken).  Call it from the
        ``except`` clause."""
        if self.since is None:
            self.since = at
        if at - self.since >= OUTAGE_GRACE:
            raise
        return Grant(False, pttl=-1)

    def ended(self) -> None:
        self.since = None

