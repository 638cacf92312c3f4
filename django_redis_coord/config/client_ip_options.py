"""``DJANGO_REDIS_COORD["CLIENT_IP"]``: where the client's address of a request comes from.

Example (behind one reverse proxy that appends the address it received from to
``X-Forwarded-For``)::

    DJANGO_REDIS_COORD = {
        "URL": "redis://127.0.0.1:6379/0",
        "CLIENT_IP": {
            "TRUSTED_PROXIES": 1,             # proxies in front of Django; 0 (the default): REMOTE_ADDR only
            "HEADER": "X-Forwarded-For",      # or "Forwarded" (RFC 7239)
            "IPV6_PREFIX": 64,                # IPv6 clients are grouped by their /64
        },
    }

The value is read with the other settings: ``coord_settings().client_ip`` is its
:class:`ClientIPSettings` (:func:`client_ip_from`).  :func:`client_ip_problems` reports what is
wrong with it (system check E024, through
:func:`~django_redis_coord.config.validation.settings_problems`).  The address itself is read by
:mod:`django_redis_coord.key_templates.client_ip`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from . import check_ids as ids
from .defaults import SETTING_NAME, Problem, unknown_key_problems

__all__ = ["CLIENT_IP_DEFAULTS", "ClientIPSettings", "client_ip_from", "client_ip_problems"]

#: Every key of ``CLIENT_IP`` with its default value.
CLIENT_IP_DEFAULTS: Mapping[str, Any] = {
    "TRUSTED_PROXIES": 0,
    "HEADER": "X-Forwarded-For",
    "IPV6_PREFIX": 64,
}

_PATH = f"{SETTING_NAME}['CLIENT_IP']"
_EXAMPLE = 'For example {"TRUSTED_PROXIES": 1, "HEADER": "X-Forwarded-For", "IPV6_PREFIX": 64}.'


@dataclass(frozen=True)
class ClientIPSettings:
    """The validated ``CLIENT_IP`` with defaults filled in."""

    #: How many reverse proxies in front of Django append to ``header``: the client's address is
    #: the entry that many places from the right (0: the header is never read).
    trusted_proxies: int = 0
    header: str = "X-Forwarded-For"
    #: IPv6 clients with the same first ``ipv6_prefix`` bits are one client.
    ipv6_prefix: int = 64

    @property
    def meta_key(self) -> str:
        """The header's name in ``request.META`` (``HTTP_X_FORWARDED_FOR``)."""
        return "HTTP_" + self.header.upper().replace("-", "_")

    @property
    def rfc7239(self) -> bool:
        """Whether the header is ``Forwarded`` (RFC 7239: ``for=`` pairs), not a list of addresses."""
        return self.header.lower() == "forwarded"


def client_ip_from(value: Optional[Mapping[str, Any]]) -> ClientIPSettings:
    """The :class:`ClientIPSettings` of a ``CLIENT_IP`` value :func:`client_ip_problems` found
    nothing wrong with (``None``: the defaults)."""
    values = {**CLIENT_IP_DEFAULTS, **(value or {})}
    return ClientIPSettings(trusted_proxies=values["TRUSTED_PROXIES"], header=values["HEADER"],
                            ipv6_prefix=values["IPV6_PREFIX"])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def client_ip_problems(value: object) -> list[Problem]:
    """Everything wrong with ``CLIENT_IP`` (``None``: not set, nothing wrong); ``[]`` when fine."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [Problem(ids.BAD_CLIENT_IP, f"{_PATH} must be a dict, not {type(value).__name__}.", _EXAMPLE)]
    problems = unknown_key_problems(ids.BAD_CLIENT_IP, _PATH, value, CLIENT_IP_DEFAULTS)
    trusted = value.get("TRUSTED_PROXIES", 0)
    if not _is_int(trusted) or trusted < 0:
        problems.append(Problem(
            ids.BAD_CLIENT_IP,
            f"{_PATH}['TRUSTED_PROXIES'] must be the number of reverse proxies in front of Django (0 or more), "
            f"not {trusted!r}.",
            "Count the proxies that append to the header (a load balancer, then nginx: 2). 0 reads REMOTE_ADDR only; "
            "a larger number than the real one lets clients choose their address by sending the header."))
    header = value.get("HEADER", "X-Forwarded-For")
    if not isinstance(header, str) or not header or not all(c.isalnum() or c == "-" for c in header):
        problems.append(Problem(ids.BAD_CLIENT_IP, f"{_PATH}['HEADER'] must be a header name, not {header!r}.",
                                'The header your proxies append to: "X-Forwarded-For" (the default) or "Forwarded" '
                                "(RFC 7239)."))
    prefix = value.get("IPV6_PREFIX", 64)
    if not _is_int(prefix) or not 1 <= prefix <= 128:
        problems.append(Problem(ids.BAD_CLIENT_IP,
                                f"{_PATH}['IPV6_PREFIX'] must be a prefix length from 1 to 128, not {prefix!r}.",
                                "64 (the default) counts a household or a server's /64 as one client, since one "
                                "machine can use any of its 2**64 addresses; 128 counts every address."))
    return problems
