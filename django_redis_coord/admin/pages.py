"""The admin index and sidebar entries of the rate-limits and contention pages, beside "Live
holders" (as django-rq lists its queues): each page is the changelist of a placeholder model
(:class:`~django_redis_coord.models.RateLimit`, :class:`~django_redis_coord.models.Contention`),
at ``admin/django_redis_coord/ratelimit/`` and ``admin/django_redis_coord/contention/``.

An entry shows to whoever may see the page: the ``view_holder`` permission (the holders page's),
nothing to add, change or delete.  The views are the holders admin's
(:mod:`~django_redis_coord.admin.ratelimits`, :mod:`~django_redis_coord.admin.contention`); their
URL names ``admin:django_redis_coord_holder_ratelimits`` and ``..._holder_contention`` name these
pages too, and the older addresses under ``holder/`` redirect here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import path

from ..models import Contention, Holder, RateLimit
from .contention import contention_view_for
from .holders import HolderAdmin
from .ratelimits import ratelimits_view_for

__all__ = ["PageAdmin", "RateLimitAdmin", "ContentionAdmin", "VIEW_PERMISSION"]

VIEW_PERMISSION = "django_redis_coord.view_holder"


class PageAdmin(admin.ModelAdmin):
    """One page of the holders admin, listed as a model: viewable with ``view_holder``, nothing else."""

    #: The page's view, made for the holders' ``ModelAdmin``.
    view_for: Callable[[Any], Callable[[HttpRequest], HttpResponse]]  # a staticmethod
    #: The page's URL name under the holders (``admin:django_redis_coord_holder_<name>``).
    holder_url_name: str

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm(VIEW_PERMISSION))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list:
        view = self.admin_site.admin_view(self.view_for(HolderAdmin(Holder, self.admin_site)))
        return [
            path("", view, name=f"{self.opts.app_label}_{self.opts.model_name}_changelist"),
            path("", view, name=f"{Holder._meta.app_label}_{Holder._meta.model_name}_{self.holder_url_name}"),
        ]


@admin.register(RateLimit)
class RateLimitAdmin(PageAdmin):
    """Rate limits: the busiest live ones, with their reset."""

    view_for = staticmethod(ratelimits_view_for)
    holder_url_name = "ratelimits"


@admin.register(Contention)
class ContentionAdmin(PageAdmin):
    """Contention by key template over the last hour."""

    view_for = staticmethod(contention_view_for)
    holder_url_name = "contention"
