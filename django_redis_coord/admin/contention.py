"""The admin's contention page: per key template, the waits' and holds' 50th and 99th percentiles
and the contentions (and losses) of each of the last minutes, drawn on the server as inline SVG.

It reads the history that ``"history"`` in ``DJANGO_REDIS_COORD["METRICS"]`` keeps in Redis (see
:mod:`django_redis_coord.metrics.history`): one pipeline of one HGETALL per minute.  Each
percentile is the nearest-rank one of the durations recorded, within 2 % of one of them
(:mod:`django_redis_coord.metrics.log_buckets`); the page says so.  It sits behind the holders
page's ``admin_view`` and ``view_holder`` permission, at
``reverse("admin:django_redis_coord_holder_contention")``, listed on the admin index
(:mod:`django_redis_coord.admin.pages`) and linked from the list of holders.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.safestring import mark_safe
from redis.exceptions import RedisError

from ..config.connection import get_client
from ..config.settings import coord_settings
from ..metrics.history import RETENTION_SECONDS
from ..metrics.history_reading import TemplateHistory, read_history
from ..metrics.log_buckets import MIN_SECONDS, RELATIVE_ERROR
from .svg_charts import Line, bar_chart, format_seconds, line_chart

__all__ = ["contention_view_for", "WINDOWS", "SHOWN"]

#: The spans the page offers (minutes); the first is the default.
WINDOWS = (60, 15)
#: Templates drawn at most (the ones with the most contentions, then acquisitions).
SHOWN = 30

_P50, _P99 = "var(--secondary, #417690)", "var(--error-fg, #ba2121)"


def _percentile(history: TemplateHistory, histograms: str, q: float) -> dict[str, Any]:
    """A percentile over the window, for people (``text``) and for machines (``seconds``, ``None``
    when nothing was recorded)."""
    value = history.overall(histograms, q)
    return {"text": "–" if value is None else format_seconds(value), "seconds": value}


def _charts(history: TemplateHistory, minutes: int) -> dict[str, Any]:
    return {
        "template": history.template,
        "acquisitions": history.total("acquisitions"),
        "contentions": history.total("contentions"),
        "losses": history.total("losses"),
        "holds": history.count("holds"),
        "wait_p50": _percentile(history, "waits", 0.5),
        "wait_p99": _percentile(history, "waits", 0.99),
        "hold_p50": _percentile(history, "holds", 0.5),
        "hold_p99": _percentile(history, "holds", 0.99),
        "waits_svg": mark_safe(line_chart("Wait to acquire", [  # noqa: S308 (escaped by svg_charts)
            Line("p50", history.wait_p50, _P50), Line("p99", history.wait_p99, _P99, dashed=True)], minutes)),
        "holds_svg": mark_safe(line_chart("Hold", [  # noqa: S308
            Line("p50", history.hold_p50, _P50), Line("p99", history.hold_p99, _P99, dashed=True)], minutes)),
        "contentions_svg": mark_safe(bar_chart(  # noqa: S308
            "Contentions / min", history.contentions, minutes, colour="var(--primary, #79aec8)",
            unit="contentions", marks=history.losses, marks_unit="losses")),
    }


def contention_view_for(model_admin: Any) -> Callable[[HttpRequest], HttpResponse]:
    """The page's view, on the holders' ``ModelAdmin`` (its permission, context and error page)."""

    def contention_view(request: HttpRequest) -> HttpResponse:
        model_admin.check_view(request)
        try:
            minutes = int(request.GET.get("minutes", WINDOWS[0]))
        except ValueError:
            minutes = WINDOWS[0]
        if minutes not in WINDOWS:
            minutes = WINDOWS[0]
        context = model_admin.base_context(request, "Contention by key template")
        settings = coord_settings()
        try:
            histories = read_history(get_client(), settings.key_prefix, minutes=minutes)
        except RedisError as error:
            return model_admin.unavailable(request, context, error)
        context.update({
            "recording": "history" in settings.metrics,
            "minutes": minutes,
            "windows": [{"minutes": m, "current": m == minutes, "link": f"?minutes={m}"} for m in WINDOWS],
            "templates": [_charts(history, minutes) for history in histories[:SHOWN]],
            "not_shown": max(0, len(histories) - SHOWN),
            "retention_minutes": int(RETENTION_SECONDS // 60),
            "relative_error_percent": f"{RELATIVE_ERROR * 100:g}",
            "min_ms": f"{MIN_SECONDS * 1000:g}",
            "changelist_url": model_admin.url("changelist"),
        })
        request.current_app = model_admin.admin_site.name
        return TemplateResponse(request, "admin/django_redis_coord/contention/page.html", context)

    return contention_view
