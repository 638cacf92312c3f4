"""The options of ``locked(...)``, checked when it is called (a mistake shows at import time,
not on the first request), and the settings ``redlock=True`` needs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured

from ..config.settings import CoordSettings, coord_settings
from ..config.shortcuts import DEFAULT
from ..core.arguments import check_number
from ..core.exceptions import InvalidLockArgument, InvalidLockArgumentType
from ..core.expiry import no_expiry_timeout

__all__ = ["checked_options", "check_redlock_settings", "checked_on_contended", "check_flavour", "check_mode",
           "ON_CONTENDED", "MODES"]

#: What ``on_contended`` accepts: what a call without a request does when the key is taken.
ON_CONTENDED = ("skip", "raise", "retry")
#: What ``mode`` accepts: the side of a read-write lock held.
MODES = ("read", "write")


def checked_options(
    key: Any, *, timeout: Any, wait: float, limit: Optional[int], status: Optional[int],
    handler: Optional[Callable[..., Any]], template_name: Optional[str], auto_renew: Optional[bool],
    rollback_on_loss: bool, using: Optional[str], fail_open: Optional[bool], label: Optional[str],
    params: Optional[Mapping[str, Any]], redlock: bool, on_contended: Optional[str] = None,
    max_hold: Optional[float] = None, mode: Optional[str] = None,
) -> Any:
    """Refuse what ``locked(key, **options)`` cannot work with; the timeout to use (``NO_EXPIRY``
    read as ``None``, :data:`~django_redis_coord.shortcuts.DEFAULT` kept for ``DEFAULT_TIMEOUT``)."""
    if not isinstance(redlock, bool):
        raise InvalidLockArgumentType("redlock must be True or False", lock_name=key)
    timeout = no_expiry_timeout(timeout, key)
    if redlock and limit is not None:
        raise InvalidLockArgument(
            "redlock=True cannot be combined with limit: a Redlock is a lock, not a semaphore", lock_name=key
        )
    if redlock and timeout is None:
        raise InvalidLockArgument("redlock=True needs a timeout: a Redlock always expires", lock_name=key)
    check_mode(key, mode, limit=limit, redlock=redlock)
    if timeout is not DEFAULT:
        check_number("timeout", timeout, allow_none=True, positive=True, lock_name=key)
    check_number("wait", wait, allow_none=False, positive=False, lock_name=key)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidLockArgument(f"limit must be a positive int, not {limit!r}", lock_name=key)
    if status is not None and (isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599):
        raise InvalidLockArgument(f"status must be an HTTP error status (400-599), not {status!r}", lock_name=key)
    if handler is not None and not callable(handler):
        raise InvalidLockArgumentType("handler must be callable", lock_name=key)
    if template_name is not None and not isinstance(template_name, str):
        raise InvalidLockArgumentType("template_name must be a str", lock_name=key)
    if params is not None and not isinstance(params, Mapping):
        raise InvalidLockArgumentType("params must be a mapping", lock_name=key)
    if label is not None and not isinstance(label, str):
        raise InvalidLockArgumentType("label must be a str", lock_name=key)
    for option, value in (("auto_renew", auto_renew), ("fail_open", fail_open)):
        if value is not None and not isinstance(value, bool):  # "false" would read as true
            raise InvalidLockArgumentType(f"{option} must be True, False or None, not {value!r}", lock_name=key)
    if not isinstance(rollback_on_loss, bool):
        raise InvalidLockArgumentType(f"rollback_on_loss must be True or False, not {rollback_on_loss!r}",
                                      lock_name=key)
    if using is not None and not isinstance(using, str):
        raise InvalidLockArgumentType(f"using must be a database alias (a str), not {using!r}", lock_name=key)
    if auto_renew and timeout is None:
        raise InvalidLockArgument("auto_renew needs a timeout to renew", lock_name=key)
    check_number("max_hold", max_hold, allow_none=True, positive=True, lock_name=key)
    if max_hold is not None and auto_renew is False:
        raise InvalidLockArgument("max_hold caps a renewed hold: it needs auto_renew", lock_name=key)
    if max_hold is not None and isinstance(timeout, (int, float)) and max_hold < timeout:
        raise InvalidLockArgument(f"max_hold ({max_hold}s) must be at least timeout ({timeout}s)", lock_name=key)
    if on_contended is not None and not isinstance(on_contended, str):
        raise InvalidLockArgumentType(f"on_contended must be one of {ON_CONTENDED}, not {on_contended!r}",
                                      lock_name=key)
    if on_contended is not None and on_contended not in ON_CONTENDED:
        raise InvalidLockArgument(f"on_contended must be one of {ON_CONTENDED}, not {on_contended!r}", lock_name=key)
    return timeout


def check_mode(key: Any, mode: Optional[str], *, limit: Optional[int], redlock: bool) -> None:
    """``mode`` of ``locked(...)``: ``None`` (a lock), ``"read"`` or ``"write"`` (that side of a
    read-write lock), which neither ``limit`` (a semaphore) nor ``redlock=True`` can be."""
    if mode is None:
        return
    if not isinstance(mode, str):
        raise InvalidLockArgumentType(f"mode must be 'read' or 'write', not {mode!r}", lock_name=key)
    if mode not in MODES:
        raise InvalidLockArgument(f"mode must be 'read' or 'write', not {mode!r}", lock_name=key)
    if limit is not None:
        raise InvalidLockArgument(f"mode={mode!r} takes a read-write lock: it cannot be combined with limit "
                                  "(a semaphore)", lock_name=key)
    if redlock:
        raise InvalidLockArgument(f"mode={mode!r} takes a read-write lock on the configured Redis: it cannot be "
                                  "combined with redlock=True", lock_name=key)


def check_redlock_settings(key: Any, timeout: Any, settings: Optional[CoordSettings] = None) -> None:
    """For ``redlock=True``: refuse settings without masters or with no default timeout.

    When decorating (``settings`` None), only once Django's settings are configured and valid
    (otherwise the call itself raises the error)."""
    if settings is None:
        from django.conf import settings as django_settings

        if not django_settings.configured:
            return
        try:
            settings = coord_settings()
        except ImproperlyConfigured:
            return
    if not settings.redlock:
        raise ImproperlyConfigured(
            f"@locked(redlock=True) on {key!r} needs Redlock masters: set "
            'DJANGO_REDIS_COORD["REDLOCK"] = {"MASTERS": ["redis://host-a:6379/0", ...]}.'
        )
    if timeout is DEFAULT and settings.default_timeout is None:
        raise InvalidLockArgument(
            "redlock=True needs a timeout: a Redlock always expires (DEFAULT_TIMEOUT is None; pass timeout=...)",
            lock_name=key,
        )


def checked_on_contended(value: Optional[str], key: Any, *, retry: bool = True) -> str:
    """``on_contended`` of ``locked(...)``: ``"raise"`` (the default, :class:`LockContended`),
    ``"skip"`` (return a :class:`~django_redis_coord.contention.Skipped`) or ``"retry"`` (a Celery
    task retries later: :mod:`django_redis_coord.celery`).  With ``retry=False`` (Django's tasks
    framework, which has no retry API) ``"retry"`` is refused."""
    if value is None:
        return "raise"
    if not isinstance(value, str):
        raise InvalidLockArgumentType(f"on_contended must be one of {ON_CONTENDED}, not {value!r}", lock_name=key)
    if value not in ON_CONTENDED:
        raise InvalidLockArgument(f"on_contended must be one of {ON_CONTENDED}, not {value!r}", lock_name=key)
    if value == "retry" and not retry:
        raise InvalidLockArgument(
            "on_contended='retry' needs a task queue that can retry a task later; Django's tasks framework "
            "has no retry API: use 'skip' or 'raise'", lock_name=key,
        )
    return value


def check_flavour(locked: Any, is_async: bool, name: str) -> None:
    """Refuse, when decorating ``name``, the options its flavour (sync or ``async def``) cannot honour."""
    if is_async and locked.rollback_on_loss:
        raise ImproperlyConfigured(f"rollback_on_loss needs a sync view: Django's transactions are sync-only ({name}).")
    if is_async and locked.on_contended == "retry":
        raise ImproperlyConfigured(
            f"on_contended='retry' retries a Celery task, and Celery runs sync functions only ({name})."
        )
    if not is_async and iscoroutinefunction(locked.handler):
        raise ImproperlyConfigured(
            f"The contention handler {locked.handler!r} is async, and {name} is sync: give it a sync one."
        )
