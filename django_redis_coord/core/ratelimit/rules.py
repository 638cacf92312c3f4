"""What the sync and asyncio rate limits share: rates, the reply, key names and argument checks.

Nothing in here talks to Redis.  A rate is ``"<count>/<period>"`` (``"100/m"``, ``"10/s"``,
``"5/30s"``); a decision is one script call whose reply becomes a :class:`RateLimitReply`.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional, Union

from ..arguments import MAX_SECONDS, Number, check_number
from ..exceptions import CostTooHigh, InvalidLockArgument, InvalidLockArgumentType, InvalidRate
from ..keys import CACHED_NAME_MAX, MARKER, encode_name, key_slot, slot_tag, tag_for

__all__ = [
    "Rate", "RateLimitReply", "RateLimitBase", "SlidingWindowBase", "parse_rate", "ratelimit_key", "window_key",
    "NAMED_MAX", "MAX_PER_SECOND", "PendingReservation", "cancel_record_key",
]

#: Every spelling of each unit a rate's period may be written in (lower case), by its seconds: the
#: parser, its error message, the system check's hint and docs/ratelimits.md all say these.
UNIT_SPELLINGS = {
    1: ("s", "sec", "secs", "second", "seconds"),
    60: ("m", "min", "mins", "minute", "minutes"),
    3600: ("h", "hour", "hours"),
    86400: ("d", "day", "days"),
}
#: Seconds in each unit a rate's period may be written in.
UNITS = {spelling: seconds for seconds, spellings in UNIT_SPELLINGS.items() for spelling in spellings}
#: The units, as the error message and the system check's hint list them.
UNITS_TEXT = "; ".join("/".join(spellings) for spellings in UNIT_SPELLINGS.values())
_RATE = re.compile(r"(\d+)/(\d*)([a-z]+)")
#: The highest rate a limit takes (per second): GCRA spaces admissions by whole microseconds.
MAX_PER_SECOND = 1_000_000
#: Names longer than this (bytes) are named in their key by their SHA-256.
NAMED_MAX = 1024

_SHORT_UNITS = {1: "s", 60: "m", 3600: "h", 86400: "d"}


def _rate_error(text: object) -> InvalidRate:
    return InvalidRate(
        f"Invalid rate {text!r}: expected '<count>/<period>' such as '100/m', '10/s' or '5/30s' "
        f"(a positive count; the period an optional positive multiplier and a unit, in lower case: {UNITS_TEXT})"
    )


@dataclass(frozen=True)
class Rate:
    """``count`` admissions (cost units) per ``period`` seconds."""

    count: int
    period: float

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InvalidRate(f"A rate's count must be a positive int, got {self.count!r}")
        if isinstance(self.period, bool) or not isinstance(self.period, (int, float)) or not (
            0 < self.period <= MAX_SECONDS
        ):
            raise InvalidRate(f"A rate's period must be a number of seconds in (0, {MAX_SECONDS}], got {self.period!r}")
        if self.count > self.period * MAX_PER_SECOND:
            raise InvalidRate(f"A rate may be at most {MAX_PER_SECOND} per second, got {self.count}/{self.period}s")

    @classmethod
    def parse(cls, text: str) -> Rate:
        """The rate ``text`` describes (see :func:`parse_rate`)."""
        return parse_rate(text)

    @property
    def interval_us(self) -> int:
        """Microseconds between two admissions at this rate (rounded up: never faster than the rate)."""
        return math.ceil(round(self.period * 1_000_000) / self.count)

    def __str__(self) -> str:
        if not float(self.period).is_integer():
            return f"{self.count}/{self.period}s"
        unit = _SHORT_UNITS.get(int(self.period))
        return f"{self.count}/{unit}" if unit else f"{self.count}/{int(self.period)}s"


def parse_rate(text: Union[str, Rate]) -> Rate:
    """``"100/m"`` as ``Rate(100, 60)``; a :class:`Rate` as it is.

    The format is ``<count>/<period>``: a positive integer count, and a period made of an optional
    positive integer multiplier and a unit in lower case (``UNIT_SPELLINGS``: ``s``/``sec``/``second``,
    ``m``/``min``/``minute``, ``h``/``hour``, ``d``/``day``, and their plurals):
    ``"10/s"``, ``"5/30s"``, ``"20/5m"``, ``"1000/h"``, ``"5/minute"``.
    Anything else raises :class:`~django_redis_coord.exceptions.InvalidRate` (a ``ValueError``)."""
    if isinstance(text, Rate):
        return text
    if not isinstance(text, str):
        raise InvalidLockArgumentType(f"A rate must be a str such as '100/m' or a Rate, not {type(text).__name__}")
    found = _RATE.fullmatch(text.strip())
    if found is None or found.group(3) not in UNITS:
        raise _rate_error(text)
    count, multiplier = int(found.group(1)), int(found.group(2) or 1)
    if count < 1 or multiplier < 1:
        raise _rate_error(text)
    return Rate(count, multiplier * UNITS[found.group(3)])


@dataclass
class RateLimitReply:
    """The outcome of one decision (``peek``: of the decision it would be).

    Not frozen: one is made on every decision, and a frozen dataclass costs five times as much
    to make (2 µs a decision, measured against the ``limits`` library in bench_ratelimit).

    * ``allowed``: admitted (``peek``: would be).
    * ``limit``: the capacity (a GCRA limit's ``burst``, a sliding window's ``rate.count``).
    * ``remaining``: cost units that would still be admitted right now, after this decision.
    * ``retry_after``: seconds until a call of the same cost would be admitted (0.0 when allowed).
    * ``reset_after``: seconds until the limit is entirely free again (when its key expires).
    * ``waited``: seconds an ``acquire`` slept for its reserved slot (0.0 otherwise).
    * ``server_time``: the server's clock at the decision (seconds since the epoch); an ``acquire``
      was admitted at ``server_time + waited``.
    """

    allowed: bool
    limit: int
    remaining: int
    retry_after: float
    reset_after: float
    waited: float
    server_time: float


def _limit_key(name: bytes, kind: bytes) -> bytes:
    if len(name) > NAMED_MAX:
        digest = hashlib.sha256(name).hexdigest().encode()
        return b"{" + slot_tag(key_slot(name)) + b"}" + MARKER + kind + b":#" + digest
    tag = tag_for(name)
    base = b"{" + tag + b"}" + MARKER + kind
    return base if tag == name else base + b":" + name


_cached_limit_key = lru_cache(maxsize=4096)(_limit_key)


def _key(name: Union[str, bytes], kind: bytes) -> bytes:
    raw = encode_name(name)
    return _cached_limit_key(raw, kind) if len(raw) <= CACHED_NAME_MAX else _limit_key(raw, kind)


def ratelimit_key(name: Union[str, bytes]) -> bytes:
    """The Redis key of the GCRA limit ``name``: in ``name``'s Cluster slot, ``{name}:dcoord:gcra``
    for a name without a hash tag (a name over :data:`NAMED_MAX` bytes is named by its SHA-256)."""
    return _key(name, b"gcra")


def window_key(name: Union[str, bytes]) -> bytes:
    """The Redis key (a sorted set) of the sliding-window limit ``name``, named as :func:`ratelimit_key`."""
    return _key(name, b"window")


def cancel_record_key(name: Union[str, bytes], token: bytes) -> bytes:
    """The key recording what the cancel ``token`` of a GCRA reservation on ``name`` did, in the
    limit's slot: ``{name}:dcoord:ratelimit-cancel:<token>`` (see ``ratelimit_gcra_cancel.lua``).
    Not under ``:dcoord:gcra``: what lists the live limits never finds it."""
    return _key(name, b"ratelimit-cancel") + b":" + token


def check_cost(cost: object, capacity: int, name: object) -> int:
    """``cost`` when it is a positive int no greater than ``capacity``."""
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise InvalidLockArgumentType(f"cost must be a positive int, not {type(cost).__name__}", lock_name=name)
    if cost < 1:
        raise InvalidLockArgument(f"cost must be at least 1, got {cost}", lock_name=name)
    if cost > capacity:
        raise CostTooHigh(
            f"cost {cost} is above the limit's capacity of {capacity}: it could never be admitted", lock_name=name
        )
    return cost


class _LimitBase:
    """The name, key and rate of a limit."""

    kind = b""

    def __init__(self, redis: Any, name: Union[str, bytes], rate: Union[str, Rate]) -> None:
        self.redis = redis
        self.name = encode_name(name)
        self.key = _key(self.name, self.kind)
        self.rate = parse_rate(rate)

    @property
    def capacity(self) -> int:
        """The largest cost one call can ever be admitted with (a higher one raises ``CostTooHigh``)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.rate}>"


class RateLimitBase(_LimitBase):
    """GCRA (the generic cell rate algorithm) over one key holding the theoretical arrival time (TAT).

    A call of cost ``c`` at server time ``now`` is admitted when ``max(TAT, now) + c * interval -
    burst * interval <= now``; admitting it moves TAT there.  Hence at most ``burst + rate * t`` cost
    units in any interval of length ``t``.  The key expires at TAT, when the limit is full again.
    """

    kind = b"gcra"

    def __init__(
        self, redis: Any, name: Union[str, bytes], rate: Union[str, Rate], burst: Optional[int] = None
    ) -> None:
        super().__init__(redis, name, rate)
        if burst is None:
            burst = self.rate.count
        if isinstance(burst, bool) or not isinstance(burst, int):
            raise InvalidLockArgumentType(f"burst must be a positive int, not {type(burst).__name__}", lock_name=name)
        if burst < 1:
            raise InvalidLockArgument(f"burst must be at least 1, got {burst}", lock_name=name)
        self.burst = burst
        self.interval_us = self.rate.interval_us
        #: How far ahead of now the TAT may be when a call is admitted (µs).
        self.tolerance_us = burst * self.interval_us
        if self.tolerance_us > MAX_SECONDS * 1_000_000:
            raise InvalidLockArgument(
                f"burst {burst} at {self.rate} would take more than {MAX_SECONDS} seconds to refill", lock_name=name
            )

    @property
    def capacity(self) -> int:
        """The largest cost one call can ever be admitted with: ``burst``."""
        return self.burst

    def decide_args(self, cost: int, wait: Optional[Number], peek: bool) -> tuple[int, int, int, int]:
        """ARGV of ``ratelimit_gcra``: interval µs, tolerance µs, cost, longest wait µs (-1: peek)."""
        check_cost(cost, self.burst, self.name)
        if peek:
            return self.interval_us, self.tolerance_us, cost, -1
        if not wait:  # 0 (a decision now) or None
            return self.interval_us, self.tolerance_us, cost, 0
        check_number("wait", wait, allow_none=False, positive=False, lock_name=self.name)
        return self.interval_us, self.tolerance_us, cost, int(wait * 1_000_000)

    def decision(self, raw: Any, args: tuple[int, int, int, int]) -> tuple[RateLimitReply, int]:
        """The reply of ``ratelimit_gcra`` called with ``args``, and the TAT it wrote (0: none).

        The script returns only the server's time and the TAT it read, as one string (what it
        sends back is what each decision costs): its decision is made again here with the same
        integer arithmetic."""
        seconds, micros, read = raw.split()
        now, stored = int(seconds) * 1_000_000 + int(micros), int(read)
        interval, tolerance, cost, longest = args
        tat = stored if stored > now else now
        new_tat = tat + cost * interval
        wait = new_tat - tolerance - now
        if longest < 0 or wait > longest:  # a peek, or refused
            allowed = wait <= 0
            remaining = (tolerance - (tat - now)) // interval
            reply = RateLimitReply(allowed, self.burst, remaining if remaining > 0 else 0,
                                   0.0 if allowed else wait / 1e6, (tat - now) / 1e6, 0.0, now / 1e6)
            return reply, 0
        remaining = (tolerance - (new_tat - now)) // interval
        reply = RateLimitReply(True, self.burst, remaining if remaining > 0 else 0, 0.0, (new_tat - now) / 1e6,
                               wait / 1e6 if wait > 0 else 0.0, now / 1e6)
        return reply, new_tat

    def cancel_args(self, written: int, cost: int) -> tuple[int, int, bytes]:
        """ARGV of ``ratelimit_gcra_cancel`` for the reservation of ``cost`` that wrote TAT ``written``,
        and the token naming this cancel's record (:func:`cancel_record_key`): made once per cancel,
        so a client resending the call after a lost reply sends the same one."""
        return written, cost * self.interval_us, os.urandom(8).hex().encode()

    def cancel_keys(self, args: tuple[int, int, bytes]) -> tuple[bytes, bytes]:
        """KEYS of ``ratelimit_gcra_cancel`` called with ``args``: the limit's, the cancel's record."""
        return self.key, cancel_record_key(self.name, args[2])


class PendingReservation:
    """What an ``acquire`` that may reserve a slot shares with the call deciding it.  In asyncio
    that call goes on when its caller is cancelled: whichever of the two learns last that the
    caller is gone and that a slot was reserved gives the slot back, once."""

    __slots__ = ("abandoned", "written")

    def __init__(self) -> None:
        #: The caller stopped waiting for the decision (an exception, a cancellation).
        self.abandoned = False
        #: The TAT the decision wrote when it reserved a later slot (0: none, or given back).
        self.written = 0


class SlidingWindowBase(_LimitBase):
    """An exact sliding window: a sorted set of admission times (server µs, one member per cost
    unit); a call is admitted when the units admitted in the last ``period`` seconds plus its cost
    are at most ``count``.  The key expires ``period`` after its last admission."""

    kind = b"window"

    @property
    def capacity(self) -> int:
        """The largest cost one call can ever be admitted with: the rate's count."""
        return self.rate.count

    def decide_args(self, cost: int, peek: bool) -> tuple[int, int, int, int]:
        """ARGV of ``ratelimit_window``: limit, window µs, cost, peek flag."""
        check_cost(cost, self.rate.count, self.name)
        return self.rate.count, round(self.rate.period * 1_000_000), cost, int(peek)

    def reply(self, raw: Any, args: tuple[int, int, int, int]) -> RateLimitReply:
        """The reply of ``ratelimit_window`` called with ``args`` (see the script for its string)."""
        counted, seconds, micros, count, *scores = raw.split()
        now, count = int(seconds) * 1_000_000 + int(micros), int(count)
        limit, window, cost, peek = args
        if int(counted):
            return RateLimitReply(True, limit, limit - count - cost, 0.0, window / 1e6, 0.0, now / 1e6)
        newest, leaving = int(scores[0]), int(scores[1])
        allowed = count + cost <= limit
        # More than the limit in the window when its rate has shrunk since: nothing remains.
        return RateLimitReply(allowed, limit, limit - count if count < limit else 0,
                              0.0 if allowed else (leaving + window - now) / 1e6,
                              (newest + window - now) / 1e6 if newest else 0.0, 0.0, now / 1e6)
