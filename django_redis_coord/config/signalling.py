"""The Django signals of :mod:`django_redis_coord.signals`, sent through the primitives' one
``events`` hook (see :class:`django_redis_coord.Events`).

The factories (:func:`~django_redis_coord.lock`, :func:`~django_redis_coord.semaphore`,
:func:`~django_redis_coord.get_redlock` and their asyncio forms) and ``@locked`` make the core
primitives with a :class:`DjangoSignals` as their ``events``: it carries the name as the
application wrote it (without ``KEY_PREFIX``) and sends the signals with the primitive's class as
``sender`` and the primitive as ``instance``.  It also records each hold's duration for
:func:`retry_after` (see :mod:`django_redis_coord.core.hold_times`), and feeds the exporters of
``DJANGO_REDIS_COORD["METRICS"]`` under its key template (see :mod:`django_redis_coord.metrics`),
and the spans of ``DJANGO_REDIS_COORD["TRACING"]`` (see :mod:`django_redis_coord.core.tracing`).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

from ..core import hold_times
from ..core.events import Events
from ..core.tracing import trace_loss, trace_wait
from ..metrics import DEFAULT_TEMPLATE
from ..signals import asend, lock_acquired, lock_contended, lock_lost, lock_released, send
from .metrics import configured_metrics

__all__ = ["DjangoSignals", "app_name", "name_view", "retry_after", "retry_after_seconds", "speak_for"]

Name = Union[str, bytes]


def retry_after_seconds(pttl_ms: Optional[int]) -> Optional[int]:
    """Seconds until a holder's TTL runs out, rounded up (at least 1); ``None`` without expiry."""
    if pttl_ms is None or pttl_ms == -1:
        return None
    if pttl_ms < 0:
        return 1
    return max(1, math.ceil(pttl_ms / 1000.0))


def retry_after(primitive: Any) -> Optional[int]:
    """After a refused acquire of ``primitive``: the typical recent hold of its name, at most the
    seconds until the holder's TTL ends (rounded up), else ``None``."""
    return hold_times.retry_after(primitive.name, retry_after_seconds(getattr(primitive, "refused_pttl", None)))


class DjangoSignals(Events):
    """Sends :data:`~django_redis_coord.signals.lock_acquired`, ``lock_contended``,
    ``lock_released`` and ``lock_lost`` for the primitive it is given to.

    ``voice``: the primitive whose signals these are when not the caller (a sync object finishing
    an asyncio hold from another thread sends them as the asyncio one: its class and instance).
    ``template``: the key template the name was made from (``"invoice:{pk}"``), the label of the
    metrics and the signals' ``template`` argument (``None``: :data:`~django_redis_coord.metrics.DEFAULT_TEMPLATE`).
    The arguments of a signal are built only when it has receivers, looked at on every call.
    """

    def __init__(self, app_name: Name, voice: Any = None, template: Optional[str] = None) -> None:
        self.app_name = app_name
        self.voice = voice
        self.template = template

    def _sender(self, primitive: Any) -> tuple[type, dict[str, Any]]:
        instance = primitive if self.voice is None else self.voice
        template = DEFAULT_TEMPLATE if self.template is None else self.template
        return type(instance), {"name": self.app_name, "key": primitive.name, "kind": primitive.kind,
                                "template": template, "instance": instance}

    def _measure(self, event: str, primitive: Any, value: Optional[float]) -> None:
        metrics = configured_metrics()
        if metrics is not None:
            metrics.record(event, self.template, primitive, value)

    # -- sync ----------------------------------------------------------------------------------
    def acquired(self, primitive: Any, *, fence: Optional[int], wait_time: float) -> None:
        self._measure("acquired", primitive, wait_time)
        if lock_acquired.receivers:
            sender, args = self._sender(primitive)
            send(lock_acquired, sender, fence=fence, wait_time=wait_time, **args)

    def contended(self, primitive: Any, *, wait_time: float, pttl: Optional[int], limit: Optional[int]) -> None:
        self._measure("contended", primitive, wait_time)
        if lock_contended.receivers:
            sender, args = self._sender(primitive)
            send(lock_contended, sender, wait_time=wait_time, retry_after=retry_after(primitive), **args)

    def released(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        self._measure("released", primitive, held_time)
        hold_times.record(primitive.name, held_time)
        if lock_released.receivers:
            sender, args = self._sender(primitive)
            send(lock_released, sender, fence=fence, held_time=held_time, **args)

    def lost(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        self._measure("lost", primitive, held_time)
        trace_loss(primitive, self.template, fence=fence, held_time=held_time)
        if lock_lost.receivers:
            sender, args = self._sender(primitive)
            send(lock_lost, sender, fence=fence, held_time=held_time, **args)

    def waited(self, primitive: Any, *, outcome: str, wait_time: float, fence: Optional[int],
               pttl: Optional[int], limit: Optional[int]) -> None:
        """An acquire that waited or failed: its span, when tracing is on (both flavours call it)."""
        trace_wait(primitive, self.template, outcome=outcome, wait_time=wait_time, fence=fence, pttl=pttl,
                   limit=limit)

    # -- asyncio -------------------------------------------------------------------------------
    async def aacquired(self, primitive: Any, *, fence: Optional[int], wait_time: float) -> None:
        self._measure("acquired", primitive, wait_time)
        if lock_acquired.receivers:
            sender, args = self._sender(primitive)
            await asend(lock_acquired, sender, fence=fence, wait_time=wait_time, **args)

    async def acontended(self, primitive: Any, *, wait_time: float, pttl: Optional[int],
                         limit: Optional[int]) -> None:
        self._measure("contended", primitive, wait_time)
        if lock_contended.receivers:
            sender, args = self._sender(primitive)
            await asend(lock_contended, sender, wait_time=wait_time, retry_after=retry_after(primitive), **args)

    async def areleased(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        self._measure("released", primitive, held_time)
        hold_times.record(primitive.name, held_time)
        if lock_released.receivers:
            sender, args = self._sender(primitive)
            await asend(lock_released, sender, fence=fence, held_time=held_time, **args)

    async def alost(self, primitive: Any, *, fence: Optional[int], held_time: Optional[float]) -> None:
        self._measure("lost", primitive, held_time)
        trace_loss(primitive, self.template, fence=fence, held_time=held_time)
        if lock_lost.receivers:
            sender, args = self._sender(primitive)
            await asend(lock_lost, sender, fence=fence, held_time=held_time, **args)


def app_name(primitive: Any) -> Name:
    """The name ``primitive`` was made with by the application (without ``KEY_PREFIX``)."""
    events = getattr(primitive, "events", None)
    return events.app_name if isinstance(events, DjangoSignals) else primitive.name


def speak_for(twin: Any, primitive: Any) -> None:
    """Make ``twin`` send its signals as ``primitive``'s (see :class:`DjangoSignals`)."""
    events = getattr(primitive, "events", None)
    template = events.template if isinstance(events, DjangoSignals) else None
    twin.events = DjangoSignals(app_name(primitive), voice=primitive, template=template)


def name_view(primitive: Any, view: Optional[str]) -> None:
    """Name ``view`` (a dotted path) in the holder info of ``primitive``'s holds: what the admin
    page, ``manage.py locks`` and the listing show as the holder's view."""
    primitive.view = view  # a Redlock passes it on to its per-master lock's holder info
