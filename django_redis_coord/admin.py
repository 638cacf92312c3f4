"""The admin page of live lock and semaphore holders (read from Redis, never from the database).

Registered for the unmanaged :class:`~django_redis_coord.models.Holder` placeholder, it replaces
the usual admin views with three of its own, all behind ``admin_site.admin_view`` (login, staff,
CSRF, no caching):

* the list — ``reverse("admin:django_redis_coord_holder_changelist")`` — search box, kind filter,
  pagination, remaining TTL, semaphore usage, auto-refresh; needs the ``view_holder`` permission;
* a detail page per holder (metadata, fence, waiters), same permission;
* a force-release confirmation page, which needs ``force_release_holder`` as well; only its POST
  (with the CSRF token and the identity of the hold the operator confirmed: its fence and a digest
  of its token) changes anything.  A POST without both is a 400 and releases nothing; one whose
  hold has changed meanwhile releases nothing either.

Tokens are never sent to the browser, only their first characters and a digest (:func:`hold_digest`).
"""

from __future__ import annotations

import hashlib
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
from redis.exceptions import RedisError

from .conf import coord_settings
from .connection import describe_connection, get_client
from .exceptions import InvalidLockArgument
from .keys import encode_name
from .listing import KINDS, HolderListing, LiveHolder, format_ms, holder_id, parse_holder_id
from .models import Holder

FORCE_RELEASE_PERMISSION = "django_redis_coord.force_release_holder"


def hold_digest(token: bytes) -> str:
    """What the confirmation form carries to name one hold besides its fence: a digest of its
    token (which cannot be recovered from it), so a fence issued again (see docs/safety.md)
    cannot stand for another hold."""
    return hashlib.sha256(b"django_redis_coord hold:" + token).hexdigest()[:32]


class HolderView:
    """What a template shows of a :class:`LiveHolder` (never its token)."""

    def __init__(self, holder: LiveHolder, key_prefix: str) -> None:
        head = key_prefix + ":" if key_prefix else ""
        self.id = holder_id(holder.kind, holder.raw_name)  # the primitive's page (every permit of a semaphore)
        self.name = holder.name[len(head):] if head and holder.name.startswith(head) else holder.name
        self.key = holder.name
        self.kind = holder.kind
        self.kind_title = holder.kind_title
        self.fence = holder.fence
        self.ttl_ms = holder.ttl_ms
        self.ttl = format_ms(holder.ttl_ms)
        self.held_for = format_ms(holder.held_for_ms) if holder.held_for_ms is not None else "?"
        self.acquired_at = holder.acquired_at
        self.host = holder.host
        self.pid = holder.pid
        self.thread = holder.thread
        self.label = holder.label
        self.view = holder.view
        #: "label / view", either alone, or "" (one cell of the list).
        self.label_view = " / ".join(part for part in (holder.label, holder.view) if part)
        self.owner = holder.owner
        self.extra = sorted(holder.extra.items())
        self.waiters = holder.waiters
        self.usage = holder.usage
        self.used = holder.used
        self.limit = holder.limit
        self.masked_token = holder.masked_token
        self.digest = hold_digest(holder.token)


@admin.register(Holder)
class HolderAdmin(admin.ModelAdmin):
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
        prefix = coord_settings().key_prefix

        def link(**changes: Any) -> str:
            params = {"q": query, "kind": kind or "", "refresh": refresh if refresh != self.refresh_seconds else ""}
            params.update(changes)
            return "?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})

        context.update(
            {
                "holders": [HolderView(h, prefix) for h in holders],
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
        views = [HolderView(h, prefix) for h in holders]
        shown = raw.decode("utf-8", "replace")
        head = prefix + ":" if prefix else ""
        context.update(
            {
                "holder_id": holder_id,
                "kind": kind,
                "kind_title": KINDS[kind],
                "name": shown[len(head):] if head and shown.startswith(head) else shown,
                "key": shown,
                "holders": views,
                "usage": views[0].usage if views else None,
                "waiters": [{**w.as_dict(now_ms), "lease": format_ms(w.as_dict(now_ms)["lease_ms"])} for w in waiters],
                "changelist_url": self.url("changelist"),
            }
        )
        context["title"] = f"{KINDS[kind]} “{context['name']}”"
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "admin/django_redis_coord/holder/detail.html", context, status=200 if views else 404
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
        prefix = coord_settings().key_prefix
        try:
            listing = self.listing()
            holders = listing.holder(raw, kind)
        except RedisError as error:
            return self.unavailable(request, context, error)
        if fence is None and len(holders) == 1:
            fence = holders[0].fence
        target = next((h for h in holders if h.fence == fence and (not digest or hold_digest(h.token) == digest)),
                      None)
        if request.method == "POST":
            name = HolderView(target, prefix).name if target else raw.decode("utf-8", "replace")
            try:
                # The fence is checked again by the script, atomically with the release.
                result = listing.force_release(raw, kind, expected_fence=fence) if target else None
            except RedisError as error:
                return self.unavailable(request, context, error)
            if result is not None and result.released:
                follow = "it went to the next waiter" if result.handed_off else "nobody was waiting"
                messages.success(
                    request,
                    f"Released {KINDS[kind].lower()} “{name}” (fence {result.fence}); the fence counter moved to "
                    f"{result.fence_after} and {follow}.",
                )
            else:
                messages.warning(
                    request, f"Nothing released: the hold of “{name}” with fence {fence} had already ended or changed."
                )
            return HttpResponseRedirect(self.url("changelist"))
        if target is None:
            messages.warning(request, "That hold has already ended or changed; nothing to release.")
            return HttpResponseRedirect(detail_url)
        view = HolderView(target, prefix)
        context.update(
            {
                "holder": view,
                "holder_id": holder_id,
                "detail_url": detail_url,
                "changelist_url": self.url("changelist"),
                "title": f"Force release {KINDS[kind].lower()} “{view.name}”?",
            }
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_redis_coord/holder/release_confirmation.html", context)
