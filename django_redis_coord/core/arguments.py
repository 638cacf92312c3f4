"""Argument checks and durations shared by every primitive (sync and asyncio): numbers of
seconds, milliseconds for Redis, tokens, and the drift allowed for a local deadline.

Nothing in here talks to Redis.
"""

from __future__ import annotations

import secrets
from typing import Any, Optional, Union

from .exceptions import InvalidLockArgument, InvalidLockArgumentType

__all__ = [
    "Number", "MAX_SECONDS", "DRIFT_FIXED", "DRIFT_FACTOR",
    "check_number", "to_ms", "drift", "encode_token", "as_bytes", "new_token",
]

Number = Union[int, float]

#: Drift allowance for the local validity deadline: a fixed part plus a fraction of the TTL.
DRIFT_FIXED = 0.002
DRIFT_FACTOR = 0.01

#: The longest duration any argument may have (ten years): far below what PX / PEXPIRE accept.
MAX_SECONDS = 10 * 365 * 24 * 3600


def check_number(name: str, value: object, *, allow_none: bool, positive: bool, lock_name: object) -> None:
    """Refuse a non-numeric, negative (or, when ``positive``, zero) or absurdly long duration."""
    if value is None:
        if allow_none:
            return
        raise InvalidLockArgumentType(f"{name} must be a number, not None", lock_name=lock_name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidLockArgumentType(
            f"{name} must be a number of seconds, not {type(value).__name__}", lock_name=lock_name
        )
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidLockArgument(f"{name} must be finite, got {value!r}", lock_name=lock_name)
    if positive and value <= 0:
        raise InvalidLockArgument(f"{name} must be greater than 0, got {value!r}", lock_name=lock_name)
    if value < 0:
        raise InvalidLockArgument(f"{name} must not be negative, got {value!r}", lock_name=lock_name)
    if value > MAX_SECONDS:
        raise InvalidLockArgument(
            f"{name} must be at most {MAX_SECONDS} seconds (ten years), got {value!r}", lock_name=lock_name
        )


def check_max_hold(max_hold: object, timeout: object, auto_renew: bool, lock_name: object) -> None:
    """``max_hold`` (seconds) caps a renewed hold: it needs renewal, and at least ``timeout``."""
    check_number("max_hold", max_hold, allow_none=True, positive=True, lock_name=lock_name)
    if max_hold is None:
        return
    if not auto_renew:
        raise InvalidLockArgument(
            "max_hold caps a renewed hold: it needs auto_renew=True (without renewal the timeout ends the hold)",
            lock_name=lock_name,
        )
    if isinstance(timeout, (int, float)) and max_hold < timeout:  # type: ignore[operator]
        raise InvalidLockArgument(f"max_hold ({max_hold}s) must be at least timeout ({timeout}s)",
                                  lock_name=lock_name)


def to_ms(seconds: Number) -> int:
    """Whole milliseconds, never rounding a positive duration down to zero."""
    return max(1, int(round(seconds * 1000)))


def encode_token(token: Union[str, bytes], lock_name: object) -> bytes:
    if isinstance(token, str):
        token = token.encode()
    if not isinstance(token, (bytes, bytearray)) or not token:
        raise InvalidLockArgument("token must be a non-empty str or bytes", lock_name=lock_name)
    return bytes(token)


def as_bytes(value: Any) -> Optional[bytes]:
    if value is None or value is False:
        return None
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def new_token() -> bytes:
    return secrets.token_hex(16).encode()


def drift(timeout: Optional[Number]) -> float:
    """Seconds subtracted from a hold's duration for the local validity deadline."""
    return DRIFT_FIXED + (DRIFT_FACTOR * timeout if timeout else 0.0)

