"""Rate limits on Redis, Django-free: GCRA (:class:`RateLimit`, bursts and a sustained rate, with
waiting for a reserved slot) and an exact sliding window (:class:`SlidingWindowLimit`), both decided
by one Lua script call on the server's clock.  Their asyncio twins, with the same names, are in
:mod:`django_redis_coord.core.ratelimit.aio` (and ``django_redis_coord.asyncio``).

"At most N in flight" is not a rate: it is :class:`~django_redis_coord.Semaphore`.
"""

from __future__ import annotations

from ..exceptions import CostTooHigh, InvalidRate
from .rules import Rate, RateLimitReply, parse_rate, ratelimit_key, window_key
from .sync import RateLimit, SlidingWindowLimit

__all__ = [
    "CostTooHigh", "InvalidRate", "Rate", "RateLimit", "RateLimitReply", "SlidingWindowLimit", "parse_rate",
    "ratelimit_key", "window_key",
]
