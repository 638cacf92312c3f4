"""``@rate_limited``: at most so many calls of a view, task or function per key and per unit of time.

>>> from django_redis_coord import rate_limited                 # doctest: +SKIP
>>> @rate_limited("api:{user.pk}", rate="100/m", burst=20)       # doctest: +SKIP
... def search(request):
...     ...

Each call is one decision of the core limit
(:class:`~django_redis_coord.core.ratelimit.sync.RateLimit`, GCRA, or ``algorithm="window"``:
:class:`~django_redis_coord.core.ratelimit.sync.SlidingWindowLimit`): one script call on Redis's
clock.  The key is a key template, as ``@locked``'s is (:mod:`~django_redis_coord.key_templates.template`,
:mod:`~django_redis_coord.key_templates.filling`: the same template language, hostile values
encoded or hashed, a value missing from a request a 400).  A refused view answers 429 with
``Retry-After``; every decided response carries ``RateLimit-Policy`` and ``RateLimit``
(:mod:`~django_redis_coord.ratelimited.headers`).  Outside views, ``on_limited`` says what a
refused call does: ``"raise"`` (:class:`~django_redis_coord.exceptions.RateLimitExceeded`),
``"skip"`` (a :class:`~django_redis_coord.decorator.contention.Skipped` value, as ``@locked``'s)
or, in a Celery task, ``"retry"`` (``countdown`` = the reply's ``retry_after``, rounded up).  The
whole story is in ``docs/ratelimits.md``.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from ..config.connection import get_async_client, get_client
from ..config.metrics import configured_metrics
from ..config.ratelimit_options import ON_UNAVAILABLE, RateLimitSettings
from ..config.settings import coord_settings
from ..core.exceptions import InvalidLockArgument, InvalidLockArgumentType, RateLimitExceeded
from ..core.ratelimit import Rate, RateLimitReply
from ..core.ratelimit.aio import RateLimit as AsyncGCRA
from ..core.ratelimit.aio import SlidingWindowLimit as AsyncWindow
from ..core.ratelimit.sync import RateLimit as SyncGCRA
from ..core.ratelimit.sync import SlidingWindowLimit as SyncWindow
from ..core.tracing import add_rate_limit_event
from ..decorator.contention import Skipped
from ..decorator.locked import decorator_from, dotted_name, maybe_await
from ..decorator.options import ON_CONTENDED
from ..decorator.task_objects import is_task, with_func
from ..decorator.unavailable import REDIS_ERRORS, redis_unavailable, unavailable_response
from ..key_templates.filling import find_request, name_async, name_sync
from ..key_templates.template import KeyTemplate
from .headers import add_fields, limit_field, policy_field, retry_after_seconds
from .rates import Policy, checked_rate, resolved
from .registry import register

__all__ = ["rate_limited", "RateLimited", "ALGORITHMS", "ON_LIMITED", "CLIENT_IP_KEY", "rate_names_in_use",
           "current_reply"]

logger = logging.getLogger("django_redis_coord")

#: What ``algorithm`` accepts: GCRA (a burst, then a steady rate) or an exact sliding window.
ALGORITHMS = ("gcra", "window")
#: What ``on_limited`` accepts (outside views), as ``@locked``'s ``on_contended``.
ON_LIMITED = ON_CONTENDED
#: ``key="ip"``: one limit per client address and view, the template ``"<view's dotted name>:{client_ip}"``
#: (the address as :mod:`~django_redis_coord.key_templates.client_ip` reads it).
CLIENT_IP_KEY = "ip"

#: Rate names used by decorated functions (wrapper -> (dotted name, rate name or None for
#: DEFAULT_RATE)), for the system check that they exist in the settings.
rate_users: weakref.WeakKeyDictionary[Callable[..., Any], tuple[str, Optional[str]]] = weakref.WeakKeyDictionary()


def rate_names_in_use() -> list[tuple[str, Optional[str]]]:
    """``(dotted name, rate name)`` of every decorated function whose rate comes from the settings
    (``None``: ``DEFAULT_RATE``), for :func:`~django_redis_coord.checks.check_rate_names`."""
    return sorted(set(rate_users.values()), key=lambda pair: (pair[0], pair[1] or ""))


class _Metered:
    """What the metrics see of a decision: its kind (the ``kind`` label)."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind


_KINDS = {"gcra": _Metered("ratelimit"), "window": _Metered("ratelimit-window")}


def current_reply(request: HttpRequest) -> Optional[RateLimitReply]:
    """The reply of the innermost ``@rate_limited`` that admitted ``request`` (``None``: none did)."""
    return getattr(request, "rate_limit", None)


class RateLimited:
    """The object ``rate_limited(...)`` returns: a decorator of views, view classes, tasks and functions."""

    def __init__(
        self,
        key: Union[str, Callable[..., Any], None] = None,
        *,
        rate: Union[str, Rate, None] = None,
        burst: Optional[int] = None,
        algorithm: str = "gcra",
        cost: int = 1,
        wait: float = 0,
        on_limited: Optional[str] = None,
        on_unavailable: Optional[str] = None,
        status: Optional[int] = None,
        policy: Optional[str] = None,
        params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        if algorithm not in ALGORITHMS:
            raise InvalidLockArgument(f"algorithm must be one of {ALGORITHMS}, not {algorithm!r}", lock_name=key)
        self.spec = checked_rate(rate, burst, key)
        if algorithm == "window" and burst is not None:
            raise InvalidLockArgument("algorithm='window' takes no burst: it admits the rate's count per period",
                                      lock_name=key)
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise InvalidLockArgument(f"cost must be a positive int, not {cost!r}", lock_name=key)
        if isinstance(self.spec, Policy) and cost > self.spec.capacity:
            raise InvalidLockArgument(f"cost {cost} is above the limit's capacity {self.spec.capacity}: no call "
                                      "could ever be admitted", lock_name=key)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait < float("inf"):
            raise InvalidLockArgument(f"wait must be a number of seconds (0 or more), not {wait!r}", lock_name=key)
        if wait and algorithm == "window":
            raise InvalidLockArgument("wait= reserves a GCRA slot: algorithm='window' cannot wait", lock_name=key)
        if on_unavailable is not None and on_unavailable not in ON_UNAVAILABLE:
            raise InvalidLockArgument(f"on_unavailable must be one of {ON_UNAVAILABLE}, not {on_unavailable!r}",
                                      lock_name=key)
        if status is not None and (isinstance(status, bool) or not isinstance(status, int)
                                   or not 400 <= status <= 599):
            raise InvalidLockArgument(f"status must be an HTTP error status (400-599), not {status!r}", lock_name=key)
        if policy is not None and (not isinstance(policy, str) or not policy):
            raise InvalidLockArgumentType(f"policy must be a non-empty str, not {policy!r}", lock_name=key)
        if params is not None and not isinstance(params, Mapping):
            raise InvalidLockArgumentType("params must be a mapping", lock_name=key)
        self.key = key
        self.algorithm = algorithm
        self.cost = cost
        self.wait = float(wait)
        if on_limited is not None and (not isinstance(on_limited, str) or on_limited not in ON_LIMITED):
            raise InvalidLockArgument(f"on_limited must be one of {ON_LIMITED}, not {on_limited!r}", lock_name=key)
        self.on_limited = on_limited or "raise"
        self.on_unavailable = on_unavailable
        self.status = status
        self.policy = policy
        self.params = dict(params or {})

    # -- decoration ------------------------------------------------------------------------------
    def __call__(self, target: Any) -> Any:
        if isinstance(target, type):
            dispatch = getattr(target, "dispatch", None)
            if dispatch is None:
                raise InvalidLockArgumentType(f"@rate_limited on a class needs a view class with dispatch(); "
                                              f"{target!r} has none")
            target.dispatch = self._decorate(  # type: ignore[attr-defined]
                dispatch, dotted_name(target), force_async=bool(getattr(target, "view_is_async", False)))
            return target
        if is_task(target):
            if self.on_limited == "retry":
                raise InvalidLockArgument("on_limited='retry' needs a task queue that can retry a task later; Django's "
                                          "tasks framework has no retry API: use 'skip' or 'raise'", lock_name=self.key)
            return with_func(target, self._decorate(target.func, dotted_name(target.func)))
        celery_task = _celery_task_class()
        if celery_task is not None and isinstance(target, celery_task):
            target.run = self._decorate(target.run, target.name)
            return target
        if not callable(target):
            raise InvalidLockArgumentType(f"@rate_limited decorates a function or a class, not {type(target).__name__}")
        view_class = getattr(target, "view_class", None)
        return self._decorate(target, dotted_name(view_class if isinstance(view_class, type) else target))

    def _decorate(self, func: Callable[..., Any], default_name: str, *, force_async: bool = False) -> Any:
        key = KeyTemplate(f"{default_name}:{{client_ip}}" if self.key == CLIENT_IP_KEY else self.key, default_name)
        key.check_against(func, view_names=True, extra=self.params)
        is_async = force_async or iscoroutinefunction(func)
        if is_async and self.on_limited == "retry":
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(f"on_limited='retry' retries a Celery task, and Celery runs sync functions "
                                       f"only ({default_name}).")
        policy = self.policy or key.metric_template
        if is_async:

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await self._call_async(func, key, policy, args, kwargs)

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(func)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                return self._call_sync(func, key, policy, args, kwargs)

            wrapper = sync_wrapper
        wrapper.rate_limited = self
        register(wrapper, key, self.algorithm, self.spec)
        if not isinstance(self.spec, Policy):
            rate_users[wrapper] = (default_name, self.spec)
        return wrapper

    # -- one call --------------------------------------------------------------------------------
    def _limit(self, name: str, policy: Policy, *, is_async: bool) -> Any:
        prefixed = coord_settings().prefixed(name)
        if self.algorithm == "window":
            return (AsyncWindow(get_async_client(), prefixed, policy.rate) if is_async
                    else SyncWindow(get_client(), prefixed, policy.rate))
        cls = AsyncGCRA if is_async else SyncGCRA
        return cls(get_async_client() if is_async else get_client(), prefixed, policy.rate, burst=policy.burst)

    def _unavailable(self, request: Optional[HttpRequest], name: str, settings: RateLimitSettings,
                     exc: BaseException) -> Optional[HttpResponse]:
        """Redis could not be reached: ``None`` (the call goes ahead unlimited, logged), the 503 of
        a view, or the error re-raised (anything else denying)."""
        choice = self.on_unavailable or settings.on_unavailable
        if choice == "allow":
            logger.warning("Redis unreachable for rate limit %r (%s): admitting the call (on_unavailable='allow')",
                           name, exc)
            return None
        logger.error("Redis unreachable for rate limit %r (%s): refusing (on_unavailable='deny')", name, exc)
        if request is None:
            raise exc
        return unavailable_response(name, coord_settings())

    def _refused(self, request: Optional[HttpRequest], name: str, template: str, policy_name: str,
                 policy: Policy, reply: RateLimitReply, settings: RateLimitSettings) -> Any:
        """What a refused call gives: the 429 of a view, a skip, a Celery retry or the exception."""
        _record("limited", template, self.algorithm, reply)
        seconds = retry_after_seconds(reply.retry_after)
        if request is None:
            if self.on_limited == "skip":
                return Skipped(skipped=True, lock=name, retry_after=seconds)
            error = RateLimitExceeded(f"{name!r} is over its rate limit ({policy.rate}); retry in {seconds} s",
                                      lock_name=name, retry_after=reply.retry_after)
            if self.on_limited == "retry":
                _retry_task(error, seconds)
            raise error
        response = HttpResponse(f"{name}: too many requests. Retry in {seconds} s.\n",
                                status=self.status or settings.status, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(seconds)
        self._add_headers(response, policy_name, policy, reply)
        return response

    def _add_headers(self, response: Any, policy_name: str, policy: Policy, reply: RateLimitReply) -> None:
        if not isinstance(response, HttpResponseBase):
            return
        refill = policy.rate.period if self.algorithm == "window" else (
            policy.capacity * policy.rate.period / policy.rate.count)
        add_fields(response, {"RateLimit-Policy": policy_field(policy_name, reply.limit, refill),
                              "RateLimit": limit_field(policy_name, reply)})

    def _call_sync(self, func: Callable[..., Any], key: KeyTemplate, policy_name: str, args: tuple,
                   kwargs: dict) -> Any:
        settings = coord_settings().ratelimit
        if not settings.enabled:
            return func(*args, **kwargs)
        policy = resolved(self.spec, settings, key.template)
        if key.fixed:
            request, name = find_request(args)[0], key.template
        else:
            request, name = name_sync(key, self.params, args, kwargs)
        limit = self._limit(name, policy, is_async=False)
        try:
            reply = limit.acquire(self.cost, wait=self.wait) if self.wait else limit.hit(self.cost)
        except REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            answer = self._unavailable(request, name, settings, exc)
            return func(*args, **kwargs) if answer is None else answer
        if not reply.allowed:
            return self._refused(request, name, key.metric_template, policy_name, policy, reply, settings)
        _record("admitted", key.metric_template, self.algorithm, reply)
        if request is None:
            return func(*args, **kwargs)
        request.rate_limit = reply  # type: ignore[attr-defined]
        response = func(*args, **kwargs)
        self._add_headers(response, policy_name, policy, reply)
        return response

    async def _call_async(self, func: Callable[..., Any], key: KeyTemplate, policy_name: str, args: tuple,
                          kwargs: dict) -> Any:
        settings = coord_settings().ratelimit
        if not settings.enabled:
            return await maybe_await(func(*args, **kwargs))
        policy = resolved(self.spec, settings, key.template)
        if key.fixed:
            request, name = find_request(args)[0], key.template
        else:
            request, name = await name_async(key, self.params, args, kwargs)
        limit = self._limit(name, policy, is_async=True)
        try:
            reply = await (limit.acquire(self.cost, wait=self.wait) if self.wait else limit.hit(self.cost))
        except REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            answer = self._unavailable(request, name, settings, exc)
            return await maybe_await(func(*args, **kwargs)) if answer is None else answer
        if not reply.allowed:
            return self._refused(request, name, key.metric_template, policy_name, policy, reply, settings)
        _record("admitted", key.metric_template, self.algorithm, reply)
        if request is None:
            return await maybe_await(func(*args, **kwargs))
        request.rate_limit = reply  # type: ignore[attr-defined]
        response = await maybe_await(func(*args, **kwargs))
        self._add_headers(response, policy_name, policy, reply)
        return response


def _record(event: str, template: str, algorithm: str, reply: RateLimitReply) -> None:
    """Count ``event`` (``"admitted"`` or ``"limited"``) under ``template`` for the configured exporters,
    and tell the current span of the decision when tracing is on (``TRACING``)."""
    fanout = configured_metrics()
    if fanout is not None:
        fanout.record(event, template, _KINDS[algorithm], None)
    add_rate_limit_event(template, _KINDS[algorithm].kind, allowed=reply.allowed, limit=reply.limit,
                         remaining=reply.remaining, retry_after=reply.retry_after)


def _retry_task(error: RateLimitExceeded, seconds: int) -> None:
    """``on_limited="retry"``: Celery's ``Retry`` of the running task, ``seconds`` later."""
    from celery import current_task

    task = current_task  # a proxy: false outside a task
    if not task or task.request.id is None:
        raise InvalidLockArgument(f"on_limited='retry' retries a Celery task, and {error.lock_name!r} was refused "
                                  "outside one", lock_name=error.lock_name)
    raise task.retry(countdown=seconds, exc=error)


def _celery_task_class() -> Any:
    import sys

    return getattr(sys.modules.get("celery.app.task"), "Task", None)


def rate_limited(key: Any = None, /, **options: Any) -> Any:
    """Limit a view, a view class, a task or a function to a rate per key.

    ``@rate_limited("api:{user.pk}", rate="100/m", burst=20)``; bare ``@rate_limited`` limits the
    view as a whole by ``DEFAULT_RATE``; ``@rate_limited("ip", ...)`` (or ``key="ip"``) limits each
    client address per view (``"<view>:{client_ip}"``); a callable key goes by keyword (``key=...``).  Options:
    ``rate`` (a rate string, or the name of one of ``RATELIMIT["RATES"]``; default
    ``DEFAULT_RATE``), ``burst`` (GCRA only; default the rate's count), ``algorithm`` (``"gcra"`` or
    ``"window"``), ``cost``, ``wait`` (seconds a call may wait for its reserved slot), ``on_limited``
    (outside views: ``"raise"``, ``"skip"`` or, in a Celery task, ``"retry"``), ``on_unavailable``
    (``"allow"`` or ``"deny"``; default ``RATELIMIT["ON_UNAVAILABLE"]``), ``status`` (default 429),
    ``policy`` (the name in the ``RateLimit`` fields; default the key template) and ``params``.
    """
    return decorator_from(RateLimited, "rate_limited", key, options)
