"""``DJANGO_REDIS_COORD["TRACING"]``: what is wrong with it (system checks E013 and E025, through
:func:`~django_redis_coord.conf.settings_problems`), and the switch it drives: the core's
:func:`~django_redis_coord.core.tracing.enable`, set when the app is ready and whenever the setting
changes (``override_settings`` included).  Imports nothing heavy: ``opentelemetry`` is only looked for."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from ..core import tracing
from . import check_ids as ids
from .defaults import SETTING_NAME, Problem, bool_problem

__all__ = ["apply_tracing", "tracing_problems"]

logger = logging.getLogger("django_redis_coord")

#: The module tracing needs.
TRACING_MODULE = "opentelemetry.trace"


def _importable() -> bool:
    try:
        importlib.import_module(TRACING_MODULE)
    except ImportError:
        return False
    return True


def tracing_problems(value: object) -> list[Problem]:
    """What is wrong with ``TRACING``: not a bool (E013), or on without the package it needs (E025)."""
    problem = bool_problem("TRACING", value)
    if problem:
        return [problem]
    if value is True and not _importable():
        return [Problem(ids.TRACING_PACKAGE_MISSING,
                        f"{SETTING_NAME}['TRACING'] is True, but opentelemetry cannot be imported.",
                        'pip install "django-redis-coord[otel]", or set TRACING to False.')]
    return []


def apply_tracing() -> None:
    """Turn the core's tracing on or off as ``TRACING`` says (off when the settings are invalid:
    the system checks say why)."""
    from django.conf import settings

    raw = getattr(settings, SETTING_NAME, None)
    wanted = isinstance(raw, dict) and raw.get("TRACING") is True
    if wanted and _importable():
        tracing.enable()
        return
    if wanted:  # E025 says it at start-up
        logger.error("%s['TRACING'] is True, but opentelemetry cannot be imported: not tracing", SETTING_NAME)
    tracing.disable()


@receiver(setting_changed, dispatch_uid="django_redis_coord.tracing")
def on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: ``TRACING`` may have changed."""
    if setting == SETTING_NAME:
        apply_tracing()
