"""``DJANGO_REDIS_COORD["METRICS"]``: the exporters a Django site turns on, and what is wrong with
the value (system checks E019 and E020, through :func:`~django_redis_coord.conf.settings_problems`).
Imports nothing heavy: the exporters' packages are only looked for."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Sequence

from . import check_ids as ids
from .defaults import SETTING_NAME, Problem

__all__ = ["EXPORTERS", "metrics_problems"]

#: What ``METRICS`` may list, with the package each needs and the extra that installs it.
EXPORTERS: dict[str, tuple[str, str]] = {
    "prometheus": ("prometheus_client", "prometheus"),
    "otel": ("opentelemetry.metrics", "otel"),
    "history": ("", ""),
}

_EXAMPLE = 'For example ["prometheus", "history"]; the choices: ' + ", ".join(repr(name) for name in EXPORTERS) + "."


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def metrics_problems(value: object) -> list[Problem]:
    """Everything wrong with ``METRICS`` (a list of :data:`EXPORTERS` names); ``[]`` when fine."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return [Problem(ids.BAD_METRICS, f"{SETTING_NAME}['METRICS'] must be a list of exporter names, "
                        f"not {value!r}.", _EXAMPLE)]
    problems = []
    for name in value:
        if name not in EXPORTERS:
            close = difflib.get_close_matches(str(name), list(EXPORTERS), n=1)
            problems.append(Problem(
                ids.BAD_METRICS, f"{SETTING_NAME}['METRICS'] names an unknown exporter {name!r}.",
                f"Did you mean {close[0]!r}?" if close else _EXAMPLE))
            continue
        module, extra = EXPORTERS[name]
        if module and not _importable(module):
            problems.append(Problem(
                ids.METRICS_PACKAGE_MISSING,
                f"{SETTING_NAME}['METRICS'] lists {name!r}, but {module.split('.')[0]} cannot be imported.",
                f'pip install "django-redis-coord[{extra}]", or take {name!r} out of METRICS.'))
    if len(set(map(str, value))) != len(value):
        problems.append(Problem(ids.BAD_METRICS, f"{SETTING_NAME}['METRICS'] lists an exporter twice.",
                                _EXAMPLE))
    return problems
