"""``DJANGO_REDIS_COORD["RATELIMIT"]``: the settings of ``@rate_limited``, read when a call needs them.

Example::

    DJANGO_REDIS_COORD = {
        "URL": "redis://127.0.0.1:6379/0",
        "RATELIMIT": {
            "ENABLED": True,                      # False: every call is admitted, Redis is not asked
            "DEFAULT_RATE": "100/m",              # @rate_limited(...) without rate=
            "RATES": {"api": "100/m", "login": {"rate": "5/m", "burst": 5}},   # rate="api"
            "ON_UNAVAILABLE": "deny",             # Redis unreachable: "deny" (503) or "allow"
            "STATUS": 429,                        # the status of a refusal
        },
    }

The value is read through :func:`ratelimit_settings`, cached per
:func:`~django_redis_coord.conf.coord_settings` object: that one is dropped whenever Django sends
``setting_changed`` for ``DJANGO_REDIS_COORD``, and so is this one (``override_settings`` works).
:func:`ratelimit_problems` reports what is wrong with the value (system checks E021-E023,
through :func:`~django_redis_coord.conf.settings_problems`); it never connects.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ..defaults import SETTING_NAME, Problem

__all__ = ["RATELIMIT_DEFAULTS", "ON_UNAVAILABLE", "RateLimitSettings", "ratelimit_settings", "ratelimit_problems",
           "NamedRate"]

#: What a decorator does when Redis cannot be reached: admit the call (logged) or refuse it (a
#: view's 503, an exception elsewhere).
ON_UNAVAILABLE = ("allow", "deny")

#: Every key of ``RATELIMIT`` with its default value.
RATELIMIT_DEFAULTS: Mapping[str, Any] = {
    "ENABLED": True,
    "DEFAULT_RATE": None,
    "RATES": {},
    "ON_UNAVAILABLE": "deny",
    "STATUS": 429,
}

_PATH = f"{SETTING_NAME}['RATELIMIT']"
_EXAMPLE = 'For example {"DEFAULT_RATE": "100/m", "RATES": {"api": "100/m", "login": {"rate": "5/m", "burst": 5}}}.'


@dataclass(frozen=True)
class NamedRate:
    """A rate of ``RATES`` (or ``DEFAULT_RATE``): the rate string and the burst (``None``: the
    rate's own default)."""

    rate: str
    burst: Optional[int] = None


@dataclass(frozen=True)
class RateLimitSettings:
    """The validated ``RATELIMIT`` with defaults filled in."""

    enabled: bool = True
    default_rate: Optional[NamedRate] = None
    rates: Mapping[str, NamedRate] = field(default_factory=dict)
    on_unavailable: str = "deny"
    status: int = 429


def _named(value: Union[str, Mapping[str, Any]]) -> NamedRate:
    if isinstance(value, str):
        return NamedRate(value)
    return NamedRate(value["rate"], value.get("burst"))


_lock = threading.Lock()
_cached: tuple[Any, Optional[RateLimitSettings]] = (None, None)


def ratelimit_settings() -> RateLimitSettings:
    """The settings in force (``ImproperlyConfigured`` listing the problems when they are bad)."""
    global _cached
    from django.conf import settings as django_settings

    from ..conf import coord_settings

    coord = coord_settings()  # raises ImproperlyConfigured for every problem, RATELIMIT's included
    cached_for, found = _cached
    if cached_for is coord and found is not None:
        return found
    raw = getattr(django_settings, SETTING_NAME, None) or {}
    values = {**RATELIMIT_DEFAULTS, **(raw.get("RATELIMIT") or {})}
    found = RateLimitSettings(
        enabled=values["ENABLED"],
        default_rate=None if values["DEFAULT_RATE"] is None else _named(values["DEFAULT_RATE"]),
        rates={name: _named(value) for name, value in values["RATES"].items()},
        on_unavailable=values["ON_UNAVAILABLE"],
        status=values["STATUS"],
    )
    with _lock:
        _cached = (coord, found)
    return found


def _rate_problem(where: str, value: object) -> Optional[Problem]:
    """A rate of the settings: a rate string (``"100/m"``) or ``{"rate": ..., "burst": ...}``."""
    from .rates import rate_problem

    if isinstance(value, Mapping):
        unknown = sorted(set(map(str, value)) - {"rate", "burst"})
        if unknown or "rate" not in value:
            return Problem("django_redis_coord.E022", f"{where} must be a rate string or a dict with 'rate' (and "
                           f"'burst'), not {value!r}.", 'For example "100/m" or {"rate": "100/m", "burst": 20}.')
        return rate_problem(where, value["rate"], value.get("burst"))
    return rate_problem(where, value, None)


def ratelimit_problems(value: object) -> list[Problem]:
    """Everything wrong with ``RATELIMIT`` (``None``: not set, nothing wrong); ``[]`` when fine."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [Problem("django_redis_coord.E021", f"{_PATH} must be a dict, not {type(value).__name__}.", _EXAMPLE)]
    problems = []
    for key in value:
        if key not in RATELIMIT_DEFAULTS:
            close = difflib.get_close_matches(str(key), list(RATELIMIT_DEFAULTS), n=1)
            problems.append(Problem("django_redis_coord.E021", f"{_PATH} has an unknown key {key!r}.",
                                    f"Did you mean {close[0]!r}?" if close else
                                    f"Known keys: {', '.join(RATELIMIT_DEFAULTS)}."))
    enabled = value.get("ENABLED", True)
    if not isinstance(enabled, bool):
        problems.append(Problem("django_redis_coord.E021", f"{_PATH}['ENABLED'] must be True or False, not "
                                f"{enabled!r}.", "False admits every call without asking Redis (a kill switch)."))
    on_unavailable = value.get("ON_UNAVAILABLE", "deny")
    if on_unavailable not in ON_UNAVAILABLE:
        problems.append(Problem("django_redis_coord.E021", f"{_PATH}['ON_UNAVAILABLE'] must be 'allow' or 'deny', "
                                f"not {on_unavailable!r}.", "'deny': a view answers 503 while Redis cannot be "
                                "reached; 'allow': the call runs unlimited (logged)."))
    status = value.get("STATUS", 429)
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        problems.append(Problem("django_redis_coord.E021", f"{_PATH}['STATUS'] must be an HTTP error status "
                                f"(400-599), not {status!r}.", "429 (Too Many Requests) is the usual one."))
    default = value.get("DEFAULT_RATE")
    if default is not None:
        problem = _rate_problem(f"{_PATH}['DEFAULT_RATE']", default)
        if problem:
            problems.append(problem)
    rates = value.get("RATES", {})
    if not isinstance(rates, Mapping):
        problems.append(Problem("django_redis_coord.E022", f"{_PATH}['RATES'] must be a dict of named rates.",
                                _EXAMPLE))
        return problems
    from .rates import is_rate_string

    for name, rate in rates.items():
        if not isinstance(name, str) or not name or is_rate_string(name):
            problems.append(Problem("django_redis_coord.E022", f"{_PATH}['RATES'] has the name {name!r}, which "
                                    "reads as a rate: @rate_limited(rate=...) could not tell them apart.",
                                    'Name rates with words, e.g. "api" or "login".'))
            continue
        problem = _rate_problem(f"{_PATH}['RATES'][{name!r}]", rate)
        if problem:
            problems.append(problem)
    return problems
