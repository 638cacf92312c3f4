"""What the sync and asyncio DurableLocks share: the replica settings and the confirmation of a
grant (the commands it sends and what their replies mean).  Nothing in here talks to Redis;
:mod:`django_redis_coord.core.durable.sync` and :mod:`django_redis_coord.core.durable.aio` do.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Optional

from ..arguments import Number, check_number
from ..exceptions import InvalidLockArgument, InvalidLockArgumentType, LockLostError, ReplicationNotAcknowledged
from ..lock.rules import LockBase

__all__ = ["DEFAULT_REPLICA_TIMEOUT", "DurableBase", "check_replicas"]

#: How long a grant waits for its replicas by default (seconds).
DEFAULT_REPLICA_TIMEOUT = 0.5


def check_replicas(replicas: object, replica_timeout: object, name: object) -> None:
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise InvalidLockArgumentType("replicas must be an int", lock_name=name)
    if replicas < 1:
        raise InvalidLockArgument(f"replicas must be at least 1, got {replicas}", lock_name=name)
    check_number("replica_timeout", replica_timeout, allow_none=False, positive=True, lock_name=name)


class DurableBase(LockBase):
    """The confirmation of a hold by ``replicas`` replicas, common to both DurableLocks."""

    replicas: int
    replica_timeout: Number

    def confirm_commands(self, token: Optional[bytes]) -> tuple[tuple, tuple, tuple]:
        """The keys and arguments of the lock script that re-writes the hold as it is (same
        remaining time: "add" 0 ms, or still no expiry), and the ``WAIT`` command sent after it."""
        if token is None:
            raise LockLostError("Nothing to confirm: the lock is not held", lock_name=self.name)
        args = self.extend_args(token, 0, "add" if self._ttl_ms else "persist")
        wait = ("WAIT", self.replicas, max(1, int(self.replica_timeout * 1000)))
        return self.extend_keys(), args, wait

    def confirmed(self, replies: Sequence[Any], started: float) -> int:
        """How many replicas acknowledged, from the replies of the confirmation sent at ``started``;
        raises when the hold was gone or too few acknowledged."""
        still_ours, acknowledged = replies
        if int(still_ours) == -2:
            raise LockLostError("The lock was lost before its replicas acknowledged it", lock_name=self.name)
        acknowledged = int(acknowledged)
        if acknowledged < self.replicas:
            raise ReplicationNotAcknowledged(
                f"Only {acknowledged} of {self.replicas} replicas acknowledged lock {self.name!r} within "
                f"{time.monotonic() - started:.3f}s (replica_timeout {self.replica_timeout}s); not holding it",
                acknowledged,
                self.replicas,
                lock_name=self.name,
            )
        return acknowledged
