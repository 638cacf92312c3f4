"""Which rate limits the names of each ``@rate_limited`` of this process, for operators.

A live limit's rate is not stored in Redis (its key holds a time, or its admissions): the admin's
rate-limits page and ``manage.py ratelimits`` learn it here.  Each decorator, when it decorates,
records its key template, its algorithm and its rate (given, or named in ``RATELIMIT["RATES"]``,
or ``DEFAULT_RATE``, looked up in the settings when asked).  A name that exactly one rate fits
(every decorator of its kind whose template fills it resolves to the same rate) has that rate;
otherwise it is unknown: a callable key, a decorator of a module this process never imported, two
decorators with different rates whose templates both fit, a name stored as its digest.
Nothing here is read on a decision.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from re import Pattern
from typing import Any, Optional, Union

from django.core.exceptions import ImproperlyConfigured

from ..config.ratelimit_options import RateLimitSettings
from ..key_templates.template import KeyTemplate
from .rates import Policy, resolved

__all__ = ["Registered", "register", "policy_for"]


@dataclass(frozen=True)
class Registered:
    """One decorated function's limit: its key template (as written), what its names match, its
    algorithm (``"gcra"`` or ``"window"``) and its rate as given (see :func:`~.rates.checked_rate`)."""

    template: str
    pattern: Optional[Pattern[str]]
    algorithm: str
    spec: Union[Policy, str, None]


_registered: weakref.WeakKeyDictionary[Callable[..., Any], Registered] = weakref.WeakKeyDictionary()


def register(wrapper: Callable[..., Any], key: KeyTemplate, algorithm: str, spec: Union[Policy, str, None]) -> None:
    """Record the limit of ``wrapper`` (forgotten with it)."""
    _registered[wrapper] = Registered(key.metric_template, key.name_pattern(), algorithm, spec)


def policy_for(name: str, kind: str, settings: RateLimitSettings) -> Optional[Policy]:
    """The rate and burst of the limit ``name`` (without ``KEY_PREFIX``) of ``kind``, when exactly
    one fits it (see the module's docstring); ``None``: unknown."""
    found: set[Policy] = set()
    for limit in list(_registered.values()):
        if limit.algorithm != kind or limit.pattern is None or not limit.pattern.fullmatch(name):
            continue
        try:
            policy = resolved(limit.spec, settings, limit.template)
        except ImproperlyConfigured:  # a rate name the settings lack (system check E023)
            return None
        found.add(policy if policy.burst is not None or kind == "window" else Policy(policy.rate, policy.rate.count))
    return found.pop() if len(found) == 1 else None
