"""The admin's rate-limits page: the busiest live rate limits, read from Redis when the page is read
(:func:`~django_redis_coord.core.ratelimit.usage.busiest`: a ``SCAN`` and one pipeline), never
written on a decision.  Each row shows the limit's kind as people call it, its rate, capacity and
what remains of it when its rate can be known (:mod:`~django_redis_coord.ratelimited.inspection`),
and how long until it is entirely free again.  It sits behind the holders page's ``admin_view`` and
``view_holder`` permission, at ``reverse("admin:django_redis_coord_holder_ratelimits")``, linked
from the list of holders; with ``force_release_holder`` it also offers to reset a limit: a POST
(with the CSRF token) of ``key``, the id of a listed limit's key (:func:`limit_id`: any key, also
one whose name is not UTF-8 or is stored as its digest), or of ``name``, a limit's name without
``KEY_PREFIX`` (both kinds of that name).  A POST naming nothing a limit can have is a 400 that
says why.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from redis.exceptions import RedisError

from ..config.connection import get_client
from ..config.settings import coord_settings
from ..core.exceptions import InvalidLockArgument
from ..core.holder_fields import format_ms
from ..core.ratelimit.usage import SCAN_LIMIT, busiest, keys_of, kind_of_key, usages_of_keys
from ..ratelimited.inspection import states_of
from .audit import log_reset

__all__ = ["ratelimits_view_for", "limit_id", "SHOWN"]

#: Limits shown at most.
SHOWN = 100


def limit_id(raw_key: bytes) -> str:
    """A URL-safe id of a limit's key (any bytes round-trip), posted by the page's reset forms."""
    return base64.urlsafe_b64encode(raw_key).decode().rstrip("=")


def _key_of_id(value: str) -> bytes:
    """The key :func:`limit_id` gave ``value`` for; :class:`InvalidLockArgument` when it is not a limit's key."""
    try:
        raw = base64.urlsafe_b64decode(value.encode("ascii") + b"=" * (-len(value) % 4))
    except (ValueError, binascii.Error):
        raw = b""
    if not raw or kind_of_key(raw) is None:
        raise InvalidLockArgument(f"{value[:100]!r} is not a rate limit's key: post the id the page's Reset form gives")
    return raw


def _bad_request(message: str) -> HttpResponseBadRequest:
    return HttpResponseBadRequest(message + "\n", content_type="text/plain; charset=utf-8")


def ratelimits_view_for(model_admin: Any) -> Callable[[HttpRequest], HttpResponse]:
    """The page's view, on the holders' ``ModelAdmin`` (its permission, context and error page)."""

    def reset(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
        if not model_admin.has_force_release_permission(request):
            raise PermissionDenied
        settings = coord_settings()
        key_id, name = request.POST.get("key", ""), request.POST.get("name", "")
        try:
            if key_id:
                keys = [_key_of_id(key_id)]
            elif name:
                keys = [key for _kind, key in keys_of(name, settings.key_prefix, keys=False)]
            else:
                return _bad_request("Name the rate limit to reset: post its name (without KEY_PREFIX) as `name`, "
                                    "or the id of its key as `key`, as the page's Reset form does.")
        except InvalidLockArgument as error:
            return _bad_request(f"Not a rate limit: {error}.")
        try:
            client = get_client()
            usages = usages_of_keys(client, keys, settings.key_prefix)
            removed = client.delete(*[u.raw_key for u in usages]) if usages else 0
        except RedisError as error:
            return model_admin.unavailable(request, context, error)
        shown = usages[0].name if usages else name or key_id
        if removed:
            messages.success(request, f"Reset the rate limit “{shown}”: its next call finds it idle.")
            log_reset(request, shown, f"Reset ({', '.join(u.kind for u in usages)}): its next call finds it idle.")
        else:
            messages.warning(request, f"Nothing to reset: the rate limit “{shown}” is idle.")
        return HttpResponseRedirect(request.path)

    def ratelimits_view(request: HttpRequest) -> HttpResponse:
        model_admin.check_view(request)
        context = model_admin.base_context(request, "Rate limits")
        if request.method == "POST":
            return reset(request, context)
        settings = coord_settings()
        try:
            client = get_client()
            states = states_of(client, busiest(client, settings.key_prefix, limit=SHOWN), settings.ratelimit)
        except RedisError as error:
            return model_admin.unavailable(request, context, error)
        context.update({
            "limits": [{
                "name": s.usage.name, "id": limit_id(s.usage.raw_key), "kind": s.usage.kind,
                "kind_title": s.usage.kind_title, "rate": s.rate, "limit": s.limit, "remaining": s.remaining,
                # without the rate, a window's stored admissions (a trim on its next decision may drop some)
                "used": s.used if s.used is not None or s.usage.kind != "window" else s.usage.in_window,
                "free_in": format_ms(s.usage.free_in_ms),
            } for s in states],
            "shown": SHOWN,
            "scan_limit": SCAN_LIMIT,
            "changelist_url": model_admin.url("changelist"),
        })
        request.current_app = model_admin.admin_site.name
        return TemplateResponse(request, "admin/django_redis_coord/ratelimits/page.html", context)

    return ratelimits_view

