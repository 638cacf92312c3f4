"""The rates ``@rate_limited`` takes from the settings and the settings lack (system check E023)."""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings

from ..config.defaults import SETTING_NAME
from .decorator import rate_names_in_use

__all__ = ["missing_rates"]


def missing_rates() -> list[tuple[str, str]]:
    """``(message, hint)`` per rate name used by a decorated function and absent from the
    settings (``None``: ``DEFAULT_RATE``).  A malformed ``RATELIMIT`` is E021/E022, not this."""
    raw = getattr(settings, SETTING_NAME, None)
    section = raw.get("RATELIMIT") if isinstance(raw, Mapping) else None
    section = section if isinstance(section, Mapping) else {}
    rates = section.get("RATES")
    rates = rates if isinstance(rates, Mapping) else {}
    missing: dict[str, list[str]] = {}
    for user, name in rate_names_in_use():
        if (name is None and section.get("DEFAULT_RATE") is None) or (name is not None and name not in rates):
            missing.setdefault(name or "", []).append(user)
    found = []
    for name, users in sorted(missing.items()):
        shown = ", ".join(users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
        if name:
            found.append((f"@rate_limited(rate={name!r}) is used ({shown}) but {SETTING_NAME}['RATELIMIT']['RATES'] "
                          f"has no rate {name!r}.",
                          f'Add it: "RATELIMIT": {{"RATES": {{{name!r}: "100/m"}}}}, or give the decorator a rate '
                          'string such as rate="100/m".'))
        else:
            found.append((f"@rate_limited without a rate is used ({shown}) but {SETTING_NAME}['RATELIMIT'] has no "
                          "DEFAULT_RATE.",
                          'Set "RATELIMIT": {"DEFAULT_RATE": "100/m"}, or give each decorator rate="...".'))
    return found
