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

The value is read with the other settings: ``coord_settings().ratelimit`` is its
:class:`RateLimitSettings` (:func:`ratelimit_from`), dropped with them whenever Django sends
``setting_changed`` for ``DJANGO_REDIS_COORD`` (``override_settings`` works).
:func:`ratelimit_problems` reports what is wrong with the value (system checks E021 and E022,
through :func:`~django_redis_coord.config.validation.settings_problems`); it never connects.

A rate string always has a ``/`` and a rate's name never has one: that is how the two are told
apart (:func:`is_rate_string`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ..core.exceptions import InvalidLockArgument
from ..core.ratelimit import parse_rate
from ..core.ratelimit.rules import UNITS_TEXT
from . import check_ids as ids
from .defaults import SETTING_NAME, Problem, unknown_key_problems

__all__ = ["RATELIMIT_DEFAULTS", "ON_UNAVAILABLE", "RateLimitSettings", "ratelimit_from", "ratelimit_problems",
           "NamedRate", "is_rate_string", "check_burst", "rate_problem"]

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


def ratelimit_from(value: Optional[Mapping[str, Any]]) -> RateLimitSettings:
    """The :class:`RateLimitSettings` of a ``RATELIMIT`` value :func:`ratelimit_problems` found
    nothing wrong with (``None``: the defaults)."""
    values = {**RATELIMIT_DEFAULTS, **(value or {})}
    return RateLimitSettings(
        enabled=values["ENABLED"],
        default_rate=None if values["DEFAULT_RATE"] is None else _named(values["DEFAULT_RATE"]),
        rates={name: _named(rate) for name, rate in values["RATES"].items()},
        on_unavailable=values["ON_UNAVAILABLE"],
        status=values["STATUS"],
    )


def is_rate_string(value: object) -> bool:
    """Whether ``value`` is written as a rate (it has a ``/``), not as the name of one."""
    return isinstance(value, str) and "/" in value


def check_burst(burst: object, key: Any) -> None:
    """A burst is ``None`` (the rate's count) or a positive int, else :class:`InvalidLockArgument`."""
    if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 1):
        raise InvalidLockArgument(f"burst must be a positive int, not {burst!r}", lock_name=key)


def rate_problem(where: str, rate: object, burst: object) -> Optional[Problem]:
    """What is wrong with a rate of the settings (``where``: its place), else ``None``."""
    hint = (f'A rate is "<count>/<period>", e.g. "100/m", "10/s" or "5/30s" (units {UNITS_TEXT}); '
            "burst a positive int.")
    if not isinstance(rate, str):
        return Problem(ids.BAD_RATE, f"{where} must be a rate string, not {rate!r}.", hint)
    try:
        parse_rate(rate)
        check_burst(burst, where)
    except InvalidLockArgument as exc:
        return Problem(ids.BAD_RATE, f"{where} is not a usable rate: {exc}", hint)
    return None


def _rate_problem(where: str, value: object) -> Optional[Problem]:
    """A rate of the settings: a rate string (``"100/m"``) or ``{"rate": ..., "burst": ...}``."""
    if isinstance(value, Mapping):
        unknown = sorted(set(map(str, value)) - {"rate", "burst"})
        if unknown or "rate" not in value:
            return Problem(ids.BAD_RATE, f"{where} must be a rate string or a dict with 'rate' (and "
                           f"'burst'), not {value!r}.", 'For example "100/m" or {"rate": "100/m", "burst": 20}.')
        return rate_problem(where, value["rate"], value.get("burst"))
    return rate_problem(where, value, None)


def ratelimit_problems(value: object) -> list[Problem]:
    """Everything wrong with ``RATELIMIT`` (``None``: not set, nothing wrong); ``[]`` when fine."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [Problem(ids.BAD_RATELIMIT, f"{_PATH} must be a dict, not {type(value).__name__}.", _EXAMPLE)]
    problems = unknown_key_problems(ids.BAD_RATELIMIT, _PATH, value, RATELIMIT_DEFAULTS)
    enabled = value.get("ENABLED", True)
    if not isinstance(enabled, bool):
        problems.append(Problem(ids.BAD_RATELIMIT, f"{_PATH}['ENABLED'] must be True or False, not "
                                f"{enabled!r}.", "False admits every call without asking Redis (a kill switch)."))
    on_unavailable = value.get("ON_UNAVAILABLE", "deny")
    if on_unavailable not in ON_UNAVAILABLE:
        problems.append(Problem(ids.BAD_RATELIMIT, f"{_PATH}['ON_UNAVAILABLE'] must be 'allow' or 'deny', "
                                f"not {on_unavailable!r}.", "'deny': a view answers 503 while Redis cannot be "
                                "reached; 'allow': the call runs unlimited (logged)."))
    status = value.get("STATUS", 429)
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        problems.append(Problem(ids.BAD_RATELIMIT, f"{_PATH}['STATUS'] must be an HTTP error status "
                                f"(400-599), not {status!r}.", "429 (Too Many Requests) is the usual one."))
    default = value.get("DEFAULT_RATE")
    if default is not None:
        problem = _rate_problem(f"{_PATH}['DEFAULT_RATE']", default)
        if problem:
            problems.append(problem)
    rates = value.get("RATES", {})
    if not isinstance(rates, Mapping):
        problems.append(Problem(ids.BAD_RATE, f"{_PATH}['RATES'] must be a dict of named rates.",
                                _EXAMPLE))
        return problems
    for name, rate in rates.items():
        if not isinstance(name, str) or not name or is_rate_string(name):
            problems.append(Problem(ids.BAD_RATE, f"{_PATH}['RATES'] has the name {name!r}, which "
                                    "reads as a rate: @rate_limited(rate=...) could not tell them apart.",
                                    'Name rates with words, e.g. "api" or "login".'))
            continue
        problem = _rate_problem(f"{_PATH}['RATES'][{name!r}]", rate)
        if problem:
            problems.append(problem)
    return problems
