"""``/metrics``: the Prometheus exposition of ``prometheus_client.REGISTRY`` as a Django view.

Include :mod:`django_redis_coord.metrics.urls` (or route :func:`metrics` yourself, behind the
access control you want): it serves what ``METRICS = ["prometheus"]`` registers, with every
other metric of the same registry, in the format the scraper asks for (Prometheus text, or
OpenMetrics when its ``Accept`` header says so).  Nothing is read from Redis but the live-holder
gauges, collected at each scrape.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

try:
    from prometheus_client import REGISTRY
    from prometheus_client.exposition import choose_encoder
except ImportError as missing:  # found when the URLconf is loaded, not at the first scrape
    raise ImproperlyConfigured(
        "django_redis_coord.metrics.views serves prometheus_client's registry, which is not installed: "
        "pip install 'django-redis-coord[prometheus]'"
    ) from missing

__all__ = ["metrics"]


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The registry's metrics, as ``prometheus_client``'s own HTTP server would answer."""
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(REGISTRY), content_type=content_type)
