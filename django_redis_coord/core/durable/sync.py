# Generated from django_redis_coord/core/durable/aio.py by `python3 dev.py twins`: edit that file, not this one.
"""Locks whose grants are acknowledged by replicas (``WAIT``), failing closed when they are not.

Redis replicates asynchronously: a primary that crashes right after granting a lock may take the
grant with it, and the replica promoted in its place (by Sentinel or Redis Cluster) lets a second
client take the same lock.  :class:`DurableLock` closes that window for the grants it confirms:
after acquiring (and after ``extend``/``reacquire``) it waits until ``replicas`` replicas have the
hold, for at most ``replica_timeout`` seconds.  When they do not acknowledge in time, the hold is
released and :class:`~django_redis_coord.exceptions.ReplicationNotAcknowledged` is raised, so the
caller never runs on a grant that a failover could forget.

>>> from redis.sentinel import Sentinel                                  # doctest: +SKIP
>>> from django_redis_coord import DurableLock
>>> client = Sentinel([("10.0.0.1", 26379)]).master_for("coord", socket_timeout=1)
>>> with DurableLock(client, "payouts", timeout=30, replicas=1) as lock:
...     pay_out(fence=lock.fence)

What it does not do: ``WAIT`` makes a grant survive the failure of the primary when a replica
that acknowledged it is promoted; it does not make Redis a consensus system (a partitioned old
primary can still accept writes until it notices), and renewals made by the watchdog are not
confirmed.  Use fencing tokens at the resource for safety (see docs/redlock.md).

How: the confirmation is one pipeline on one connection to the lock's server: a lock script that
re-writes the hold without changing it (checking it is still ours) followed by ``WAIT``.  ``WAIT``
counts replicas that received every write up to this connection's last one, so it covers the
grant even when the lock was handed over by another client's release.  A sync Redis Cluster
client sends it to the node that serves the name; an asyncio cluster client cannot, and is refused.

The sync module is generated from the asyncio one (docs/twins.md).
"""

from __future__ import annotations

import time
from typing import Any, Optional, Union

from ..arguments import Number
from ..exceptions import InvalidLockArgumentType, ReplicationNotAcknowledged
from ..lock.sync import Lock
from ..scripts import sync_scripts
from ..side.sync import node_client
from .rules import DEFAULT_REPLICA_TIMEOUT, DurableBase, check_replicas

__all__ = ["DurableLock", "ReplicationNotAcknowledged"]


class DurableLock(DurableBase, Lock):
    """A :class:`~django_redis_coord.Lock` whose grants ``replicas`` replicas acknowledge.

    Takes the Lock's arguments plus, keyword-only, ``replicas`` (default 1) and
    ``replica_timeout`` (seconds, default 0.5).  ``acquire``, ``extend`` and ``reacquire`` raise
    :class:`~django_redis_coord.exceptions.ReplicationNotAcknowledged` (after releasing, for
    ``acquire``) when too few replicas acknowledge in time.
    """

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes],
        *args: Any,
        replicas: int = 1,
        replica_timeout: Number = DEFAULT_REPLICA_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        check_replicas(replicas, replica_timeout, name)
        super().__init__(redis, name, *args, **kwargs)
        if node_client(redis, self.keys.name) is None:
            raise InvalidLockArgumentType(
                "DurableLock needs a client with one connection pool (an asyncio cluster client is not supported)",
                lock_name=name,
            )
        self.replicas = replicas
        self.replica_timeout = replica_timeout

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        if not super().acquire(*args, **kwargs):
            return False
        if self._state().count > 1:
            return True  # a reentrant acquire: the first one was confirmed
        try:
            self.confirm()
        except BaseException:
            self._give_back()
            raise
        return True

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        super().extend(additional_time, replace_ttl)
        self.confirm()
        return True

    def reacquire(self) -> bool:
        super().reacquire()
        self.confirm()
        return True

    def confirm(self) -> int:
        """Wait until ``replicas`` replicas have the current hold; returns how many acknowledged."""
        keys, args, wait = self.confirm_commands(self._state().token)
        client = node_client(self.redis, self.keys.name)
        script = sync_scripts.get(client, "lock_extend")
        pipe = client.pipeline(transaction=False)
        pipe.scripts.add(script)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.execute_command(*wait)
        started = time.monotonic()
        return self.confirmed(pipe.execute(), started)

    def _give_back(self) -> None:
        """Release a grant that could not be confirmed (in asyncio, the release goes on to its end
        even when the task is cancelled once more meanwhile: see :func:`run_to_completion`); its
        failure is not reported (the grant was never the caller's; its TTL ends it)."""
        hold = self._state()
        token: Optional[bytes] = hold.token
        if token is None:
            return
        self._detach(hold)
        try:
            self._release_quietly(token)
        finally:
            hold.token = None
            hold.count = 0

    def _release_quietly(self, token: bytes) -> None:
        try:
            self.do_release(token)
        except Exception:  # not held any more, or Redis unreachable: the TTL ends it
            pass
