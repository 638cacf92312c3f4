"""The admin's rate-limits page: the busiest live rate limits, read from Redis when the page is read
(:func:`~django_redis_coord.core.ratelimit.usage.busiest`: a ``SCAN`` and one pipeline), never
written on a decision.  It sits behind the holders page's ``admin_view`` and ``view_holder``
permission, at ``reverse("admin:django_redis_coord_holder_ratelimits")``, linked from the list of
holders; with ``force_release_holder`` it also offers to reset a limit (a POST with the CSRF token).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from redis.exceptions import RedisError

from ..config.connection import get_client
from ..config.settings import coord_settings
from ..core.holder_fields import format_ms
from ..core.ratelimit.usage import SCAN_LIMIT, busiest, usage_of
from .audit import log_reset

__all__ = ["ratelimits_view_for", "SHOWN"]

#: Limits shown at most.
SHOWN = 100


def ratelimits_view_for(model_admin: Any) -> Callable[[HttpRequest], HttpResponse]:
    """The page's view, on the holders' ``ModelAdmin`` (its permission, context and error page)."""

    def ratelimits_view(request: HttpRequest) -> HttpResponse:
        model_admin.check_view(request)
        settings = coord_settings()
        context = model_admin.base_context(request, "Rate limits")
        if request.method == "POST":
            if not model_admin.has_force_release_permission(request):
                raise PermissionDenied
            name = request.POST.get("name", "")
            try:
                usages = usage_of(get_client(), settings.prefixed(name)) if name else []
                removed = get_client().delete(*[u.raw_key for u in usages]) if usages else 0
            except RedisError as error:
                return model_admin.unavailable(request, context, error)
            if removed:
                messages.success(request, f"Reset the rate limit “{name}”: its next call finds it idle.")
                log_reset(request, name, f"Reset ({', '.join(u.kind for u in usages)}): its next call finds it idle.")
            else:
                messages.warning(request, f"Nothing to reset: the rate limit “{name}” is idle.")
            return HttpResponseRedirect(request.path)
        try:
            usages = busiest(get_client(), settings.key_prefix, limit=SHOWN)
        except RedisError as error:
            return model_admin.unavailable(request, context, error)
        context.update({
            "limits": [{**u.as_dict(), "free_in": format_ms(u.free_in_ms)} for u in usages],
            "shown": SHOWN,
            "scan_limit": SCAN_LIMIT,
            "changelist_url": model_admin.url("changelist"),
        })
        request.current_app = model_admin.admin_site.name
        return TemplateResponse(request, "admin/django_redis_coord/ratelimits/page.html", context)

    return ratelimits_view
