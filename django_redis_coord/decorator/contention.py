"""``@locked``'s answer when the key is taken: 409 Conflict with ``Retry-After``, or the
``status``, ``handler`` or ``template_name`` given (``CONTENTION_STATUS``, ``CONTENTION_HANDLER``).

A plain function or a ``with locked(...)`` block gets :class:`LockContended` instead.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from ..config.settings import CoordSettings
from ..config.signalling import retry_after
from ..core.exceptions import InvalidLockArgument, LockContended
from ..core.keys import cacheable

__all__ = ["Contention", "contention", "contended_error", "answer_sync", "answer_async", "Skipped", "skipped",
           "is_skipped", "retry_contended"]

logger = logging.getLogger("django_redis_coord")

#: Keys of ``@locked(limit=N)`` already logged for a limit in Redis that differs from N (at most
#: :data:`_WARNED_MAX`: a new one past that starts the set again).
_warned_limits: set[str] = set()
_WARNED_MAX = 256


@dataclass(frozen=True)
class Contention:
    """What a contention handler or template receives about the refused request."""

    #: The key as rendered from the template (without ``KEY_PREFIX``).
    name: str
    #: The Redis key.
    key: str
    #: Seconds to wait: the key's typical recent hold, at most the current holder's remaining TTL,
    #: rounded up (``None``: unknown or no expiry and no recent hold).
    retry_after: Optional[int]
    #: The semaphore's limit, or ``None`` for a lock.
    limit: Optional[int]
    #: Seconds spent trying (``wait``).
    wait_time: float
    #: The status the default answer uses.
    status: int



def contention(name: str, primitive: Any, waited: float, settings: CoordSettings, *, limit: Optional[int],
               status: Optional[int]) -> Contention:
    """What the refusal of ``primitive`` (the hold of ``name`` tried for ``waited`` seconds)
    tells a handler; ``limit`` and ``status`` as given to ``@locked``."""
    in_force = limit
    if limit is not None:
        in_force = primitive.limit or limit
        seen = name if cacheable(name) else hashlib.sha256(name.encode()).hexdigest()
        if in_force != limit and seen not in _warned_limits:
            if len(_warned_limits) >= _WARNED_MAX:
                _warned_limits.clear()
            _warned_limits.add(seen)
            logger.warning(
                "@locked(%r, limit=%d): Redis holds the limit %d for this key, stored by an earlier "
                "acquire, and that one is in force; change it with Semaphore.set_max_size()",
                name, limit, in_force,
            )
    return Contention(
        name=name,
        key=primitive.name if isinstance(primitive.name, str) else primitive.name.decode(),
        retry_after=retry_after(primitive),
        limit=in_force,
        wait_time=waited,
        status=status or settings.contention_status,
    )


def contended_error(info: Contention) -> LockContended:
    """What a plain function or ``with locked(...)`` raises for ``info``."""
    what = f"all {info.limit} permits of {info.name!r} are taken" if info.limit else f"{info.name!r} is held"
    message = what + (f"; retry in {info.retry_after} s" if info.retry_after is not None else "")
    return LockContended(message, lock_name=info.name, retry_after=info.retry_after)


def retry_contended(info: Contention) -> None:
    """``on_contended="retry"``: retry the running Celery task ``info.retry_after`` seconds later
    (at least 1).  Raises Celery's ``Retry``; past ``max_retries``, the ``LockContended``.  Celery
    is imported only here, when a decorated call is refused with ``on_contended="retry"``."""
    from celery import current_task

    task = current_task  # a proxy: false outside a task
    if not task or task.request.id is None:
        raise InvalidLockArgument(
            f"on_contended='retry' retries a Celery task, and {info.name!r} was refused outside one",
            lock_name=info.name,
        )
    countdown = info.retry_after if info.retry_after is not None else 1
    raise task.retry(countdown=max(1, countdown), exc=contended_error(info))


class Skipped(dict):
    """What a function decorated with ``@locked(..., on_contended="skip")`` returns when the key is
    taken, instead of running: ``{"skipped": True, "lock": name, "retry_after": seconds}``.  A
    plain dict to JSON (a task's stored return value), so :func:`is_skipped` tells it from there."""


def skipped(info: Contention) -> Skipped:
    """The value a skipped call returns for the refusal ``info``."""
    return Skipped(skipped=True, lock=info.name, retry_after=info.retry_after)


def is_skipped(value: Any) -> bool:
    """Whether ``value`` (a return value, also one read back from a task result) says the call was skipped."""
    return isinstance(value, dict) and value.get("skipped") is True and set(value) == {"skipped", "lock", "retry_after"}


def _handler(handler: Optional[Callable[..., Any]], settings: CoordSettings) -> Optional[Callable[..., Any]]:
    if handler is not None:
        return handler
    configured = settings.contention_handler
    if isinstance(configured, str):
        from django.utils.module_loading import import_string

        return import_string(configured)
    return configured


def _default_response(request: HttpRequest, info: Contention, template_name: Optional[str]) -> HttpResponse:
    if template_name is not None:
        from django.shortcuts import render

        return render(request, template_name, {"contention": info}, status=info.status)
    wait = f" Retry in {info.retry_after} s." if info.retry_after is not None else ""
    what = "all permits are taken" if info.limit is not None else "another request holds it"
    return HttpResponse(f"{info.name}: {what}.{wait}\n", status=info.status, content_type="text/plain; charset=utf-8")


def _with_retry_after(response: Any, info: Contention) -> Any:
    if isinstance(response, HttpResponseBase) and info.retry_after is not None and "Retry-After" not in response:
        response["Retry-After"] = str(info.retry_after)
    return response


def answer_sync(request: HttpRequest, info: Contention, settings: CoordSettings, *,
                handler: Optional[Callable[..., Any]], template_name: Optional[str]) -> Any:
    """A sync view's answer: the handler's response, else the default one, with ``Retry-After``."""
    chosen = _handler(handler, settings)
    if chosen is None:
        return _with_retry_after(_default_response(request, info, template_name), info)
    response = chosen(request, info)
    if inspect.isawaitable(response):
        raise ImproperlyConfigured(f"The contention handler {chosen!r} of a sync view must not be async.")
    return _with_retry_after(response, info)


async def answer_async(request: HttpRequest, info: Contention, settings: CoordSettings, *,
                       handler: Optional[Callable[..., Any]], template_name: Optional[str]) -> Any:
    """The same for an ``async def`` view (an async handler is awaited)."""
    chosen = _handler(handler, settings)
    if chosen is None:
        return _with_retry_after(_default_response(request, info, template_name), info)
    response = chosen(request, info)
    if inspect.isawaitable(response):
        response = await response
    return _with_retry_after(response, info)
