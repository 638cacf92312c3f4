"""Django app configuration (never connects to Redis at start-up)."""

from __future__ import annotations

from django.apps import AppConfig


class DjangoRedisCoordConfig(AppConfig):
    name = "django_redis_coord"
    label = "django_redis_coord"
    verbose_name = "Redis coordination"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .config import settings  # noqa: F401  (its setting_changed receiver: the settings follow override_settings)
        from .config.metrics import install
        from .config.tracing_options import apply_tracing  # also its setting_changed receiver

        if not checks.check_settings():  # an invalid setting: its system-check errors say it, alone
            install()  # the exporters of DJANGO_REDIS_COORD["METRICS"], if any (no connection)
            apply_tracing()  # DJANGO_REDIS_COORD["TRACING"]: the spans of the waits
