"""The ``DJANGO_REDIS_COORD`` setting: defaults, validation and a cached reader.

Settings are read through :func:`coord_settings`, never at import time, and the cached value is
dropped whenever Django sends ``setting_changed`` for ``DJANGO_REDIS_COORD`` or ``CACHES`` (the
receiver is this module's), so ``override_settings`` works; the clients built from the settings
follow (see :mod:`~django_redis_coord.connection`).

Example::

    DJANGO_REDIS_COORD = {
        "CACHE_ALIAS": "default",     # or "URL": "redis://127.0.0.1:6379/0"
        "KEY_PREFIX": "shop",         # lock "orders" lives at the key "shop:orders"
        "DEFAULT_TIMEOUT": 30,        # seconds a lock lives unless renewed
    }

The keys and defaults are in :mod:`~django_redis_coord.config.defaults`; :func:`settings_problems`
(:mod:`~django_redis_coord.config.validation`) reports what is wrong with a settings dict without raising.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Optional, Union

from django.core.signals import setting_changed
from django.dispatch import receiver

from ..core.expiry import is_no_expiry
from .client_ip_options import ClientIPSettings, client_ip_from
from .defaults import DEFAULT_CLIENT_OPTIONS, DEFAULTS, REDIS_CACHE_BACKENDS, SETTING_NAME, Problem
from .ratelimit_options import RateLimitSettings, ratelimit_from
from .validation import settings_problems

__all__ = [
    "DEFAULTS",
    "SETTING_NAME",
    "CoordSettings",
    "Problem",
    "coord_settings",
    "clear_settings_cache",
    "settings_problems",
    "prefixed",
    "unprefixed",
    "REDIS_CACHE_BACKENDS",
    "DEFAULT_CLIENT_OPTIONS",
]


@dataclass(frozen=True)
class CoordSettings:
    """The validated ``DJANGO_REDIS_COORD`` with defaults filled in (read-only).

    Attributes are the lower-case setting names; ``settings["KEY_PREFIX"]`` works too.
    """

    cache_alias: Optional[str]
    url: Optional[str]
    client_options: Mapping[str, Any]
    sentinel: Optional[Mapping[str, Any]]
    cluster: Optional[Mapping[str, Any]]
    key_prefix: str
    default_timeout: Optional[float]
    auto_renew: bool
    contention_status: int
    contention_handler: Optional[Union[str, Callable[..., Any]]]
    unavailable_status: int
    fail_open: bool
    redlock: Optional[Mapping[str, Any]]
    #: Which source the connection comes from: "cache", "url", "sentinel" or "cluster".
    source: str = field(default="url")
    #: The metrics exporters turned on (``METRICS``): "prometheus", "otel", "history".
    metrics: tuple[str, ...] = ()
    #: OpenTelemetry tracing of the waits (``TRACING``).
    tracing: bool = False
    #: The settings of ``@rate_limited`` (``RATELIMIT``, defaults filled in).
    ratelimit: RateLimitSettings = field(default_factory=RateLimitSettings)
    #: Where the client's address of a request comes from (``CLIENT_IP``, defaults filled in).
    client_ip: ClientIPSettings = field(default_factory=ClientIPSettings)

    def __getitem__(self, key: str) -> Any:
        if key not in DEFAULTS:
            raise KeyError(key)
        return getattr(self, key.lower())

    def prefixed(self, name: Union[str, bytes]) -> Union[str, bytes]:
        """``name`` with ``KEY_PREFIX`` applied (see :func:`prefixed`)."""
        return _apply_prefix(self.key_prefix, name)

    def unprefixed(self, name: Union[str, bytes]) -> Union[str, bytes]:
        """``name`` without ``KEY_PREFIX`` (unchanged when it does not carry the prefix)."""
        return _strip_prefix(self.key_prefix, name)


def _apply_prefix(prefix: str, name: Union[str, bytes]) -> Union[str, bytes]:
    if not prefix:
        return name
    if isinstance(name, (bytes, bytearray)):
        return prefix.encode() + b":" + bytes(name)
    return f"{prefix}:{name}"


def _strip_prefix(prefix: str, name: Union[str, bytes]) -> Union[str, bytes]:
    if not prefix:
        return name
    if isinstance(name, (bytes, bytearray)):
        head = prefix.encode() + b":"
        return bytes(name)[len(head) :] if bytes(name).startswith(head) else name
    head_s = prefix + ":"
    return name[len(head_s) :] if name.startswith(head_s) else name


def prefixed(name: Union[str, bytes]) -> Union[str, bytes]:
    """Apply the configured ``KEY_PREFIX``: ``"orders"`` becomes ``"shop:orders"``."""
    return _apply_prefix(coord_settings().key_prefix, name)


def unprefixed(name: Union[str, bytes]) -> Union[str, bytes]:
    """Remove the configured ``KEY_PREFIX`` from a name read back from Redis."""
    return _strip_prefix(coord_settings().key_prefix, name)


# -- cached reader -----------------------------------------------------------------------------
def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


@functools.cache
def coord_settings() -> CoordSettings:
    """The validated settings; raises ``ImproperlyConfigured`` listing every problem found."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    raw = getattr(settings, SETTING_NAME, None)
    problems = settings_problems(raw, getattr(settings, "CACHES", {}) or {})
    if problems:
        lines = [f"{p.id}: {p.msg}" + (f" HINT: {p.hint}" if p.hint else "") for p in problems]
        raise ImproperlyConfigured("\n".join(lines))
    values = {**DEFAULTS, **(raw or {})}
    cluster = values["CLUSTER"]
    if cluster is True:
        cluster = {}
    elif cluster is False:
        cluster = None
    if cluster is not None:
        source = "cluster"
    elif values["SENTINEL"] is not None:
        source = "sentinel"
    elif values["URL"] is not None:
        source = "url"
    else:
        source = "cache"
    return CoordSettings(
        cache_alias=values["CACHE_ALIAS"] or ("default" if source == "cache" else None),
        url=values["URL"],
        client_options=_freeze(values["CLIENT_OPTIONS"]),
        sentinel=_freeze(values["SENTINEL"]),
        cluster=_freeze(cluster),
        key_prefix=values["KEY_PREFIX"],
        default_timeout=None if is_no_expiry(values["DEFAULT_TIMEOUT"]) else values["DEFAULT_TIMEOUT"],
        auto_renew=values["AUTO_RENEW"],
        contention_status=values["CONTENTION_STATUS"],
        contention_handler=values["CONTENTION_HANDLER"],
        unavailable_status=values["UNAVAILABLE_STATUS"],
        fail_open=values["FAIL_OPEN"],
        redlock=_freeze(values["REDLOCK"]),
        source=source,
        metrics=tuple(values["METRICS"]),
        tracing=values["TRACING"],
        ratelimit=ratelimit_from(values["RATELIMIT"]),
        client_ip=client_ip_from(values["CLIENT_IP"]),
    )


def clear_settings_cache() -> None:
    """Forget the cached settings (the clients built from them are built again on their next use)."""
    coord_settings.cache_clear()


@receiver(setting_changed, dispatch_uid="django_redis_coord.conf")
def on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: the settings or the caches they may point at changed."""
    if setting in (SETTING_NAME, "CACHES"):
        clear_settings_cache()
