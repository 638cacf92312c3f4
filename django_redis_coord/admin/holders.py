"""The admin page of live lock, semaphore and read-write lock holders (read from Redis, never from the database).

Registered for the unmanaged :class:`~django_redis_coord.models.Holder` placeholder, it replaces
the usual admin views with three of its own, all behind ``admin_site.admin_view`` (login, staff,
CSRF, no caching):

* the list — ``reverse("admin:django_redis_coord_holder_changelist")`` — search box, kind filter,
  pagination, remaining TTL, semaphore usage, auto-refresh; needs the ``view_holder`` permission;
* a detail page per holder (metadata, fence, waiters), same permission;
* a force-release confirmation page, which needs ``force_release_holder`` as well; only its POST
  (with the CSRF token and the identity of the hold the operator confirmed: its fence and a digest
  of its token) changes anything.  A POST without both is a 400 and releases nothing; one whose
  hold has changed meanwhile releases nothing either;
* a bulk force release of the holds chosen by filters, with the same permission and the same
  rules per hold (:mod:`django_redis_coord.admin.bulk`).

Tokens are never sent to the browser, only their first characters and a digest
(:func:`~django_redis_coord.holders.hold_digest`).
"""

from __future__ import annotations

from typing import Any, Optional

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import urlencode
from django.views.generic import RedirectView
from redis.exceptions import RedisError

from ..config.connection import describe_connection, get_client
from ..config.settings import coord_settings
from ..core.exceptions import InvalidLockArgument
from ..core.holders import KINDS, format_ms, parse_holder_id
from ..core.keys import encode_name
from ..core.listing import HolderListing
from ..models import Holder
from .audit import history_of, log_releases
from .bulk import BulkReleaseViews

FORCE_RELEASE_PERMISSION = "django_redis_coord.force_release_holder"


@admin.register(Holder)
class HolderAdmin(BulkReleaseViews, admin.ModelAdmin):
    """Live holders, from the per-slot registries in Redis (see :mod:`django_redis_coord.listing`)."""

    list_per_page = 50
    #: Seconds between automatic refreshes of the list (``?refresh=0`` turns it off).
    refresh_seconds = 5

    # -- permissions: read-only, plus force release --------------------------------------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_force_release_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(FORCE_RELEASE_PERMISSION))

    # -- URLs ----------------------------------------------------------------------------------
    def get_urls(self) -> list:
        base = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("", wrap(self.changelist_view), name=f"{base}_changelist"),
            path("bulk-release/", wrap(self.bulk_release_view), name=f"{base}_bulk_release"),
            # The rate-limits and contention pages live at their own entries (admin.pages); their
            # first addresses, under the holders, lead there.
            path("contention/", RedirectView.as_view(pattern_name=f"admin:{base}_contention", query_string=True)),
            path("ratelimits/", RedirectView.as_view(pattern_name=f"admin:{base}_ratelimits", query_string=True)),
            path("<str:holder_id>/", wrap(self.detail_view), name=f"{base}_detail"),
            path("<str:holder_id>/release/", wrap(self.release_view), name=f"{base}_release"),
        ]

    def url(self, name: str, *args: Any) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}", args=args,
                       current_app=self.admin_site.name)

    # -- helpers -------------------------------------------------------------------------------
    def listing(self) -> HolderListing:
        prefix = coord_settings().key_prefix
        return HolderListing(get_client(), prefix=prefix + ":" if prefix else "")

    def base_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "connection": describe_connection(),
            "key_prefix": coord_settings().key_prefix,
            "can_release": self.has_force_release_permission(request),
        }

    def check_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    def unavailable(self, request: HttpRequest, context: dict[str, Any], error: Exception) -> TemplateResponse:
        context["redis_error"] = f"{type(error).__name__}: {error}"
        return TemplateResponse(request, "admin/django_redis_coord/holder/unavailable.html", context, status=503)

    # -- the list ------------------------------------------------------------------------------
    def changelist_view(self, request: HttpRequest, extra_context: Optional[dict] = None) -> HttpResponse:
        self.check_view(request)
        query = request.GET.get("q", "").strip()
        kind = request.GET.get("kind") or None
        if kind not in KINDS:
            kind = None
        refresh = self.refresh_seconds
        try:
            refresh = max(0, min(3600, int(request.GET.get("refresh", refresh))))
        except ValueError:
            pass
        context = self.base_context(request, "Live holders")
        try:
            listing = self.listing()
            entries = listing.entries(kind=kind, search=query or None)
            paginator = Paginator(entries, self.list_per_page)
            page = paginator.get_page(request.GET.get("p"))
            holders = listing.details(list(page.object_list))
        except RedisError as error:
            return self.unavailable(request, context, error)

        def link(**changes: Any) -> str:
            params = {"q": query, "kind": kind or "", "refresh": refresh if refresh != self.refresh_seconds else ""}
            params.update(changes)
            return "?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})

        context.update(
            {
                "holders": holders,
                "query": query,
                "kind": kind,
                "kind_choices": [
                    {"title": "All", "selected": kind is None, "link": link(kind="", p="")},
                    *[
                        {"title": KINDS[k] + "s", "selected": kind == k, "link": link(kind=k, p="")}
                        for k in KINDS
                    ],
                ],
                "paginator": paginator,
                "page_obj": page,
                "page_links": [
                    {"number": n, "link": link(p=n) if n != paginator.ELLIPSIS else "", "current": n == page.number}
                    for n in paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)
                ],
                "previous_link": link(p=page.previous_page_number()) if page.has_previous() else "",
                "next_link": link(p=page.next_page_number()) if page.has_next() else "",
                "count": paginator.count,
                "refresh": refresh,
                "refresh_default": self.refresh_seconds,
                "refresh_off_link": link(refresh=0),
                "refresh_on_link": link(refresh=""),
                "server_now_ms": holders[0].server_now_ms if holders else None,
                **(extra_context or {}),
            }
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_redis_coord/holder/change_list.html", context)

    # -- one holder ----------------------------------------------------------------------------
    def resolve(self, holder_id: str) -> tuple[str, bytes]:
        """The kind and name an id stands for; 404 for an id no primitive can have (garbage, a
        name that is refused, such as one with the reserved marker or over the size limit)."""
        try:
            kind, raw = parse_holder_id(holder_id)
            encode_name(raw)
        except InvalidLockArgument:
            raise Http404("No such holder")
        return kind, raw

    def detail_view(self, request: HttpRequest, holder_id: str) -> HttpResponse:
        self.check_view(request)
        kind, raw = self.resolve(holder_id)
        context = self.base_context(request, "Live holder")
        prefix = coord_settings().key_prefix
        try:
            listing = self.listing()
            holders = listing.holder(raw, kind)
            waiters = listing.waiters(raw, kind)
            now_ms = holders[0].server_now_ms if holders else listing.server_time_ms()
        except InvalidLockArgument:  # a RedisError too: before it
            raise Http404("No such holder")
        except RedisError as error:
            return self.unavailable(request, context, error)
        shown = raw.decode("utf-8", "replace")
        head = prefix + ":" if prefix else ""
        context.update(
            {
                "holder_id": holder_id,
                "kind": kind,
                "kind_title": KINDS[kind],
                "name": shown[len(head):] if head and shown.startswith(head) else shown,
                "key": shown,
                "holders": holders,
                "usage": holders[0].usage if holders else None,
                "waiters": [{**w.as_dict(now_ms), "lease": format_ms(w.as_dict(now_ms)["lease_ms"])} for w in waiters],
                "history": list(history_of(holder_id)),
                "changelist_url": self.url("changelist"),
            }
        )
        context["title"] = f"{KINDS[kind]} “{context['name']}”"
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "admin/django_redis_coord/holder/detail.html", context, status=200 if holders else 404
        )

    # -- force release -------------------------------------------------------------------------
    def release_view(self, request: HttpRequest, holder_id: str) -> HttpResponse:
        self.check_view(request)
        if not self.has_force_release_permission(request):
            raise PermissionDenied
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
        kind, raw = self.resolve(holder_id)
        detail_url = self.url("detail", holder_id)
        source = request.POST if request.method == "POST" else request.GET
        try:
            fence: Optional[int] = int(source.get("fence", ""))
        except ValueError:
            fence = None
        digest = source.get("hold", "")
        if request.method == "POST" and (fence is None or not digest):
            return HttpResponseBadRequest(
                "Name the hold to release: its fence and its digest, as the confirmation page's form does.\n",
                content_type="text/plain; charset=utf-8",
            )
        context = self.base_context(request, "Force release")
        try:
            listing = self.listing()
            holders = listing.holder(raw, kind)
        except RedisError as error:
            return self.unavailable(request, context, error)
        if fence is None and len(holders) == 1:
            fence = holders[0].fence
        target = next((h for h in holders if h.fence == fence and (not digest or h.digest == digest)),
                      None)
        if request.method == "POST":
            name = target.short_name if target else raw.decode("utf-8", "replace")
            try:
                # The fence is checked again by the script, atomically with the release.
                result = listing.force_release(raw, kind, expected_fence=fence) if target else None
            except RedisError as error:
                return self.unavailable(request, context, error)
            if target is not None and result is not None and result.released:
                follow = "it went to the next waiter" if result.handed_off else result.what_followed(target.waiters)
                messages.success(
                    request,
                    f"Released {_what(target, kind)} “{name}” (fence {result.fence}); the fence counter moved to "
                    f"{result.fence_after} and {follow}.",
                )
                log_releases(request, [(holder_id, f"{_what(target, kind)} “{name}”, fence {result.fence}")],
                             f"Force released: the fence counter moved to {result.fence_after} and {follow}.")
            else:
                messages.warning(
                    request, f"Nothing released: the hold of “{name}” with fence {fence} had already ended or changed."
                )
            return HttpResponseRedirect(self.url("changelist"))
        if target is None:
            messages.warning(request, "That hold has already ended or changed; nothing to release.")
            return HttpResponseRedirect(detail_url)
        context.update(
            {
                "holder": target,
                "holder_id": holder_id,
                "detail_url": detail_url,
                "changelist_url": self.url("changelist"),
                "title": f"Force release {_what(target, kind)} “{target.short_name}”?",
            }
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_redis_coord/holder/release_confirmation.html", context)


def _what(holder: Any, kind: str) -> str:
    """What a force release takes, for people: ``lock``, ``semaphore``, ``read hold of read-write lock``."""
    mode = getattr(holder, "mode", None)
    return f"{mode} hold of {KINDS[kind].lower()}" if mode else KINDS[kind].lower()
