"""Everything wrong with ``DJANGO_REDIS_COORD``, as :class:`~django_redis_coord.config.defaults.Problem`
s with system-check ids and hints: :func:`settings_problems` (never connects, never raises), shared
by the system checks and :func:`~django_redis_coord.conf.coord_settings`.

Each section of the setting has its validator, in the order docs/django.md lists them: the
connection and ``CLIENT_OPTIONS`` (:mod:`.connection_options`), ``KEY_PREFIX``, how long a hold
lasts and ``@locked``'s answers (:mod:`.lock_options`), ``REDLOCK`` (:mod:`.redlock_options`),
``METRICS`` (:mod:`.metrics_options`), ``TRACING`` (:mod:`.tracing_options`), ``RATELIMIT``
(:mod:`.ratelimit_options`) and ``CLIENT_IP`` (:mod:`.client_ip_options`).  Every id is one of
:mod:`.check_ids`, each meaning one kind of problem."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from . import check_ids as ids
from .client_ip_options import client_ip_problems
from .connection_options import client_options_problems, connection_problems
from .defaults import DEFAULTS, SETTING_NAME, Problem, unknown_key_problems
from .lock_options import key_prefix_problems, locked_answer_problems, timeout_problems
from .metrics_options import metrics_problems
from .ratelimit_options import ratelimit_problems
from .redlock_options import redlock_problems
from .tracing_options import tracing_problems

__all__ = ["settings_problems"]


def settings_problems(raw: object, caches: Optional[Mapping[str, Any]] = None) -> list[Problem]:
    """Everything wrong with the value of ``DJANGO_REDIS_COORD`` (never connects, never raises).

    ``caches`` is the ``CACHES`` setting (read from Django's settings when omitted).
    """
    if caches is None:
        from django.conf import settings

        caches = getattr(settings, "CACHES", {}) or {}
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return [Problem(ids.SETTING_NOT_A_DICT, f"{SETTING_NAME} must be a dict, not {type(raw).__name__}.",
                        'For example: DJANGO_REDIS_COORD = {"URL": "redis://127.0.0.1:6379/0"}.')]
    values = {**DEFAULTS, **{k: v for k, v in raw.items() if k in DEFAULTS}}
    return [
        *_unknown_key_problems(raw),
        *connection_problems(values, caches),
        *client_options_problems(values),
        *key_prefix_problems(values["KEY_PREFIX"]),
        *timeout_problems(values),
        *locked_answer_problems(values),
        *redlock_problems(values["REDLOCK"]),
        *metrics_problems(values["METRICS"]),
        *tracing_problems(values["TRACING"]),
        *ratelimit_problems(values["RATELIMIT"]),
        *client_ip_problems(values["CLIENT_IP"]),
    ]


def _unknown_key_problems(raw: Mapping[Any, Any]) -> list[Problem]:
    return unknown_key_problems(ids.UNKNOWN_KEY, SETTING_NAME, raw, DEFAULTS)
