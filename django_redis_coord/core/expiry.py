"""``NO_EXPIRY``: how ``@locked`` and ``DEFAULT_TIMEOUT`` are told, by name, that holds must never expire.

A hold without expiry stays until it is released.  When the reply to its acquire is lost (a
timeout, a dropped connection after the server ran the script), nobody knows it is held and
nobody releases it: it stays held for ever, until an operator force-releases it.  So ``None`` is
refused where a timeout is a default or a decorator option (``@locked(timeout=None)``,
``DEFAULT_TIMEOUT: None``), and a lock without expiry is asked for with ``NO_EXPIRY`` (the
string ``"never"``, which settings files can write as it is).  The core primitives keep
redis-py's ``timeout=None``.
"""

from __future__ import annotations

from typing import Any

from .exceptions import InvalidLockArgument

#: Holds that never expire, asked for explicitly (``@locked(timeout=NO_EXPIRY)``,
#: ``"DEFAULT_TIMEOUT": "never"``).
NO_EXPIRY = "never"

#: Why ``None`` is refused, for error messages.
WHY = "a hold whose acquire reply is lost would stay held for ever"


def is_no_expiry(value: Any) -> bool:
    """Whether ``value`` asks for holds without expiry by name."""
    return isinstance(value, str) and value == NO_EXPIRY


def no_expiry_timeout(timeout: Any, name: Any) -> Any:
    """A decorator's ``timeout`` option as a lock takes it: ``None`` for :data:`NO_EXPIRY`; ``None``
    itself refused with :class:`InvalidLockArgument` (anything else is checked by the lock)."""
    if timeout is None:
        raise InvalidLockArgument(
            f"timeout=None would make holds that never expire, and {WHY}; pass a number of seconds, or "
            "timeout=NO_EXPIRY (from django_redis_coord) to ask for that by name",
            lock_name=name,
        )
    return None if is_no_expiry(timeout) else timeout
