"""The key of one call of a decorated function (``@locked``, ``@rate_limited``, a unique task):
what its template is filled from.

A view's template sees its arguments by name, ``{args[0]}``, ``{kwargs[pk]}``, ``{user}``,
``{query[name]}``, ``{headers[X-Tenant]}``, ``{client_ip}`` (:mod:`.client_ip`), ``{request}``
and ``{view}``; a plain function's sees its arguments by name; both see ``params``.  A key
callable is called with the view's arguments (without ``self``) or the function's.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from ..core.exceptions import KeyTemplateError
from .client_ip import client_ip
from .template import KeyTemplate, KeyTooLong, MissingKeyValue, RequestValues, bound_arguments
from .values import check_key_length

__all__ = ["find_request", "name_sync", "name_async", "checked_name"]

#: Marks a user not looked up yet (an async view looks it up with ``request.auser()``).
_NOT_LOOKED_UP: Any = object()


def _keyword_values(names: Any, kwargs: dict) -> Optional[dict[str, Any]]:
    """``names`` and their values when the call passed all of them by keyword, else ``None``.

    Then they are what :func:`~django_redis_coord.key_templates.template.bound_arguments` would give for
    them (a value passed by keyword is the argument's value, also when binding fails), so the
    template needs no binding."""
    values = {}
    for name in names:
        if name not in kwargs:
            return None
        values[name] = kwargs[name]
    return values


def find_request(args: tuple) -> tuple[Optional[HttpRequest], int]:
    """The request among the first two positional arguments (function view or method), if any."""
    if args:
        if isinstance(args[0], HttpRequest):
            return args[0], 0
        if len(args) > 1 and isinstance(args[1], HttpRequest):
            return args[1], 1
    return None, -1


def _view_namespace(
    key: KeyTemplate, params: Mapping[str, Any], request: HttpRequest, index: int, args: tuple, kwargs: dict,
    user: Any = _NOT_LOOKED_UP,
) -> dict[str, Any]:
    namespace = _keyword_values(key.argument_roots, kwargs)
    if namespace is None:
        namespace = dict(params)
        namespace.update(bound_arguments(key.signature, args, kwargs))
    roots = key.roots - key.shadowed  # the view's own arguments win
    if "user" in roots:
        if user is _NOT_LOOKED_UP:
            if not hasattr(request, "user"):
                raise KeyTemplateError(
                    f"The lock key {key.template!r} uses {{user}} but the request has no user "
                    "(is AuthenticationMiddleware installed?)."
                )
            user = request.user
        if "user" in key.bare_roots and getattr(user, "is_anonymous", False):
            # str() of every anonymous user is the same: they would all share one key.
            raise MissingKeyValue(f"The lock key {key.template!r} uses {{user}}, and the request is anonymous.")
        namespace["user"] = user
    if "query" in roots:
        namespace["query"] = RequestValues(request.GET, "query parameter", key.template)
    if "headers" in roots:
        namespace["headers"] = RequestValues(request.headers, "header", key.template)
    if "client_ip" in roots:
        namespace["client_ip"] = client_ip(request)
    namespace["request"] = request
    for name, value in (("args", args[index + 1 :]), ("kwargs", kwargs), ("view", key.default_name)):
        if name not in key.shadowed:
            namespace[name] = value
    return namespace


def call_namespace(key: KeyTemplate, params: Mapping[str, Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """What a plain function's key template is filled from: ``params`` and the call's arguments."""
    namespace = _keyword_values(key.roots, kwargs)
    if namespace is None:
        namespace = {**params, **bound_arguments(key.signature, args, kwargs)}
    return namespace


def _call_key(key: KeyTemplate, request: Optional[HttpRequest], index: int, args: tuple, kwargs: dict) -> Any:
    assert key.callable is not None
    return key.callable(*args[index:], **kwargs) if request is not None else key.callable(*args, **kwargs)


def name_sync(key: KeyTemplate, params: Mapping[str, Any], args: tuple, kwargs: dict) -> tuple[Any, str]:
    """The request among ``args`` (or ``None``) and the key of this call of a sync function."""
    request, index = find_request(args)
    if key.fixed:
        return request, key.template
    if key.callable is not None:
        name = _call_key(key, request, index, args, kwargs)
        if inspect.isawaitable(name):
            raise ImproperlyConfigured("The key callable of a sync function must not be async.")
        return request, checked_name(name, key)
    if request is not None:
        return request, key.render(_view_namespace(key, params, request, index, args, kwargs))
    return None, key.render(call_namespace(key, params, args, kwargs))


async def name_async(key: KeyTemplate, params: Mapping[str, Any], args: tuple, kwargs: dict) -> tuple[Any, str]:
    """The same for an ``async def`` function: an async key callable is awaited, and the user is
    looked up with ``request.auser()``."""
    request, index = find_request(args)
    if key.fixed:
        return request, key.template
    if key.callable is not None:
        name = _call_key(key, request, index, args, kwargs)
        if inspect.isawaitable(name):
            name = await name
        return request, checked_name(name, key)
    if request is not None:
        user = _NOT_LOOKED_UP
        if "user" in key.roots and "user" not in key.shadowed and hasattr(request, "auser"):
            user = await request.auser()
        return request, key.render(_view_namespace(key, params, request, index, args, kwargs, user))
    return None, key.render(call_namespace(key, params, args, kwargs))


def checked_name(name: Any, key: KeyTemplate) -> str:
    """What a key callable returned, refused when empty, not text or too long."""
    if name is None or name == "" or name == b"":
        raise MissingKeyValue(f"The lock key callable {key.callable!r} returned {name!r}.")
    if not isinstance(name, (str, bytes)):
        raise KeyTemplateError(f"The lock key callable {key.callable!r} returned a {type(name).__name__}.")
    return check_key_length(name.decode() if isinstance(name, bytes) else name, KeyTooLong)
