"""``@locked``: at most one (or ``limit``) concurrent execution of a view or function per key.

>>> from django_redis_coord import locked                          # doctest: +SKIP
>>> @locked("checkout:{user.pk}", timeout=30)                     # doctest: +SKIP
... def checkout(request):
...     ...

Works on function and class-based views (sync or async), plain functions (Celery tasks, commands)
and as a context manager.  The whole story is in ``docs/django.md``; each concern has a module:

* the key, a ``str.format`` template or a callable (default: the view's dotted name), parsed and
  checked when decorating and filled on each call: :mod:`~django_redis_coord.key_templates.template`,
  :mod:`~django_redis_coord.key_templates.filling` (a value missing from a request: 400, :class:`MissingKeyValue`);
* the answer when the key is taken, 409 with ``Retry-After`` or ``status=``/``handler=``/
  ``template_name=`` (:class:`LockContended` outside views): :mod:`~django_redis_coord.contention`;
* the hold's end at the response's close: :mod:`~django_redis_coord.decorator.release`; Redis unreachable (503
  or ``fail_open``): :mod:`~django_redis_coord.decorator.unavailable`;
* the primitive (a lock, ``limit=N`` permits, ``redlock=True`` a Redlock, ``mode="read"``/``"write"``
  a side of a read-write lock), made by :mod:`~django_redis_coord.shortcuts`.

The hold is ``request.coord_lock`` and :func:`current_lock` inside the view.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from ..config.settings import CoordSettings, coord_settings
from ..config.shortcuts import DEFAULT as _DEFAULT
from ..config.shortcuts import locked_primitive
from ..core.exceptions import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    KeyTemplateError,
    LockContended,
    LockLostError,
)
from ..key_templates.filling import checked_name, find_request, name_async, name_sync
from ..key_templates.template import KeyTemplate, KeyTooLong, MissingKeyValue
from .contention import Contention, answer_async, answer_sync, contended_error, contention, retry_contended, skipped
from .options import check_flavour, check_redlock_settings, checked_on_contended, checked_options
from .permits import AsyncPermitHold, PermitHold
from .release import AsyncRelease, Release, arelease_logged, release_at_close, release_logged, released_after
from .task_objects import locked_task_object
from .unavailable import REDIS_ERRORS, redis_unavailable, unavailable_response

__all__ = [
    "locked",
    "Locked",
    "Contention",
    "KeyTemplateError",
    "MissingKeyValue",
    "KeyTooLong",
    "LockContended",
    "current_lock",
    "redlock_user_names",
]

logger = logging.getLogger("django_redis_coord")

#: What :meth:`Locked._unavailable` returns when the call goes ahead without the lock.
_RUN_UNLOCKED: Any = object()

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("django_redis_coord_current_lock", default=None)

#: What was decorated with ``redlock=True`` (wrapper -> dotted name): see :func:`redlock_user_names`.
redlock_users: weakref.WeakKeyDictionary[Callable[..., Any], str] = weakref.WeakKeyDictionary()


def current_lock() -> Any:
    """The lock or semaphore held by the innermost ``@locked`` call running here, else ``None``."""
    return _current.get()


def redlock_user_names() -> list[str]:
    """The dotted names of what is decorated with ``@locked(redlock=True)`` (for the system checks)."""
    return sorted(set(redlock_users.values()))


# -- the decorator ---------------------------------------------------------------------------------
class Locked:
    """The object ``locked(...)`` returns: a decorator and a (sync or async) context manager."""

    def __init__(
        self,
        key: Union[str, Callable[..., Any], None] = None,
        *,
        timeout: Any = _DEFAULT,
        wait: float = 0,
        limit: Optional[int] = None,
        status: Optional[int] = None,
        handler: Optional[Callable[..., Any]] = None,
        template_name: Optional[str] = None,
        auto_renew: Optional[bool] = None,
        rollback_on_loss: bool = False,
        using: Optional[str] = None,
        fail_open: Optional[bool] = None,
        label: Optional[str] = None,
        params: Optional[Mapping[str, Any]] = None,
        redlock: bool = False,
        on_contended: Optional[str] = None,
        max_hold: Optional[float] = None,
        mode: Optional[str] = None,
    ) -> None:
        self.on_contended = checked_on_contended(on_contended, key)
        auto_renew = True if max_hold is not None and auto_renew is None else auto_renew  # a cap asks for renewals
        timeout = checked_options(
            key, timeout=timeout, wait=wait, limit=limit, status=status, handler=handler, template_name=template_name,
            auto_renew=auto_renew, rollback_on_loss=rollback_on_loss, using=using, fail_open=fail_open, label=label,
            params=params, redlock=redlock, on_contended=on_contended, max_hold=max_hold, mode=mode,
        )
        self.key = key
        self.timeout = timeout
        self.wait = wait
        self.limit = limit
        self.status = status
        self.handler = handler
        self.template_name = template_name
        self.auto_renew = auto_renew
        self.rollback_on_loss = rollback_on_loss
        self.using = using
        self.fail_open = fail_open
        self.label = label
        self.params = dict(params or {})
        self.redlock = redlock
        self.max_hold = max_hold
        #: ``"read"`` or ``"write"``: that side of a read-write lock is held (``None``: a lock).
        self.mode = mode
        # What each acquire is called with; a plain lock (no Redlock, semaphore or read-write lock).
        self._acquire_kw: dict[str, Any] = (
            {"blocking": True, "blocking_timeout": wait} if wait else {"blocking": False}
        )
        self._plain_lock = not redlock and limit is None and mode is None
        # The same, as positional arguments of a lock's acquire(sleep, blocking, blocking_timeout).
        self._lock_acquire_args = (None, True, wait) if wait else (None, False, None)
        # The key of the context manager, checked on its first use.
        self._context_key: Optional[KeyTemplate] = None
        # Context-manager holds of this object, per thread/task (one object may be shared).
        self._context = ContextHolds(self)

    # -- primitives ------------------------------------------------------------------------------
    def _make(self, name: str, label: Optional[str], settings: CoordSettings, *, is_async: bool,
              view: Optional[str] = None, template: Optional[str] = None) -> Any:
        """The primitive of one use; ``view``: the dotted path of the view it guards (holder info);
        ``template``: the label of its metrics (the key's :attr:`KeyTemplate.metric_template`)."""
        if self.redlock:
            check_redlock_settings(self.key, self.timeout, settings)
        primitive = locked_primitive(name, asyncio=is_async, timeout=self.timeout, auto_renew=self.auto_renew,
                                     label=label, view=view, limit=self.limit, redlock=self.redlock,
                                     max_hold=self.max_hold, template=template, mode=self.mode)
        if self.limit is None:
            return primitive
        return AsyncPermitHold(primitive) if is_async else PermitHold(primitive)

    def _unavailable(
        self, request: Optional[HttpRequest], name: str, settings: CoordSettings, exc: BaseException
    ) -> Any:
        """Redis could not be reached: log, then :data:`_RUN_UNLOCKED` (fail open), the 503 response
        (a view failing closed), or re-raise (anything else failing closed)."""
        if settings.fail_open if self.fail_open is None else self.fail_open:
            logger.warning("Redis unreachable for lock %r (%s): running without the lock (fail open)", name, exc)
            if request is not None:
                request.coord_lock = None  # type: ignore[attr-defined]
            return _RUN_UNLOCKED
        logger.error("Redis unreachable for lock %r (%s): refusing (fail closed)", name, exc)
        if request is None:
            raise exc
        return unavailable_response(name, settings)

    def _refused(
        self, request: Optional[HttpRequest], name: str, primitive: Any, started: float, settings: CoordSettings,
        *, skippable: bool = False,
    ) -> Contention:
        """The key is taken: what a view's answer needs (or a decorated call's, when ``skippable``
        and ``on_contended="skip"``); anything else gets :class:`LockContended`."""
        info = contention(name, primitive, _now() - started, settings, limit=self.limit, status=self.status)
        if request is None and not (skippable and self.on_contended == "skip"):
            if self.on_contended == "retry":
                retry_contended(info)  # raises Celery's Retry
            raise contended_error(info)
        return info

    # -- decoration ------------------------------------------------------------------------------
    def __call__(self, target: Any) -> Any:
        if isinstance(target, type):
            return self._decorate_class(target)
        task = locked_task_object(self, target, lambda func: self.decorate(func, dotted_name(func)))
        if task is not None:  # a task of Django's tasks framework, or of Celery
            return task
        if not callable(target):
            raise InvalidLockArgumentType(f"@locked decorates a function or a class, not {type(target).__name__}")
        # A class-based view's as_view() is a function of Django's, the same for every class:
        # named after its class, as when the class itself is decorated.
        view_class = getattr(target, "view_class", None)
        return self.decorate(target, dotted_name(view_class if isinstance(view_class, type) else target))

    def _decorate_class(self, cls: type) -> type:
        dispatch = getattr(cls, "dispatch", None)
        if dispatch is None:
            raise InvalidLockArgumentType(f"@locked on a class needs a view class with dispatch(); {cls!r} has none")
        is_async = bool(getattr(cls, "view_is_async", False))
        cls.dispatch = self.decorate(dispatch, dotted_name(cls), force_async=is_async)  # type: ignore[attr-defined]
        return cls

    def decorate(self, func: Callable[..., Any], default_name: str, *, force_async: bool = False) -> Any:
        """``func`` run under the lock (a view, a plain function or a task's ``run``), the key
        template's default name being ``default_name``."""
        if self.redlock:
            check_redlock_settings(self.key, self.timeout)
        key = KeyTemplate(self.key, default_name)
        key.check_against(func, view_names=True, extra=self.params)
        label = self.label or default_name
        is_async = force_async or iscoroutinefunction(func)
        check_flavour(self, is_async, default_name)
        if is_async:

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await self._call_async(func, key, label, args, kwargs)

            async_wrapper.locked = self  # type: ignore[attr-defined]
            if self.redlock:
                redlock_users[async_wrapper] = default_name
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return self._call_sync(func, key, label, args, kwargs)

        wrapper.locked = self  # type: ignore[attr-defined]
        if self.redlock:
            redlock_users[wrapper] = default_name
        return wrapper


    # -- sync calls ------------------------------------------------------------------------------
    def _call_sync(self, func: Callable[..., Any], key: KeyTemplate, label: str, args: tuple, kwargs: dict) -> Any:
        if key.fixed:
            request, name = find_request(args)[0], key.template
        else:
            request, name = name_sync(key, self.params, args, kwargs)
        settings = coord_settings()
        view = key.default_name if request is not None else None  # a plain function is no view
        primitive = self._make(name, label, settings, is_async=False, view=view, template=key.metric_template)
        started = _now()
        try:
            if self._plain_lock:
                acquired = primitive.acquire(*self._lock_acquire_args)
            else:
                acquired = primitive.acquire(**self._acquire_kw)
        except REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            outcome = self._unavailable(request, name, settings, exc)
            return func(*args, **kwargs) if outcome is _RUN_UNLOCKED else outcome
        if not acquired:
            info = self._refused(request, name, primitive, started, settings, skippable=True)
            if request is None:
                return skipped(info)
            return answer_sync(request, info, settings, handler=self.handler, template_name=self.template_name)
        release = Release(primitive)
        token = _current.set(primitive)
        try:
            if request is not None:
                request.coord_lock = primitive  # type: ignore[attr-defined]
            if self.rollback_on_loss:
                from django.db import transaction

                with transaction.atomic(using=self.using):
                    result = func(*args, **kwargs)
                    if not primitive.valid:
                        logger.error("Lost %r before the view returned: rolling its transaction back", name)
                        raise LockLostError(
                            f"The hold of {name!r} was lost before the view returned; its transaction was rolled back",
                            lock_name=name,
                        )
            else:
                result = func(*args, **kwargs)
        except BaseException:
            release()
            raise
        finally:
            _current.reset(token)
        if request is not None and isinstance(result, HttpResponseBase):
            release_at_close(result, request, release)
        else:
            release()
        return result

    # -- asyncio calls ---------------------------------------------------------------------------
    async def _call_async(
        self, func: Callable[..., Any], key: KeyTemplate, label: str, args: tuple, kwargs: dict
    ) -> Any:
        if key.fixed:
            request, name = find_request(args)[0], key.template
        else:
            request, name = await name_async(key, self.params, args, kwargs)
        settings = coord_settings()
        view = key.default_name if request is not None else None  # a plain function is no view
        primitive = self._make(name, label, settings, is_async=True, view=view, template=key.metric_template)
        started = _now()
        try:
            acquired = await primitive.acquire(**self._acquire_kw)
        except REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            outcome = self._unavailable(request, name, settings, exc)
            return await maybe_await(func(*args, **kwargs)) if outcome is _RUN_UNLOCKED else outcome
        if not acquired:
            info = self._refused(request, name, primitive, started, settings, skippable=True)
            if request is None:
                return skipped(info)
            return await answer_async(request, info, settings, handler=self.handler, template_name=self.template_name)
        release = AsyncRelease(primitive, asyncio.get_running_loop())
        token = _current.set(primitive)
        try:
            if request is not None:
                request.coord_lock = primitive  # type: ignore[attr-defined]
            result = await maybe_await(func(*args, **kwargs))
        except BaseException:
            await release.arelease()
            raise
        finally:
            _current.reset(token)
        if request is not None and isinstance(result, HttpResponseBase):
            if getattr(result, "streaming", False) and getattr(result, "is_async", False):
                result.streaming_content = released_after(result.streaming_content, release)  # type: ignore
            release_at_close(result, request, release)
        else:
            await release.arelease()
        return result

    # -- context manager (see django_redis_coord.decorator.locked) ----------------------------------
    def __enter__(self) -> Any:
        return self._context.enter()

    def __exit__(self, *exc_info: Any) -> None:
        self._context.exit()

    async def __aenter__(self) -> Any:
        return await self._context.aenter()

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._context.aexit()


async def maybe_await(value: Any) -> Any:
    """``value``, awaited when it is awaitable (what an async wrapper's function returned)."""
    if inspect.isawaitable(value):
        return await value
    return value


# -- with locked(...) and async with locked(...): the holds of one locked object, per thread or task --
def context_name(locked: Locked) -> tuple[str, KeyTemplate]:
    """The name a ``with locked(...)`` block locks and its key template: the template filled from
    ``params`` (a ``with`` block has no call arguments), checked and parsed on first use."""
    if locked.key is None:
        raise KeyTemplateError("locked() used as a context manager needs a key.")
    if locked.on_contended == "skip":
        raise InvalidLockArgument("on_contended='skip' is for decorated functions: a with block cannot be skipped")
    key = locked._context_key
    if key is None:
        key = locked._context_key = KeyTemplate(locked.key, "")
    if key.callable is not None:
        return checked_name(key.callable(**locked.params), key), key
    return key.render(locked.params), key


class ContextHolds:
    """Takes a hold on entry (:class:`~django_redis_coord.exceptions.LockContended` when the key
    is taken; Redis unreachable re-raises unless failing open, then the block runs unlocked and
    ``None`` is what it gets), and releases it on exit, logged rather than raised."""

    def __init__(self, locked: Locked) -> None:
        """``locked``: the :class:`Locked` these holds are of."""
        self.locked = locked
        self._held: contextvars.ContextVar[tuple] = contextvars.ContextVar(f"locked-{id(locked)}", default=())

    def _start(self, *, is_async: bool) -> tuple[str, CoordSettings, Any, float]:
        locked = self.locked
        name, key = context_name(locked)
        settings = coord_settings()
        primitive = locked._make(name, locked.label or name, settings, is_async=is_async, template=key.metric_template)
        return name, settings, primitive, time.monotonic()

    def _push(self, primitive: Any) -> Any:
        self._held.set((*self._held.get(), primitive))
        return primitive

    def _pop(self) -> Any:
        held = self._held.get()
        self._held.set(held[:-1])
        return held[-1]

    def enter(self) -> Any:
        name, settings, primitive, started = self._start(is_async=False)
        try:
            acquired = primitive.acquire(**self.locked._acquire_kw)
        except REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            self.locked._unavailable(None, name, settings, exc)  # raises unless failing open
            return self._push(None)
        if not acquired:
            self.locked._refused(None, name, primitive, started, settings)
        return self._push(primitive)

    def exit(self) -> None:
        primitive = self._pop()
        if primitive is not None:
            release_logged(primitive)

    async def aenter(self) -> Any:
        name, settings, primitive, started = self._start(is_async=True)
        try:
            acquired = await primitive.acquire(**self.locked._acquire_kw)
        except REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            self.locked._unavailable(None, name, settings, exc)
            return self._push(None)
        if not acquired:
            self.locked._refused(None, name, primitive, started, settings)
        return self._push(primitive)

    async def aexit(self) -> None:
        primitive = self._pop()
        if primitive is not None:
            await arelease_logged(primitive)


def dotted_name(obj: Any) -> str:
    """``module.qualname`` of a function or class: the default name of a decorated one."""
    return f"{obj.__module__}.{obj.__qualname__}"


#: The clock of the time spent trying (``Contention.wait_time``).
_now = time.monotonic


def locked(key: Any = None, /, **options: Any) -> Any:
    """Decorate a view, a class-based view, a method or a function, or use as a context manager.

    ``@locked`` (bare) locks on the view's dotted name; ``@locked("orders:{pk}", timeout=30)``
    on a template (a callable key goes by keyword: ``@locked(key=lambda request, pk: ...)``).
    Options: ``timeout``, ``wait``, ``limit``, ``status``, ``handler``, ``template_name``,
    ``auto_renew``, ``rollback_on_loss``, ``using``, ``fail_open``, ``label``, ``params``,
    ``redlock`` (take the lock with Redlock over ``REDLOCK["MASTERS"]``), ``mode`` (``"read"`` or
    ``"write"``: that side of a read-write lock), ``max_hold`` (seconds), ``on_contended``
    (outside views: ``"raise"``, ``"skip"`` (return a ``Skipped`` value without running) or, in a
    Celery task, ``"retry"``).
    Also decorates a ``Task`` of Django's tasks framework (``@locked`` above ``@task``).
    """
    return decorator_from(Locked, "locked", key, options)


def decorator_from(factory: Callable[..., Any], name: str, key: Any, options: dict[str, Any]) -> Any:
    """What ``name(key, **options)`` gives for the decorator class ``factory`` (``Locked``,
    ``RateLimited``): the key positionally or by keyword (a callable one by keyword), or, bare
    over a function or class (``@locked``), that function or class decorated with the defaults."""
    if "key" in options:
        if key is not None:
            raise InvalidLockArgumentType(f"{name}() got the key twice")
        return factory(options.pop("key"), **options)
    if callable(key) and not options:
        return factory()(key)
    if callable(key):
        raise InvalidLockArgumentType(f"pass a callable key by keyword: {name}(key=my_key_function, ...)")
    return factory(key, **options)
