"""The exporters ``DJANGO_REDIS_COORD["METRICS"]`` turns on, for the holds of the factories and
``@locked`` (their :class:`~django_redis_coord.config.signalling.DjangoSignals` calls :func:`configured_metrics`).

Each exporter is made once per process, on first use (or when the app is ready): Prometheus'
metrics on ``prometheus_client.REGISTRY`` with the registry gauges' collector, OpenTelemetry's
instruments on the global meter provider, the history written to the configured Redis under
``KEY_PREFIX``.  The gauges and the history pick the client and prefix of the settings in force
when they read or write.  A failure to set one up is logged (now and then) and leaves the holds
unmeasured, never broken.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from ..core.listing import HolderListing
from ..metrics import Fanout, HistoryRecorder, HolderGauges, Recorder
from ..metrics._recording import failures
from .connection import get_client
from .settings import coord_settings

__all__ = ["configured_metrics", "configured_recorder", "install"]

_lock = threading.Lock()
#: (the settings object, what they turn on): rebuilt when the settings change.
_state: tuple[Any, Optional[Fanout]] = (None, None)
_made: dict[str, Recorder] = {}


class ConfiguredGauges(HolderGauges):
    """The gauges of the configured Redis, under ``KEY_PREFIX``."""

    def listing(self) -> HolderListing:
        prefix = coord_settings().key_prefix
        return HolderListing(get_client(), prefix=prefix + ":" if prefix else "")


class ConfiguredHistory(HistoryRecorder):
    """The history written to the configured Redis, under ``KEY_PREFIX``."""

    def target(self) -> tuple[Any, str]:
        return get_client(), coord_settings().key_prefix


_gauges = ConfiguredGauges()


def _make(name: str) -> Recorder:
    if name == "prometheus":
        from prometheus_client import REGISTRY

        from ..metrics.prometheus import HolderCollector, PrometheusRecorder

        recorder: Recorder = PrometheusRecorder()
        REGISTRY.register(HolderCollector(_gauges))
        return recorder
    if name == "otel":
        from ..metrics.otel import OtelRecorder

        return OtelRecorder(gauges=_gauges)
    return ConfiguredHistory()


def _recorder(name: str) -> Optional[Recorder]:
    found = _made.get(name)
    if found is None:
        try:
            found = _made[name] = _make(name)
        except Exception as exc:  # a missing package, names already registered by the application
            failures.note(f"setting up the {name!r} metrics", exc)
    return found


def configured_metrics() -> Optional[Fanout]:
    """The recorders of the settings in force, or ``None`` when ``METRICS`` is empty."""
    global _state
    try:
        settings = coord_settings()
    except Exception as exc:  # bad settings: the system checks say what; the lock goes on unmeasured
        failures.note("reading the METRICS setting", exc)
        return None
    cached_for, fanout = _state
    if settings is cached_for:
        return fanout
    with _lock:
        recorders = [found for found in map(_recorder, settings.metrics) if found is not None]
        fanout = Fanout(recorders) if recorders else None
        _state = (settings, fanout)
    return fanout


def configured_recorder(name: str) -> Optional[Recorder]:
    """The recorder of exporter ``name`` (``"prometheus"``, ``"otel"``, ``"history"``) when the
    settings in force turn it on, else ``None`` (to flush the history or feed OpenTelemetry now)."""
    fanout = configured_metrics()
    found = _made.get(name)
    return found if fanout is not None and found in fanout.recorders else None


def install() -> None:
    """At start-up (the app's ``ready``): make the configured exporters, so that the gauges are
    there before the first hold.  Nothing happens when ``METRICS`` is not set."""
    from django.conf import settings

    raw = getattr(settings, "DJANGO_REDIS_COORD", None)
    if isinstance(raw, dict) and raw.get("METRICS"):
        configured_metrics()
