"""The rate of a ``@rate_limited``: a rate string given to the decorator (``"100/m"``, parsed when
decorating), or the name of one of ``RATELIMIT["RATES"]`` (looked up on each call, so that
operators change it in the settings), or ``RATELIMIT["DEFAULT_RATE"]`` when none is given.

A rate string always has a ``/`` and a rate's name never has one: that is how the two are told apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from django.core.exceptions import ImproperlyConfigured

from ..defaults import Problem
from ..exceptions import InvalidLockArgument, InvalidLockArgumentType
from ..ratelimit import Rate, parse_rate

__all__ = ["Policy", "is_rate_string", "rate_problem", "checked_rate", "resolved"]


@dataclass(frozen=True)
class Policy:
    """The rate and burst a call is limited by (``burst`` ``None``: the rate's count)."""

    rate: Rate
    burst: Optional[int] = None

    @property
    def capacity(self) -> int:
        """The most cost units admitted at once: the burst, else the rate's count."""
        return self.burst if self.burst is not None else self.rate.count


def is_rate_string(value: object) -> bool:
    """Whether ``value`` is written as a rate (it has a ``/``), not as the name of one."""
    return isinstance(value, str) and "/" in value


def _check_burst(burst: object, key: Any) -> None:
    if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 1):
        raise InvalidLockArgument(f"burst must be a positive int, not {burst!r}", lock_name=key)


def rate_problem(where: str, rate: object, burst: object) -> Optional[Problem]:
    """What is wrong with a rate of the settings (``where``: its place), else ``None``."""
    hint = 'A rate is "<count>/<period>", e.g. "100/m", "10/s" or "5/30s" (units s, m, h, d); burst a positive int.'
    if not isinstance(rate, str):
        return Problem("django_redis_coord.E022", f"{where} must be a rate string, not {rate!r}.", hint)
    try:
        parse_rate(rate)
        _check_burst(burst, where)
    except InvalidLockArgument as exc:
        return Problem("django_redis_coord.E022", f"{where} is not a usable rate: {exc}", hint)
    return None


def checked_rate(rate: Union[str, Rate, None], burst: Optional[int], key: Any) -> Union[Policy, str, None]:
    """When decorating: the :class:`Policy` of a rate given as such, else the rate's name (looked
    up on each call), else ``None`` (``DEFAULT_RATE``).  A malformed rate raises
    :class:`~django_redis_coord.exceptions.InvalidRate`."""
    _check_burst(burst, key)
    if isinstance(rate, Rate):
        return Policy(rate, burst)
    if rate is None or is_rate_string(rate):
        return None if rate is None else Policy(parse_rate(rate), burst)
    if not isinstance(rate, str) or not rate.strip():
        raise InvalidLockArgumentType(f"rate must be a rate string such as '100/m' or the name of a rate of "
                                      f"RATELIMIT['RATES'], not {rate!r}", lock_name=key)
    if burst is not None:
        raise InvalidLockArgument(f"rate={rate!r} names a rate of the settings: give its burst there "
                                  f'({{"rate": ..., "burst": {burst}}}), not to the decorator', lock_name=key)
    return rate


def resolved(spec: Union[Policy, str, None], settings: Any, key: Any) -> Policy:
    """On each call: the policy ``spec`` (:func:`checked_rate`'s value) stands for under ``settings``
    (a :class:`~django_redis_coord.ratelimited.conf.RateLimitSettings`)."""
    if isinstance(spec, Policy):
        return spec
    named = settings.default_rate if spec is None else settings.rates.get(spec)
    if named is None:
        what = "RATELIMIT['DEFAULT_RATE'] is not set" if spec is None else f"RATELIMIT['RATES'] has no rate {spec!r}"
        raise ImproperlyConfigured(f"@rate_limited({key!r}): {what} (see `manage.py check`).")
    return Policy(parse_rate(named.rate), named.burst)
