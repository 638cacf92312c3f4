"""The rate of a ``@rate_limited``: a rate string given to the decorator (``"100/m"``, parsed when
decorating), or the name of one of ``RATELIMIT["RATES"]`` (looked up on each call, so that
operators change it in the settings), or ``RATELIMIT["DEFAULT_RATE"]`` when none is given.

A rate string always has a ``/`` and a rate's name never has one: that is how the two are told apart
(:func:`~django_redis_coord.config.ratelimit_options.is_rate_string`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from django.core.exceptions import ImproperlyConfigured

from ..config.ratelimit_options import RateLimitSettings, check_burst, is_rate_string
from ..core.exceptions import InvalidLockArgument, InvalidLockArgumentType
from ..core.ratelimit import Rate, parse_rate

__all__ = ["Policy", "checked_rate", "resolved"]


@dataclass(frozen=True)
class Policy:
    """The rate and burst a call is limited by (``burst`` ``None``: the rate's count)."""

    rate: Rate
    burst: Optional[int] = None

    @property
    def capacity(self) -> int:
        """The most cost units admitted at once: the burst, else the rate's count."""
        return self.burst if self.burst is not None else self.rate.count


def checked_rate(rate: Union[str, Rate, None], burst: Optional[int], key: Any) -> Union[Policy, str, None]:
    """When decorating: the :class:`Policy` of a rate given as such, else the rate's name (looked
    up on each call), else ``None`` (``DEFAULT_RATE``).  A malformed rate raises
    :class:`~django_redis_coord.exceptions.InvalidRate`."""
    check_burst(burst, key)
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


def resolved(spec: Union[Policy, str, None], settings: RateLimitSettings, key: Any) -> Policy:
    """On each call: the policy ``spec`` (:func:`checked_rate`'s value) stands for under ``settings``
    (``coord_settings().ratelimit``)."""
    if isinstance(spec, Policy):
        return spec
    named = settings.default_rate if spec is None else settings.rates.get(spec)
    if named is None:
        what = "RATELIMIT['DEFAULT_RATE'] is not set" if spec is None else f"RATELIMIT['RATES'] has no rate {spec!r}"
        raise ImproperlyConfigured(f"@rate_limited({key!r}): {what} (see `manage.py check`).")
    return Policy(parse_rate(named.rate), named.burst)
