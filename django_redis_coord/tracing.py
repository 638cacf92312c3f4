"""The documented path ``django_redis_coord.tracing``: its names live in
:mod:`django_redis_coord.core.tracing`.  Nothing in the package imports this module."""

from __future__ import annotations

from .core.tracing import (
    DEFAULT_TEMPLATE,
    TRACER_NAME,
    TracingEvents,
    add_force_release_event,
    add_rate_limit_event,
    disable,
    enable,
    enabled,
    trace_loss,
    trace_wait,
)

__all__ = [
    "DEFAULT_TEMPLATE",
    "TRACER_NAME",
    "TracingEvents",
    "add_force_release_event",
    "add_rate_limit_event",
    "disable",
    "enable",
    "enabled",
    "trace_loss",
    "trace_wait",
]
