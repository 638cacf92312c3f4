"""Django signals about holds of locks and semaphores.

They are sent by the Django-facing classes (:func:`django_redis_coord.lock`,
:func:`django_redis_coord.semaphore`, their asyncio forms and ``@locked``); the core primitives
stay free of Django.  ``sender`` is the primitive's class; every signal carries:

* ``name``: the name as the application wrote it (without ``KEY_PREFIX``),
* ``key``: the Redis key (with the prefix),
* ``kind``: ``"lock"``, ``"semaphore"`` or ``"redlock"``,
* ``template``: the key template the name was made from (``"invoice:{pk}"``: ``@locked``'s key,
  the factories' ``template=``; ``"(untemplated)"`` without one), the label of the metrics,
* ``instance``: the lock or semaphore object.

and, per signal:

* :data:`lock_acquired`: ``fence`` (int or ``None``), ``wait_time`` (seconds spent acquiring);
* :data:`lock_released`: ``fence``, ``held_time`` (seconds between acquire and release);
* :data:`lock_contended`: ``wait_time``, ``retry_after`` (seconds until the current holder's
  TTL runs out, rounded up; ``None`` when unknown or without expiry);
* :data:`lock_lost`: ``fence``, ``held_time``; the hold ended without a release (expired, taken
  over, or not renewed in time).

Receivers run inline for sync code.  From asyncio code the signals are sent with
``Signal.asend_robust``: async receivers run on the event loop, sync receivers in a worker thread.
A receiver that raises is logged on the ``django_redis_coord`` logger and does not disturb the hold.

>>> from django.dispatch import receiver                   # doctest: +SKIP
>>> from django_redis_coord.signals import lock_contended  # doctest: +SKIP
>>> @receiver(lock_contended)                              # doctest: +SKIP
... def count_contention(sender, name, **kwargs):
...     metrics.increment("locks.contended", tags={"name": name})
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

__all__ = ["lock_acquired", "lock_released", "lock_contended", "lock_lost", "send", "asend"]

logger = logging.getLogger("django_redis_coord")

#: A hold began: ``fence``, ``wait_time``.
lock_acquired = Signal()
#: A hold ended by its release: ``fence``, ``held_time``.
lock_released = Signal()
#: An acquire gave up, the name being held: ``wait_time``, ``retry_after``.
lock_contended = Signal()
#: A hold ended without a release (expired, taken over, not renewed in time): ``fence``, ``held_time``.
lock_lost = Signal()


def _log_failures(signal_name: str, responses: list[tuple[Any, Any]]) -> None:
    for receiver, response in responses:
        if isinstance(response, BaseException):
            logger.error(
                "Receiver %r of %s raised %r", receiver, signal_name, response, exc_info=response
            )


def send(signal: Signal, sender: Any, **named: Any) -> None:
    """Send ``signal`` robustly (a failing receiver is logged, never raised)."""
    if not signal.receivers:
        return
    _log_failures(_name_of(signal), signal.send_robust(sender, **named))


async def asend(signal: Signal, sender: Any, **named: Any) -> None:
    """Asyncio form of :func:`send`."""
    if not signal.receivers:
        return
    _log_failures(_name_of(signal), await signal.asend_robust(sender, **named))


def _name_of(signal: Signal) -> str:
    for name in __all__[:4]:
        if globals()[name] is signal:
            return name
    return repr(signal)
