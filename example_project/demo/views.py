"""The demo views: one per feature a Django site reaches for.

* ``report`` — ``@locked`` per report name: a second request for the same report while it is
  being built gets 409 Conflict (with ``Retry-After``); the build writes its row with
  ``fenced_update`` so a stale builder can never overwrite a newer one.
* ``export`` — ``@locked(limit=2)``: at most two CSV exports at a time (a semaphore).
* ``async_status`` — ``@locked`` on an ``async def`` view.
* ``fencing`` — a holder paused past its TTL tries to write after the next holder: refused.
* ``hold_a_minute`` — a lock left held for a minute, to explore its admin page and force release.
* ``limited`` — ``@rate_limited("ip")``: a page each client may open 5 times at once, then once
  every 6 seconds; it shows its own decision (limit, remaining, reset), and the 6th quick click
  gets 429 with ``Retry-After``.
* ``api_quote`` — ``@rate_limited("api:{client_ip}")`` on a JSON endpoint: 3 calls at once, then
  one every 2 seconds; a client reads the ``RateLimit-Policy`` / ``RateLimit`` fields of each answer.
"""

from __future__ import annotations

import asyncio
import csv
import io
import shlex
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db.models import F
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from django_redis_coord import fenced_update, lock, locked, parse_rate, rate_limited
from django_redis_coord.decorators import current_lock
from django_redis_coord.listing import holder_id
from django_redis_coord.ratelimited import current_reply

from .management.commands.contend import SEMAPHORE
from .models import Report

MAX_SECONDS = 30.0


def seconds_from(request: HttpRequest, default: float) -> float:
    """How long the demo work lasts: ``?seconds=`` (bounded), so holders stay visible for a while."""
    try:
        return max(0.0, min(MAX_SECONDS, float(request.GET.get("seconds", default))))
    except ValueError:
        return default


#: The report the landing page asks to open in two tabs: no ``manage.py contend`` worker takes it
#: (they take ``demo.management.commands.contend.JOBS``), so the first tab always gets the lock.
TWO_TABS_REPORT = "monthly"
#: The lock the landing page's "hold a lock for a minute" link takes, and for how long (seconds).
HELD_A_MINUTE = ("maintenance:nightly-backup", 60)


def manage_command() -> str:
    """``manage.py`` of this demo, runnable from any directory without activating ``.venv``: the
    demo's Python by its full path, the demo's Redis in the environment."""
    manage = Path(settings.BASE_DIR) / "manage.py"
    return f"DEMO_REDIS_URL={shlex.quote(settings.REDIS_URL)} {shlex.quote(sys.executable)} {shlex.quote(str(manage))}"


#: The rate limits of the demo's rate-limited page and JSON endpoint: (rate, burst).
PAGE_RATE = ("10/m", 5)
API_RATE = ("30/m", 3)
QUOTES = [
    "A lock without a fence is a suggestion.",
    "Deadlines come from the server's clock.",
    "At most so many, exactly, on every machine.",
]


def rate_limit_urls() -> dict[str, str]:
    """Where the landing page and the rate-limited page point an operator at the live limits."""
    page, api = parse_rate(PAGE_RATE[0]), parse_rate(API_RATE[0])
    return {"ratelimits_url": reverse("admin:django_redis_coord_holder_ratelimits"),
            "page_rate": PAGE_RATE[0], "page_burst": PAGE_RATE[1], "page_interval": page.period / page.count,
            "api_rate": API_RATE[0], "api_burst": API_RATE[1], "api_interval": api.period / api.count}


def index(request: HttpRequest) -> HttpResponse:
    return render(request, "demo/index.html", {
        **rate_limit_urls(),
        "reports": Report.objects.order_by("name"),
        "holders_url": reverse("admin:django_redis_coord_holder_changelist"),
        "contention_url": reverse("admin:django_redis_coord_holder_contention"),
        "manage": manage_command(),
        "two_tabs_report": TWO_TABS_REPORT,
        "held_a_minute": HELD_A_MINUTE[0],
        "held_seconds": HELD_A_MINUTE[1],
        "worker_semaphore": SEMAPHORE[0],
    })


@locked("report:{name}", timeout=30, label="build report")
def report(request: HttpRequest, name: str) -> HttpResponse:
    """Build one report: exclusive per name, the row written only under a current fence."""
    fence = current_lock().fence
    Report.objects.get_or_create(name=name)
    time.sleep(seconds_from(request, 3.0))  # the slow part: queries, rendering, ...
    body = f"Report {name} built at {timezone.now():%H:%M:%S} under fence {fence}."
    written = fenced_update(
        Report.objects.filter(name=name), fence, body=body, builds=F("builds") + 1, built_at=timezone.now()
    )
    return render(request, "demo/report.html", {"name": name, "fence": fence, "written": written, "body": body})


@locked("export", limit=2, timeout=30, label="csv export")
def export(request: HttpRequest) -> HttpResponse:
    """A CSV export: at most two run at once, the third caller gets 409 until a permit frees."""
    time.sleep(seconds_from(request, 5.0))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["name", "builds", "fence", "built_at"])
    for row in Report.objects.order_by("name").values_list("name", "builds", "fence", "built_at"):
        writer.writerow(row)
    response = HttpResponse(out.getvalue(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="reports.csv"'
    return response


@locked("async:{name}", timeout=30, label="async status")
async def async_status(request: HttpRequest, name: str) -> JsonResponse:
    """An ``async def`` view under ``@locked``: the Redis calls run on the event loop."""
    held = current_lock()
    await asyncio.sleep(seconds_from(request, 2.0))
    return JsonResponse({"name": name, "fence": held.fence, "lock": held.name})


def hold_a_minute(request: HttpRequest) -> HttpResponse:
    """Take a lock and leave it held until its TTL runs out (a minute, no renewal), then show its
    page in the admin: its holder, its waiters, and the force release.  A second click while it
    is held shows the same hold."""
    name, seconds = HELD_A_MINUTE
    held = lock(name, timeout=seconds, auto_renew=False, label="held for a minute from the demo's landing page")
    held.acquire(blocking=False)
    return redirect("admin:django_redis_coord_holder_detail", holder_id("lock", held.name.encode()))


@require_http_methods(["GET", "POST"])
def fencing(request: HttpRequest) -> HttpResponse:
    """Show why fences matter: a holder paused past its TTL writes after the next holder did."""
    if request.method == "GET":
        return render(request, "demo/fencing.html", {"report": Report.objects.filter(name="fencing-demo").first()})
    Report.objects.get_or_create(name="fencing-demo")
    rows = Report.objects.filter(name="fencing-demo")
    steps = []
    first = lock("fencing-demo", timeout=1, label="paused holder")
    first.acquire()
    stale_fence = first.fence
    steps.append(f"Holder A acquired the lock with fence {stale_fence} (TTL 1 s), then paused (GC, swap, ...).")
    time.sleep(1.2)
    steps.append("A's TTL ran out while it was paused.")
    second = lock("fencing-demo", timeout=10, label="next holder")
    second.acquire()
    steps.append(f"Holder B acquired the lock with fence {second.fence}.")
    ok = fenced_update(rows, second.fence, body=f"written by B (fence {second.fence})", builds=F("builds") + 1)
    steps.append(f"B wrote the row: {'accepted' if ok else 'refused'}.")
    stale = fenced_update(rows, stale_fence, body=f"written by A (fence {stale_fence})", builds=F("builds") + 1)
    steps.append(f"A woke up and wrote what it computed before the pause: {'accepted' if stale else 'refused'}.")
    second.release()
    return render(request, "demo/fencing.html", {"steps": steps, "report": rows.first(), "stale_refused": not stale})


@rate_limited("ip", rate=PAGE_RATE[0], burst=PAGE_RATE[1], policy="page")
def limited(request: HttpRequest) -> HttpResponse:
    """A page each client address may open ``PAGE_RATE`` times: it shows the decision that let it in
    (``current_reply``), the same numbers its ``RateLimit-Policy`` / ``RateLimit`` fields carry."""
    reply = current_reply(request)
    return render(request, "demo/limited.html", {**rate_limit_urls(), "reply": reply})


@rate_limited("api:{client_ip}", rate=API_RATE[0], burst=API_RATE[1], policy="api")
def api_quote(request: HttpRequest) -> JsonResponse:
    """A JSON endpoint: ``API_RATE`` calls per client address; a refused call is a 429 with
    ``Retry-After`` (plain text), every answer carries the ``RateLimit`` fields."""
    reply = current_reply(request)  # None only when RATELIMIT["ENABLED"] is False
    return JsonResponse({
        "quote": QUOTES[int(time.time()) % len(QUOTES)],
        "rate_limit": reply and {"limit": reply.limit, "remaining": reply.remaining,
                                 "reset_after": round(reply.reset_after, 3)},
    })
