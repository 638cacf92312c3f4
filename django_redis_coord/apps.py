"""Django app configuration (never connects to Redis at start-up)."""

from __future__ import annotations

from django.apps import AppConfig


class DjangoRedisCoordConfig(AppConfig):
    name = "django_redis_coord"
    label = "django_redis_coord"
    verbose_name = "Redis coordination"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from django.core.signals import setting_changed

        from . import checks  # noqa: F401  (registers the system checks)
        from .conf import on_setting_changed

        # Cached settings and the clients built from them follow override_settings.
        setting_changed.connect(on_setting_changed, dispatch_uid="django_redis_coord.conf")
