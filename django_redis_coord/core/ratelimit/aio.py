"""Rate limits on Redis: GCRA and an exact sliding window, on the server's clock.
:class:`django_redis_coord.core.ratelimit.sync.RateLimit` (and ``SlidingWindowLimit``) over a sync
client, :class:`django_redis_coord.core.ratelimit.aio.RateLimit` over a ``redis.asyncio`` one, with
the same names, arguments and replies (every method talking to Redis awaited in asyncio).  The
sync module is generated from the asyncio one (docs/twins.md).

* Every decision is one Lua script call (``core/lua/ratelimit_*.lua``) reading the server's
  ``TIME``: clients whose clocks disagree share one limit exactly.
* :meth:`RateLimit.acquire` waits for a slot without polling: the same script call reserves the
  caller's future slot (GCRA knows when it opens) and the caller sleeps until then.  A sleep cut
  short (an exception, the asyncio task cancelled) gives the slot back, and so does a task
  cancelled while its reserving call is on its way (the call goes on; its reply is not lost).
  The give-back is safe to send twice (``ratelimit_gcra_cancel.lua``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional, Union

from ..arguments import Number
from ..concurrency import run_to_completion
from ..scripts import async_scripts
from .rules import PendingReservation, Rate, RateLimitBase, RateLimitReply, SlidingWindowBase

__all__ = ["RateLimit", "SlidingWindowLimit"]


class RateLimit(RateLimitBase):
    """A GCRA limit: ``rate`` sustained, at most ``burst`` cost units at once (default ``rate.count``).

    ``RateLimit(redis, name, rate, burst=None)``; ``rate`` is a :class:`~django_redis_coord.Rate` or a text such as
    ``"100/m"``.  Over any interval of ``t`` seconds it admits at most ``burst + rate * t`` cost units.
    """

    def __init__(
        self, redis: Any, name: Union[str, bytes], rate: Union[str, Rate], burst: Optional[int] = None
    ) -> None:
        super().__init__(redis, name, rate, burst)

    async def hit(self, cost: int = 1) -> RateLimitReply:
        """Decide now: admit a call of ``cost`` (and count it) or refuse it (``retry_after`` says when)."""
        args = self.decide_args(cost, 0, peek=False)
        return self.decision(await self.do_decide(args), args)[0]

    async def peek(self, cost: int = 1) -> RateLimitReply:
        """Whether a call of ``cost`` would be admitted now; nothing is counted."""
        args = self.decide_args(cost, 0, peek=True)
        return self.decision(await self.do_decide(args), args)[0]

    async def acquire(self, cost: int = 1, wait: Number = 0.0) -> RateLimitReply:
        """Admit a call of ``cost``, waiting up to ``wait`` seconds for its slot.

        When the slot opens within ``wait``, the script call that decides reserves it, and this
        call sleeps until it opens (``reply.waited``); callers are admitted in the order they
        arrived.  When it would open later, nothing is reserved (``allowed`` is False).  A sleep
        cut short (an exception, the task cancelled) gives the slot back unless a later call was
        counted on top.  So does a task cancelled while the call deciding is on its way: that
        call goes on, and gives back the slot it reserved."""
        args = self.decide_args(cost, wait, peek=False)
        if args[3] <= 0:  # a decision now: nothing is reserved ahead
            return self.decision(await self.do_decide(args), args)[0]
        pending = PendingReservation()
        try:
            reply, written = await run_to_completion(self.decide_reserving(args, pending))
        except BaseException:
            pending.abandoned = True
            if pending.written:  # decided and reserved, but the reply never reached this caller
                await run_to_completion(self.do_cancel(self.cancel_args(pending.written, cost)))
            raise
        if reply.waited > 0:
            try:
                await asyncio.sleep(reply.waited)
            except BaseException:
                await run_to_completion(self.do_cancel(self.cancel_args(written, cost)))
                raise
        return reply

    async def decide_reserving(
        self, args: tuple[int, int, int, int], pending: PendingReservation
    ) -> tuple[RateLimitReply, int]:
        """The decision of an ``acquire`` that may reserve a later slot (``args`` as
        :meth:`decide_args` gives them), and the TAT it wrote; a slot reserved for a caller gone
        meanwhile (``pending.abandoned``) is given back here."""
        reply, written = self.decision(await self.do_decide(args), args)
        if reply.waited > 0:
            if pending.abandoned:
                await self.do_cancel(self.cancel_args(written, args[2]))
            else:
                pending.written = written
        return reply, written

    async def reset(self) -> bool:
        """Forget every call counted (for operators); True when there was any."""
        return bool(await self.redis.delete(self.key))

    # -- the only methods talking to Redis -------------------------------------------------------
    async def do_decide(self, args: tuple) -> Any:
        script = async_scripts.get(self.redis, "ratelimit_gcra")
        return await script((self.key,), args, client=self.redis)

    async def do_cancel(self, args: tuple) -> bool:
        script = async_scripts.get(self.redis, "ratelimit_gcra_cancel")
        return int(await script(self.cancel_keys(args), args, client=self.redis)) == 1


class SlidingWindowLimit(SlidingWindowBase):
    """An exact sliding window: at most ``rate.count`` cost units in any ``rate.period`` seconds.

    ``SlidingWindowLimit(redis, name, rate)``.  It keeps one sorted-set member per cost unit
    admitted in the window (up to ``rate.count``): for large counts :class:`RateLimit` is lighter.
    """

    def __init__(self, redis: Any, name: Union[str, bytes], rate: Union[str, Rate]) -> None:
        super().__init__(redis, name, rate)

    async def hit(self, cost: int = 1) -> RateLimitReply:
        """Decide now: admit a call of ``cost`` (and count it) or refuse it (``retry_after`` says when)."""
        args = self.decide_args(cost, peek=False)
        return self.reply(await self.do_decide(args), args)

    async def peek(self, cost: int = 1) -> RateLimitReply:
        """Whether a call of ``cost`` would be admitted now; nothing is counted."""
        args = self.decide_args(cost, peek=True)
        return self.reply(await self.do_decide(args), args)

    async def reset(self) -> bool:
        """Forget every call counted (for operators); True when there was any."""
        return bool(await self.redis.delete(self.key))

    # -- the only method talking to Redis --------------------------------------------------------
    async def do_decide(self, args: tuple) -> Any:
        script = async_scripts.get(self.redis, "ratelimit_window")
        return await script((self.key,), args, client=self.redis)
