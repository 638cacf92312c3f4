"""The admin's bulk force release: every hold chosen by filters (host, pid, label prefix, age), as
``manage.py locks release --host ... --yes`` does.

``reverse("admin:django_redis_coord_holder_bulk_release")`` needs the view and force-release
permissions (the single *Release…* button's).  A GET never changes anything: with filters it is
the confirmation page, listing what matches (at most :data:`BULK_LIMIT` holds) with a form.  Only
that form's POST (with the CSRF token) releases, and only the holds it names, each by its id, fence
and token digest as the page showed them: a hold that ended or changed since is left alone.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from redis.exceptions import RedisError

from ..core.exceptions import InvalidLockArgument
from ..core.holders import KINDS, HolderInfo, parse_holder_id
from ..core.keys import encode_name
from ..core.listing import HolderListing, HoldSelection, RegistryEntry
from .audit import log_releases

__all__ = ["BulkReleaseViews", "BULK_LIMIT", "FILTERS"]

#: The most holds one bulk release lists and takes (the rest: release these, then again).
BULK_LIMIT = 200
#: The filters of the form, as query parameters (those of :meth:`HoldSelection.parse`).
FILTERS = ("host", "pid", "label_prefix", "older_than", "kind")
#: One confirmed hold in the POST: ``<primitive id> <fence> <token digest>``.
_HOLD = re.compile(r"([A-Za-z0-9_-]{1,90000}) ([0-9]{1,20}) ([0-9a-f]{32})")


def _bad_request(message: str) -> HttpResponse:
    return HttpResponseBadRequest(message + "\n", content_type="text/plain; charset=utf-8")


class BulkReleaseViews:
    """Mixed into :class:`~django_redis_coord.admin.HolderAdmin`."""

    # Provided by HolderAdmin.
    def check_view(self, request: HttpRequest) -> None:
        raise NotImplementedError

    def has_force_release_permission(self, request: HttpRequest) -> bool:
        raise NotImplementedError

    def listing(self) -> HolderListing:
        raise NotImplementedError

    def base_context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        raise NotImplementedError

    def unavailable(self, request: HttpRequest, context: dict[str, Any], error: Exception) -> TemplateResponse:
        raise NotImplementedError

    def url(self, name: str, *args: Any) -> str:
        raise NotImplementedError

    admin_site: Any

    # -- the filters and the confirmation page ---------------------------------------------------
    def bulk_release_view(self, request: HttpRequest) -> HttpResponse:
        self.check_view(request)
        if not self.has_force_release_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self.bulk_release(request)
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
        values = {name: request.GET.get(name, "") for name in FILTERS}
        context = self.base_context(request, "Force release by filter")
        context.update({"filters": values, "kinds": KINDS, "changelist_url": self.url("changelist"),
                        "limit": BULK_LIMIT})
        status = 200
        if any(values.values()):
            try:
                selection = HoldSelection.parse(**values)
                if not selection.filters_holders:
                    raise InvalidLockArgument("choose holds by host, pid, label prefix or age")
            except InvalidLockArgument as error:
                context["error"] = str(error)
                status = 400
            else:
                try:
                    holders = self.listing().select(selection)
                except RedisError as error:
                    return self.unavailable(request, context, error)
                context.update({"holders": holders[:BULK_LIMIT], "matched": len(holders),
                                "more": max(0, len(holders) - BULK_LIMIT), "selection": selection.describe()})
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_redis_coord/holder/bulk_release.html", context, status=status)

    # -- the release --------------------------------------------------------------------------
    def bulk_release(self, request: HttpRequest) -> HttpResponse:
        named = request.POST.getlist("hold")
        if not named:
            return _bad_request("Name the holds to release, as the confirmation page's form does.")
        if len(named) > BULK_LIMIT:
            return _bad_request(f"At most {BULK_LIMIT} holds at a time.")
        listing = self.listing()
        confirmed: dict[tuple[str, bytes, int], str] = {}
        for value in named:
            match = _HOLD.fullmatch(value)
            if match is None:
                return _bad_request("Each hold is named by its id, fence and digest, as the confirmation page's "
                                    "form does.")
            try:
                kind, raw = parse_holder_id(match.group(1))
                encode_name(raw)
            except InvalidLockArgument:
                return _bad_request("Not a holder id.")
            if not raw.startswith(listing.prefix):
                return _bad_request("That hold is not under this site's KEY_PREFIX.")
            confirmed[(kind, raw, int(match.group(2)))] = match.group(3)
        entries = [RegistryEntry(kind=kind, raw_name=raw, expires_at_ms=None, server_now_ms=0)
                   for kind, raw in dict.fromkeys((kind, raw) for kind, raw, _ in confirmed)]
        try:
            current = listing.details(entries)
            targets = [holder for holder in current
                       if confirmed.get((holder.kind, holder.raw_name, holder.fence)) == holder.digest]
            # Each fence is checked again by its script, atomically with its release.
            results = listing.force_release_holds(targets)
        except RedisError as error:
            return self.unavailable(request, self.base_context(request, "Force release by filter"), error)
        released = [holder for holder, result in results if result.released]
        log_releases(request, [(holder.primitive_id, f"{_what(holder)} “{holder.short_name}”, fence {holder.fence}")
                               for holder in released],
                     f"Force released by filter ({len(released)} of {len(confirmed)} confirmed holds); each fence "
                     "counter moved past its hold.")
        if released:
            messages.success(request, f"Released {len(released)} hold{'s' if len(released) != 1 else ''}: "
                                      f"{_names(released)}; each fence counter moved past it.")
        left = len(confirmed) - len(released)
        if left:
            messages.warning(request, f"{left} hold{'s' if left != 1 else ''} had already ended or changed: "
                                      "left alone.")
        return HttpResponseRedirect(self.url("changelist"))


def _what(holder: HolderInfo) -> str:
    return f"{holder.mode} hold of {KINDS[holder.kind].lower()}" if holder.mode else KINDS[holder.kind].lower()


def _names(holders: list[HolderInfo], shown: int = 10) -> str:
    names = ", ".join(f"“{holder.short_name}”" for holder in holders[:shown])
    return names + (f" and {len(holders) - shown} more" if len(holders) > shown else "")
