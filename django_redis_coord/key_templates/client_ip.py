"""The client's address of a request: ``{client_ip}`` in key templates, ``@rate_limited(key="ip")``.

Without proxies (``CLIENT_IP["TRUSTED_PROXIES"]`` 0, the default) it is ``REMOTE_ADDR``, the TCP
peer, and headers are never read.  Behind N trusted reverse proxies, each of which appends the
address it received the request from to ``X-Forwarded-For`` (or adds a ``for=`` element to
``Forwarded``, RFC 7239), it is the header's N-th entry **from the right**: the entries further
left are whatever the client sent, so a client cannot choose its address by sending the header.
A request whose header has fewer than N entries did not come through all the proxies (a health
check, a request to the app server itself): its ``REMOTE_ADDR`` is used.

An IPv4 address is used as it is; an IPv6 one is grouped by its first ``IPV6_PREFIX`` bits (64 by
default: a household or a server can use any address of its /64), written as the network
(``2001:db8:1:2::/64``); an IPv4-mapped IPv6 address is its IPv4 address.  A chosen entry that is
not an address (``unknown``, an obfuscated ``for=_hidden``, a typo in a proxy's configuration) or
an empty ``REMOTE_ADDR`` raises :class:`~django_redis_coord.exceptions.MissingKeyValue`, a
``BadRequest`` (400): never one shared limit for every such request.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any, Optional, Union

from django.http import HttpRequest

from ..config.client_ip_options import ClientIPSettings
from ..config.settings import SETTING_NAME, coord_settings
from .template import MissingKeyValue

__all__ = ["client_ip", "client_address", "header_entries", "parse_address", "grouped"]

Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


def client_ip(request: HttpRequest) -> str:
    """The client's address of ``request`` as ``{client_ip}`` gives it, read as
    ``DJANGO_REDIS_COORD["CLIENT_IP"]`` says (for key callables:
    ``key=lambda request: f"login:{client_ip(request)}"``).  Raises ``MissingKeyValue`` (400)
    when the address cannot be read."""
    return client_address(request.META, coord_settings().client_ip)


def client_address(meta: Mapping[str, Any], settings: ClientIPSettings) -> str:
    """The client's address from a request's ``META`` (see the module's documentation)."""
    remote = meta.get("REMOTE_ADDR") or ""
    if settings.trusted_proxies:
        entries = header_entries(meta.get(settings.meta_key) or "", rfc7239=settings.rfc7239)
        if len(entries) >= settings.trusted_proxies:
            entry = entries[-settings.trusted_proxies]
            address = parse_address(entry)
            if address is None:
                raise MissingKeyValue(
                    f"The client's address cannot be read: the {settings.header} entry {_shown(entry)} "
                    f"({_ordinal(settings.trusted_proxies)} from the right, written by the outermost of the "
                    f"{settings.trusted_proxies} trusted proxies of {SETTING_NAME}['CLIENT_IP']) is not an IP address."
                )
            return grouped(address, settings.ipv6_prefix)
    address = parse_address(remote)
    if address is None:
        raise MissingKeyValue(
            f"The client's address cannot be read: REMOTE_ADDR is {_shown(remote)}, not an IP address"
            + (" (behind a proxy on a Unix socket? Set DJANGO_REDIS_COORD['CLIENT_IP']['TRUSTED_PROXIES'])."
               if not settings.trusted_proxies else ".")
        )
    return grouped(address, settings.ipv6_prefix)


def header_entries(value: str, *, rfc7239: bool) -> list[str]:
    """The entries of a forwarding header, left to right (several header lines arrive joined by
    commas).  ``Forwarded`` gives each element's ``for=`` value (``""`` when it has none).

    The value is split at every comma, without reading quoted strings: what a proxy writes has no
    comma inside an entry, and a client's unbalanced quote or stray comma can only add entries on
    the left, never shift the ones the proxies appended."""
    entries = []
    for element in value.split(","):
        element = element.strip()
        if rfc7239:
            element = _forwarded_for(element)
        entries.append(element)
    if entries == [""]:
        return []
    return entries


def _forwarded_for(element: str) -> str:
    """The ``for=`` value of one ``Forwarded`` element (``for=192.0.2.60;proto=http``), unquoted."""
    for pair in element.split(";"):
        name, sep, value = pair.partition("=")
        if sep and name.strip().lower() == "for":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            return value
    return ""


def parse_address(entry: str) -> Optional[Address]:
    """The IP address of an entry (``192.0.2.1``, ``192.0.2.1:4711``, ``2001:db8::1``,
    ``[2001:db8::1]:4711``, ``fe80::1%eth0``), else ``None``."""
    text = entry.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        text = host
    elif text.count(":") == 1:  # an IPv4 address and a port
        host, _, port = text.partition(":")
        if not port.isdigit():
            return None
        text = host
    text = text.partition("%")[0]  # an IPv6 zone (fe80::1%eth0) names an interface, not a client
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def grouped(address: Address, ipv6_prefix: int) -> str:
    """An IPv4 address as it is; an IPv6 one as its network of ``ipv6_prefix`` bits (``/128``:
    the address itself)."""
    if isinstance(address, ipaddress.IPv4Address) or ipv6_prefix >= 128:
        return str(address)
    return str(ipaddress.IPv6Network((address, ipv6_prefix), strict=False))


def _shown(value: str) -> str:
    return repr(value if len(value) <= 64 else value[:61] + "...")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
