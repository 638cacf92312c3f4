"""``path("", include("django_redis_coord.metrics.urls"))`` serves ``/metrics`` (see :mod:`.views`)."""

from __future__ import annotations

from django.urls import path

from .views import metrics

urlpatterns = [path("metrics", metrics, name="django_redis_coord_metrics")]
