"""OpenTelemetry tracing of the waits: a span for each acquire that waited or failed, span events
for rate-limit decisions and force releases (``pip install "django-redis-coord[otel]"``).

Off until :func:`enable` is called (a Django site sets ``DJANGO_REDIS_COORD["TRACING"] = True``,
which calls it); ``opentelemetry`` is imported then, never before.  While off, every function here
returns at its first line.

What is traced, and where it comes from:

* :func:`trace_wait`: an acquire of a lock, semaphore or read-write lock that did not get its
  grant at once (it waited in line) or got none (refused, timed out).  Called by the ``waited``
  hook of the primitive's ``events`` (:class:`TracingEvents`, and the Django signals' and metrics'
  events objects), which the primitive calls only on its waiting path: an uncontended grant makes
  no span and costs nothing.  The span starts when the acquire began and ends when it returned,
  in the caller's context (a child of the request's span), named ``"<kind> <template>"`` after
  the key *template* (``"lock report:{name}"``), never the name itself.
* :func:`trace_loss`: a hold found lost (expired, taken over, not renewed in time): a span with
  the outcome ``lost``.
* :func:`add_rate_limit_event`: a rate-limit decision, an event on the current span.
* :func:`add_force_release_event`: an operator's force release, an event on the current span
  (on a span of its own when none records: a management command's).

The attribute names (a ``dcoord.`` namespace) are listed in docs/metrics.md ("Tracing").  What
the OpenTelemetry API raises is logged (at most once a minute), never passed to the caller.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional

from .events import Events

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

logger = logging.getLogger("django_redis_coord.tracing")

#: The instrumentation scope of the spans.
TRACER_NAME = "django_redis_coord"
#: The template of a primitive made without one (the metrics' label for it too).
DEFAULT_TEMPLATE = "(untemplated)"
#: Longer templates are cut to this many characters in span names and attributes.
MAX_TEMPLATE_LENGTH = 200
#: Seconds between two log records of tracing failures.
LOG_EVERY = 60.0

#: ``primitive.kind`` -> (the ``dcoord.kind`` attribute, the ``dcoord.rwlock.mode`` one).
KINDS: dict[str, tuple[str, Optional[str]]] = {
    "lock": ("lock", None),
    "semaphore": ("semaphore", None),
    "redlock": ("redlock", None),
    "read-write lock": ("rwlock", None),
    "read hold of read-write lock": ("rwlock", "read"),
    "write hold of read-write lock": ("rwlock", "write"),
}
#: The holder registry's kinds (a force release's ``kind``) -> ``dcoord.kind``.
REGISTRY_KINDS = {"lock": "lock", "sem": "semaphore", "rw": "rwlock"}
#: Outcomes that set the span's status to ERROR.
ERRORS = frozenset({"timeout", "lost"})

#: The tracer while tracing is on, else ``None`` (the switch).
_tracer: Any = None
_switch = threading.Lock()
_last_failure = -LOG_EVERY


def enable(tracer_provider: Any = None) -> None:
    """Turn tracing on, with the tracer of ``tracer_provider`` (default: the global provider's,
    which follows a provider the application sets later).  Raises ``ImportError`` when
    ``opentelemetry-api`` is not installed."""
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ImportError('Tracing needs opentelemetry-api: pip install "django-redis-coord[otel]"') from exc
    with _switch:
        _tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)


def disable() -> None:
    """Turn tracing off (the default)."""
    global _tracer
    with _switch:
        _tracer = None


def enabled() -> bool:
    """Whether tracing is on."""
    return _tracer is not None


def _failed(what: str) -> None:
    global _last_failure
    now = time.monotonic()
    if now - _last_failure >= LOG_EVERY:
        _last_failure = now
        logger.exception("Tracing: %s failed; the locks are not affected", what)


def _template(template: Optional[str]) -> str:
    if not isinstance(template, str):
        return DEFAULT_TEMPLATE
    return template[:MAX_TEMPLATE_LENGTH]


def _kind(primitive: Any) -> tuple[str, Optional[str]]:
    kind = getattr(primitive, "kind", None)
    if not isinstance(kind, str):
        return "lock", None
    return KINDS.get(kind, (kind, None))


def _span(tracer: Any, primitive: Any, template: Optional[str], outcome: str, seconds: Optional[float],
          attributes: dict[str, Any]) -> None:
    """One span ``"<kind> <template>"`` that ended now and lasted ``seconds`` (0 when unknown)."""
    from opentelemetry.trace import Status, StatusCode

    kind, mode = _kind(primitive)
    label = _template(template)
    attributes = {"dcoord.kind": kind, "dcoord.template": label, "dcoord.outcome": outcome,
                  **{key: value for key, value in attributes.items() if value is not None}}
    if mode is not None:
        attributes["dcoord.rwlock.mode"] = mode
    end = time.time_ns()
    start = end - int(max(0.0, seconds or 0.0) * 1e9)
    span = tracer.start_span(f"{kind} {label}", start_time=start, attributes=attributes)
    if outcome in ERRORS:
        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end(end_time=end)


def trace_wait(primitive: Any, template: Optional[str], *, outcome: str, wait_time: float,
               fence: Optional[int], pttl: Optional[int], limit: Optional[int]) -> None:
    """The span of an acquire of ``primitive`` that waited or failed (see the module's text):
    ``outcome`` ``"acquired"``, ``"timeout"`` or ``"refused"``; ``pttl``: the current holder's
    remaining ms as the refusal said (``-1`` no expiry); ``limit``: a semaphore's limit in force."""
    tracer = _tracer
    if tracer is None:
        return
    try:
        _span(tracer, primitive, template, outcome, wait_time, {
            "dcoord.wait_ms": wait_time * 1000.0,
            "dcoord.fence": fence if outcome == "acquired" else None,
            "dcoord.holder.ttl_ms": pttl if pttl is not None and pttl >= -1 else None,
            "dcoord.semaphore.limit": limit,
        })
    except Exception:
        _failed("a wait's span")


def trace_loss(primitive: Any, template: Optional[str], *, fence: Optional[int], held_time: Optional[float]) -> None:
    """The span of a hold of ``primitive`` found lost: outcome ``"lost"``, an error; it covers the
    hold when its start is known."""
    tracer = _tracer
    if tracer is None:
        return
    try:
        _span(tracer, primitive, template, "lost", held_time, {
            "dcoord.fence": fence,
            "dcoord.held_ms": None if held_time is None else held_time * 1000.0,
        })
    except Exception:
        _failed("a loss's span")


def _current_span() -> Any:
    """The current span when it records, else ``None``."""
    from opentelemetry import trace

    span = trace.get_current_span()
    return span if span.is_recording() else None


def add_rate_limit_event(template: Optional[str], kind: str, *, allowed: bool, limit: int, remaining: int,
                         retry_after: float) -> None:
    """A rate-limit decision as the event ``dcoord.ratelimit`` of the current span (none when no
    span records): ``kind`` ``"ratelimit"`` (GCRA) or ``"ratelimit-window"``; ``retry_after`` in seconds."""
    if _tracer is None:
        return
    try:
        span = _current_span()
        if span is not None:
            span.add_event("dcoord.ratelimit", {
                "dcoord.kind": kind, "dcoord.template": _template(template), "dcoord.ratelimit.allowed": allowed,
                "dcoord.ratelimit.limit": limit, "dcoord.ratelimit.remaining": remaining,
                "dcoord.ratelimit.retry_after_ms": retry_after * 1000.0,
            })
    except Exception:
        _failed("a rate-limit event")


def add_force_release_event(kind: str, *, result: str, fence: int, fence_after: int, handed_off: bool) -> None:
    """An operator's force release as the event ``dcoord.force_release`` of the current span (the
    admin request's), or of a span ``"force release <kind>"`` of its own when none records
    (``manage.py locks release``).  ``kind``: the registry's (``"lock"``, ``"sem"``, ``"rw"``);
    ``result``: ``"released"``, ``"was_free"`` or ``"fence_mismatch"``.  The name is not given:
    a span never carries a rendered key."""
    tracer = _tracer
    if tracer is None:
        return
    try:
        label = REGISTRY_KINDS.get(kind, kind)
        attributes = {"dcoord.kind": label, "dcoord.force_release.result": result, "dcoord.fence": fence,
                      "dcoord.force_release.fence_after": fence_after,
                      "dcoord.force_release.handed_off": handed_off}
        span = _current_span()
        if span is not None:
            span.add_event("dcoord.force_release", attributes)
            return
        with tracer.start_as_current_span(f"force release {label}", attributes={"dcoord.kind": label}) as own:
            own.add_event("dcoord.force_release", attributes)
    except Exception:
        _failed("a force release's event")


class TracingEvents(Events):
    """The ``events=`` of a core primitive traced under the key ``template`` (while :func:`enable`
    is in force): the spans of its waits and losses, nothing else."""

    def __init__(self, template: Optional[str] = None) -> None:
        self.template = template

    def waited(self, primitive: Any, *, outcome: str, wait_time: float, fence: Optional[int],
               pttl: Optional[int], limit: Optional[int]) -> None:
        trace_wait(primitive, self.template, outcome=outcome, wait_time=wait_time, fence=fence, pttl=pttl,
                   limit=limit)

    def lost(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        trace_loss(primitive, self.template, fence=fence, held_time=held_time)
