"""``with locked(...)`` and ``async with locked(...)``: the holds of one ``locked`` object used
as a context manager, kept per thread or task (one object may be shared, and nested)."""

from __future__ import annotations

import contextvars
import time
from typing import Any

from ..config.settings import CoordSettings, coord_settings
from ..core.exceptions import InvalidLockArgument, KeyTemplateError
from .key_names import checked_name
from .key_templates import KeyTemplate
from .release import arelease_logged, release_logged
from .unavailable import REDIS_ERRORS, redis_unavailable

__all__ = ["ContextHolds"]


def context_name(locked: Any) -> str:
    """The name a ``with locked(...)`` block locks: the key template filled from ``params`` (a
    ``with`` block has no call arguments), checked and parsed on first use."""
    if locked.key is None:
        raise KeyTemplateError("locked() used as a context manager needs a key.")
    if locked.on_contended == "skip":
        raise InvalidLockArgument("on_contended='skip' is for decorated functions: a with block cannot be skipped")
    key = locked._context_key
    if key is None:
        key = locked._context_key = KeyTemplate(locked.key, "")
    if key.callable is not None:
        return checked_name(key.callable(**locked.params), key)
    return key.render(locked.params)


class ContextHolds:
    """Takes a hold on entry (:class:`~django_redis_coord.exceptions.LockContended` when the key
    is taken; Redis unreachable re-raises unless failing open, then the block runs unlocked and
    ``None`` is what it gets), and releases it on exit, logged rather than raised."""

    def __init__(self, locked: Any) -> None:
        """``locked``: the :class:`~django_redis_coord.decorators.Locked` these holds are of (not
        imported here: that module imports this one)."""
        self.locked = locked
        self._held: contextvars.ContextVar[tuple] = contextvars.ContextVar(f"locked-{id(locked)}", default=())

    def _start(self, *, is_async: bool) -> tuple[str, CoordSettings, Any, float]:
        locked = self.locked
        name = context_name(locked)
        settings = coord_settings()
        template = locked._context_key.metric_template  # made by context_name()
        primitive = locked._make(name, locked.label or name, settings, is_async=is_async, template=template)
        return name, settings, primitive, time.monotonic()

    def _push(self, primitive: Any) -> Any:
        self._held.set((*self._held.get(), primitive))
        return primitive

    def _pop(self) -> Any:
        held = self._held.get()
        self._held.set(held[:-1])
        return held[-1]

    def enter(self) -> Any:
        name, settings, primitive, started = self._start(is_async=False)
        try:
            acquired = primitive.acquire(**self.locked._acquire_kw)
        except REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            self.locked._unavailable(None, name, settings, exc)  # raises unless failing open
            return self._push(None)
        if not acquired:
            self.locked._refused(None, name, primitive, started, settings)
        return self._push(primitive)

    def exit(self) -> None:
        primitive = self._pop()
        if primitive is not None:
            release_logged(primitive)

    async def aenter(self) -> Any:
        name, settings, primitive, started = self._start(is_async=True)
        try:
            acquired = await primitive.acquire(**self.locked._acquire_kw)
        except REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            self.locked._unavailable(None, name, settings, exc)
            return self._push(None)
        if not acquired:
            self.locked._refused(None, name, primitive, started, settings)
        return self._push(primitive)

    async def aexit(self) -> None:
        primitive = self._pop()
        if primitive is not None:
            await arelease_logged(primitive)
