"""The asyncio twin of :class:`django_redis_coord.durable.DurableLock` (``redis.asyncio`` clients).

>>> from django_redis_coord.asyncio import DurableLock                     # doctest: +SKIP
>>> async with DurableLock(client, "payouts", timeout=30, replicas=1) as lock:
...     await pay_out(fence=lock.fence)

Same arguments and behaviour; an asyncio Redis Cluster client is refused (its pipelines cannot
send ``WAIT`` to the primary that serves the name).
"""

from __future__ import annotations

import time
from typing import Any, Optional, Union

from ..arguments import Number
from ..concurrency import run_to_completion
from ..exceptions import InvalidLockArgumentType, ReplicationNotAcknowledged
from ..lock.aio import Lock
from ..scripts import async_scripts
from .rules import DEFAULT_REPLICA_TIMEOUT, DurableBase, check_replicas

__all__ = ["DurableLock", "ReplicationNotAcknowledged"]


class DurableLock(DurableBase, Lock):
    """An asyncio :class:`~django_redis_coord.asyncio.Lock` whose grants ``replicas`` replicas acknowledge."""

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
        if getattr(redis, "connection_pool", None) is None:
            raise InvalidLockArgumentType(
                "DurableLock needs a client with one connection pool (an asyncio cluster client is not supported)",
                lock_name=name,
            )
        super().__init__(redis, name, *args, **kwargs)
        self.replicas = replicas
        self.replica_timeout = replica_timeout

    async def acquire(self, *args: Any, **kwargs: Any) -> bool:
        if not await super().acquire(*args, **kwargs):
            return False
        if getattr(self._state(), "count", 1) > 1:
            return True  # a reentrant acquire: the first one was confirmed
        try:
            await self.confirm()
        except BaseException:
            await self._give_back()
            raise
        return True

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        await super().extend(additional_time, replace_ttl)
        await self.confirm()
        return True

    async def reacquire(self) -> bool:
        await super().reacquire()
        await self.confirm()
        return True

    async def confirm(self) -> int:
        """Wait until ``replicas`` replicas have the current hold; see the sync twin."""
        keys, args, wait = self.confirm_commands(self._state().token)
        script = async_scripts.get(self.redis, "lock_extend")
        pipe = self.redis.pipeline(transaction=False)
        pipe.scripts.add(script)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.execute_command(*wait)
        started = time.monotonic()
        return self.confirmed(await pipe.execute(), started)

    async def _give_back(self) -> None:
        """Release a grant that could not be confirmed.  The release goes on to its end even when
        the task is cancelled once more meanwhile (see :func:`run_to_completion`); its failure is
        not reported (the grant was never the caller's; its TTL ends it)."""
        hold = self._state()
        token: Optional[bytes] = hold.token
        if token is None:
            return
        self._detach(hold)
        try:
            await run_to_completion(self._release_quietly(token))
        finally:
            hold.token = None
            hold.count = 0

    async def _release_quietly(self, token: bytes) -> None:
        try:
            await self.do_release(token)
        except Exception:  # not held any more, or Redis unreachable: the TTL ends it
            pass
