"""What operators see of each live rate limit (the admin's rate-limits page, ``manage.py ratelimits``):
its kind as people call it, its rate when it can be known, its capacity, what remains of it now.

The state is read from Redis (:mod:`~django_redis_coord.core.ratelimit.usage`); the rate comes from
the operator (``manage.py ratelimits show NAME --rate``), else from the decorators of this process
(:mod:`.registry`), else it is unknown, and so are the capacity and what remains.  With the rate,
what remains is worked out from what is stored, on the server's clock: a GCRA limit's theoretical
arrival time, a window's admissions in its period (one ``TIME`` and one pipeline of ``ZCOUNT``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ..config.ratelimit_options import RateLimitSettings
from ..core.ratelimit.usage import LimitUsage, gcra_remaining, server_time_us, window_counts
from .rates import Policy
from .registry import policy_for

__all__ = ["LimitState", "states_of", "describe_policy", "import_url_config", "UNKNOWN"]

#: What is shown for a rate, a capacity or a remainder that cannot be known.
UNKNOWN = "unknown"


def describe_policy(policy: Optional[Policy], kind: str) -> str:
    """``"100/m, burst 20"`` (GCRA), ``"2/h"`` (a sliding window), or :data:`UNKNOWN`."""
    if policy is None:
        return UNKNOWN
    return str(policy.rate) if kind == "window" else f"{policy.rate}, burst {policy.capacity}"


@dataclass(frozen=True)
class LimitState:
    """A live limit with its rate (``None``: unknown) and what it would admit now (``None``: unknown)."""

    usage: LimitUsage
    policy: Optional[Policy] = None
    remaining: Optional[int] = None

    @property
    def rate(self) -> str:
        return describe_policy(self.policy, self.usage.kind)

    @property
    def limit(self) -> Optional[int]:
        """The capacity: a GCRA limit's burst, a window's count."""
        return None if self.policy is None else self.policy.capacity

    @property
    def used(self) -> Optional[int]:
        return None if self.limit is None or self.remaining is None else self.limit - self.remaining

    def as_dict(self) -> dict[str, Any]:
        policy = self.policy
        return {
            **self.usage.as_dict(),
            "kind_title": self.usage.kind_title,
            "rate": None if policy is None else str(policy.rate),
            "burst": None if policy is None or self.usage.kind == "window" else policy.capacity,
            "limit": self.limit,
            "remaining": self.remaining,
            "used": self.used,
        }


def _known_policy(usage: LimitUsage, settings: RateLimitSettings) -> Optional[Policy]:
    if usage.raw_name is None or ":dcoord:" in usage.name:  # listed by its key: no template made it
        return None
    return policy_for(usage.name, usage.kind, settings)


def states_of(client: Any, usages: Sequence[LimitUsage], settings: RateLimitSettings,
              given: Optional[Mapping[str, Policy]] = None) -> list[LimitState]:
    """Each limit of ``usages`` with its rate (``given[kind]``, else the decorators') and what remains of it."""
    policies = [(given or {}).get(u.kind) or _known_policy(u, settings) for u in usages]
    if not any(policies):
        return [LimitState(u) for u in usages]
    now = server_time_us(client)
    windows = [(u.raw_key, p.rate) for u, p in zip(usages, policies) if p is not None and u.kind == "window"]
    counts = iter(window_counts(client, windows, now))
    states = []
    for usage, policy in zip(usages, policies):
        if policy is None:
            states.append(LimitState(usage))
        elif usage.kind == "window":
            states.append(LimitState(usage, policy, max(policy.capacity - next(counts), 0)))
        else:
            states.append(LimitState(usage, policy, gcra_remaining(usage.stored_us, now, policy.rate,
                                                                   policy.capacity)))
    return states


def import_url_config() -> None:
    """Import the project's URL configuration, as ``manage.py check`` does, so that the decorators
    of its views have recorded their rates (a management command imports no view by itself)."""
    from django.urls import get_resolver

    try:
        patterns = get_resolver().url_patterns
    except Exception:  # noqa: BLE001 - a URLconf that fails to import leaves the rates unknown (`check` says why)
        return
    del patterns
