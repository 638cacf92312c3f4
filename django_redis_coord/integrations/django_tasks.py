"""Unique tasks for Django's tasks framework: at most one pending-or-running instance per key.

>>> from django_redis_coord.tasks import unique_task               # doctest: +SKIP
>>> @unique_task("sync-account:{account_id}")                      # doctest: +SKIP
... @task
... def sync_account(account_id): ...

Works with ``django.tasks`` (Django 6.0) and the ``django-tasks`` backport (``django_tasks``).
Two holds per key, both ordinary locks of the library (listed by ``manage.py locks`` and the admin
page, their label naming the task):

* ``<key>:pending`` — taken by ``enqueue()`` / ``aenqueue()`` before the task is enqueued, with the
  token and the key handed to the run in the keyword argument :data:`RESERVATION_ARGUMENT` (the run
  uses the key rendered at the enqueue: arguments arrive through JSON, a tuple as a list); it lives at most
  ``pending_timeout`` seconds: a task nobody runs in that time no longer blocks the key.
* ``<key>`` — taken by the run (renewed by the watchdog every ``timeout / 3``), which then ends the
  pending hold with that token; released when the run ends.  A killed worker's hold ends with its
  TTL: at most ``timeout`` seconds after the kill.

``enqueue()`` takes the pending hold, then checks that no run holds ``<key>``: so between the
enqueue and the run's end there is always one of the two holds, and a second ``enqueue()`` is
refused (:class:`TaskAlreadyEnqueued`, or the existing result with ``on_duplicate="existing"``).
The whole story is in ``docs/tasks.md``.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

from asgiref.sync import iscoroutinefunction

from ..config.connection import get_async_client, get_client
from ..config.settings import coord_settings
from ..config.shortcuts import DEFAULT, alock, lock
from ..config.signalling import retry_after
from ..core.exceptions import InvalidLockArgument, InvalidLockArgumentType, LockContended, LockNotOwnedError
from ..core.holders import HolderInfo, async_lock_holder, lock_holder
from ..decorator.contention import Skipped, is_skipped
from ..decorator.options import checked_on_contended
from ..decorator.release import arelease_logged, release_logged
from ..decorator.task_objects import is_task, with_func
from ..key_templates.filling import name_sync
from ..key_templates.template import KeyTemplate

__all__ = [
    "unique_task",
    "TaskAlreadyEnqueued",
    "RESERVATION_ARGUMENT",
    "ON_DUPLICATE",
    "Skipped",
    "is_skipped",
]

#: The keyword argument carrying the pending hold's token and the key from ``enqueue()`` to the
#: run, ``{"token": ..., "key": ...}`` (it is visible in the stored result's ``kwargs``; the task
#: function never receives it).
RESERVATION_ARGUMENT = "_dcoord_reservation"

#: What a refused ``enqueue()`` does: raise :class:`TaskAlreadyEnqueued`, or return the existing
#: ``TaskResult`` when its id is known (raising otherwise).
ON_DUPLICATE = ("raise", "existing")

#: Suffix of the pending hold's name, and of the string that records its result id.
PENDING_SUFFIX = ":pending"
RESULT_SUFFIX = ":dcoord:task-result"

#: Default ``pending_timeout``: a task not started within an hour of its enqueue frees its key.
DEFAULT_PENDING_TIMEOUT = 3600.0


class TaskAlreadyEnqueued(LockContended):
    """``enqueue()`` of a unique task whose key has an instance pending or running."""

    __module__ = "django_redis_coord.tasks"  # its documented path

    def __init__(self, message: str, *, lock_name: str, state: str, result_id: Optional[str],
                 retry_after: Optional[int]) -> None:
        super().__init__(message, lock_name=lock_name, retry_after=retry_after)
        #: ``"pending"`` (enqueued, not started) or ``"running"``.
        self.state = state
        #: The existing instance's result id, when known (see docs/tasks.md).
        self.result_id = result_id


@dataclass(frozen=True)
class _Uniqueness:
    """One ``unique_task(...)``: how its keys are named and how long its holds live."""

    key: KeyTemplate
    pending_timeout: float
    timeout: Any
    on_duplicate: str
    on_contended: str
    path: str

    def name(self, args: tuple, kwargs: dict) -> str:
        return name_sync(self.key, {}, args, kwargs)[1]

    def pending(self, name: str, *, is_async: bool) -> Any:
        make = alock if is_async else lock
        hold = make(name + PENDING_SUFFIX, timeout=self.pending_timeout, auto_renew=False,
                    label=f"task {self.path} (pending)", template=self.key.metric_template)
        hold.holder_fields = self.holder_fields(name, "pending", None)
        return hold

    def running(self, name: str, result_id: Optional[str], *, is_async: bool) -> Any:
        make = alock if is_async else lock
        label = f"task {self.path}" + (f" (result {result_id})" if result_id else "")
        hold = make(name, timeout=self.timeout, auto_renew=self.timeout is not None, label=label,
                    template=self.key.metric_template)
        hold.holder_fields = self.holder_fields(name, "running", result_id)
        return hold

    def holder_fields(self, name: str, state: str, result_id: Optional[str]) -> dict[str, Any]:
        """What operators see of a hold of this task (``HolderInfo.extra``): the task, its key
        (rendered from the arguments), ``pending`` or ``running``, and the result id when known."""
        fields = {"role": "task", "task": self.path, "key": name, "state": state}
        return {**fields, "result_id": result_id} if result_id else fields

    def record_key(self, name: str) -> str:
        return f"{coord_settings().prefixed(name + PENDING_SUFFIX)!s}{RESULT_SUFFIX}"

    def refusal(self, name: str, state: str, result_id: Optional[str], pttl: Optional[int],
                holder: Optional[HolderInfo] = None) -> TaskAlreadyEnqueued:
        """The refusal of an enqueue; ``holder``: who holds the key, when it was read (running)."""
        retry_after = math.ceil(pttl / 1000) if pttl is not None and pttl > 0 else None
        if state == "running" and holder is not None and holder.extra.get("role") != "task":
            # A lock(), @locked or a command holds the same key: no instance of a task runs.
            message = (f"{self.path}: {name!r} is held by a lock that is not a task's "
                       f"(lock(), @locked or a command on the same key)")
        else:
            known = f" (result {result_id})" if result_id else ""
            message = f"{self.path} is already {state} for {name!r}{known}"
        return TaskAlreadyEnqueued(message, lock_name=name, state=state, result_id=result_id, retry_after=retry_after)


def _uniqueness(task: Any) -> _Uniqueness:
    return task.func.unique_task  # type: ignore[no-any-return]


def _result_id(record: Any, token: Optional[bytes]) -> Optional[str]:
    """The result id in ``record`` ("token id") when it belongs to the hold of ``token``."""
    if record is None or token is None:
        return None
    if isinstance(record, str):
        record = record.encode()
    recorded_token, _, result_id = record.partition(b" ")
    return result_id.decode() if recorded_token == token and result_id else None


def _running_id(label: Optional[str]) -> Optional[str]:
    if label and label.endswith(")") and " (result " in label:
        return label.rsplit(" (result ", 1)[1][:-1]
    return None


class _UniqueTask:
    """Mixed into the task's own ``Task`` class: ``enqueue()`` and ``aenqueue()`` reserve the key."""

    __slots__ = ()

    def enqueue(self, *args: Any, **kwargs: Any) -> Any:
        unique = _uniqueness(self)
        name = unique.name(args, kwargs)
        token = secrets.token_hex(16)
        pending = unique.pending(name, is_async=False)
        if not pending.acquire(blocking=False, token=token):
            return self._duplicate(unique, name, "pending")
        try:
            if unique.running(name, None, is_async=False).locked():
                release_logged(pending)
                return self._duplicate(unique, name, "running")
            result = super().enqueue(*args, **kwargs, **_reservation(token, name))  # type: ignore[misc]
        except BaseException:
            release_logged(pending)
            raise
        get_client().set(unique.record_key(name), f"{token} {result.id}", px=int(unique.pending_timeout * 1000))
        return result

    async def aenqueue(self, *args: Any, **kwargs: Any) -> Any:
        unique = _uniqueness(self)
        name = unique.name(args, kwargs)
        token = secrets.token_hex(16)
        pending = unique.pending(name, is_async=True)
        if not await pending.acquire(blocking=False, token=token):
            return await self._aduplicate(unique, name, "pending")
        try:
            if await unique.running(name, None, is_async=True).locked():
                await arelease_logged(pending)
                return await self._aduplicate(unique, name, "running")
            result = await super().aenqueue(*args, **kwargs, **_reservation(token, name))  # type: ignore[misc]
        except BaseException:
            await arelease_logged(pending)
            raise
        await get_async_client().set(unique.record_key(name), f"{token} {result.id}",
                                     px=int(unique.pending_timeout * 1000))
        return result

    def _duplicate(self, unique: _Uniqueness, name: str, state: str) -> Any:
        client = get_client()
        settings = coord_settings()
        if state == "pending":
            key = settings.prefixed(name + PENDING_SUFFIX)
            token, record, pttl = client.get(key), client.get(unique.record_key(name)), client.pttl(key)
            result_id = _result_id(record, token)
        else:
            key = settings.prefixed(name)
            holder = lock_holder(client, key)
            result_id, pttl = _running_id(holder.label if holder else None), client.pttl(key)
        refusal = unique.refusal(name, state, result_id, pttl, holder if state == "running" else None)
        if unique.on_duplicate == "existing" and result_id is not None:
            return self.get_result(result_id)  # type: ignore[attr-defined]
        raise refusal

    async def _aduplicate(self, unique: _Uniqueness, name: str, state: str) -> Any:
        client = get_async_client()
        settings = coord_settings()
        if state == "pending":
            key = settings.prefixed(name + PENDING_SUFFIX)
            token, record = await client.get(key), await client.get(unique.record_key(name))
            result_id, pttl = _result_id(record, token), await client.pttl(key)
        else:
            key = settings.prefixed(name)
            holder = await async_lock_holder(client, key)
            result_id, pttl = _running_id(holder.label if holder else None), await client.pttl(key)
        refusal = unique.refusal(name, state, result_id, pttl, holder if state == "running" else None)
        if unique.on_duplicate == "existing" and result_id is not None:
            return await self.aget_result(result_id)  # type: ignore[attr-defined]
        raise refusal


def _reservation(token: str, name: str) -> dict[str, dict[str, str]]:
    """The keyword argument an enqueue adds: the pending hold's token and the key."""
    return {RESERVATION_ARGUMENT: {"token": token, "key": name}}


# -- the run ---------------------------------------------------------------------------------------
def _reserved(unique: _Uniqueness, args: tuple, kwargs: dict) -> tuple[str, Optional[str]]:
    """The key and the pending hold's token of a run, taking :data:`RESERVATION_ARGUMENT` out of
    ``kwargs``: the key rendered at the enqueue (the arguments may have changed type on their way
    through JSON), or rendered here for a run enqueued without one (a bare token: an older enqueue)."""
    reservation = kwargs.pop(RESERVATION_ARGUMENT, None)
    if isinstance(reservation, dict) and isinstance(reservation.get("key"), str):
        token = reservation.get("token")
        return reservation["key"], token if isinstance(token, str) else None
    return unique.name(args, kwargs), reservation if isinstance(reservation, str) else None


def _end_pending(unique: _Uniqueness, name: str, token: Optional[str]) -> Optional[str]:
    """End the pending hold of ``token`` (when it is still that one); the result id recorded for it."""
    if token is None:
        return None
    pending = unique.pending(name, is_async=False)
    client = get_client()
    result_id = _result_id(client.get(unique.record_key(name)), token.encode())
    try:
        pending.do_release(token.encode())
    except LockNotOwnedError:  # expired (pending_timeout), or never taken: nothing to end
        pass
    return result_id


async def _aend_pending(unique: _Uniqueness, name: str, token: Optional[str]) -> Optional[str]:
    if token is None:
        return None
    pending = unique.pending(name, is_async=True)
    client = get_async_client()
    result_id = _result_id(await client.get(unique.record_key(name)), token.encode())
    try:
        await pending.do_release(token.encode())
    except LockNotOwnedError:
        pass
    return result_id


def _refused_run(unique: _Uniqueness, name: str, hold: Any) -> Any:
    seconds = retry_after(hold)
    if unique.on_contended == "skip":
        return Skipped(skipped=True, lock=name, retry_after=seconds)
    raise LockContended(f"{name!r} is held by another run of {unique.path}", lock_name=name, retry_after=seconds)


def _run_wrapper(func: Callable[..., Any], unique: _Uniqueness) -> Callable[..., Any]:
    """The task's function as the worker calls it: the run holds ``<key>`` and ends the pending hold.

    The pending hold ends only once the run holds ``<key>``, so an ``enqueue()`` in between
    always finds one of the two."""
    if iscoroutinefunction(func):

        @functools.wraps(func)
        async def arun(*args: Any, **kwargs: Any) -> Any:
            name, token = _reserved(unique, args, kwargs)
            probe = get_async_client()
            record = await probe.get(unique.record_key(name)) if token else None
            hold = unique.running(name, _result_id(record, token.encode()) if token else None, is_async=True)
            acquired = await hold.acquire(blocking=False)
            await _aend_pending(unique, name, token)
            if not acquired:
                return _refused_run(unique, name, hold)
            try:
                return await func(*args, **kwargs)
            finally:
                await arelease_logged(hold)

        arun.unique_task = unique  # type: ignore[attr-defined]
        return arun

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        name, token = _reserved(unique, args, kwargs)
        record = get_client().get(unique.record_key(name)) if token else None
        hold = unique.running(name, _result_id(record, token.encode()) if token else None, is_async=False)
        acquired = hold.acquire(blocking=False)
        _end_pending(unique, name, token)
        if not acquired:
            return _refused_run(unique, name, hold)
        try:
            return func(*args, **kwargs)
        finally:
            release_logged(hold)

    run.unique_task = unique  # type: ignore[attr-defined]
    return run


_unique_classes: dict[type, type] = {}


def _unique_class(base: type) -> type:
    """``base`` (the framework's ``Task``, or a backend's ``task_class``) with :class:`_UniqueTask` mixed in."""
    cls = _unique_classes.get(base)
    if cls is None:
        cls = _unique_classes[base] = type(f"Unique{base.__name__}", (_UniqueTask, base), {"__slots__": ()})
    return cls


def unique_task(
    key: Union[str, Callable[..., Any]],
    *,
    pending_timeout: float = DEFAULT_PENDING_TIMEOUT,
    timeout: Any = DEFAULT,
    on_duplicate: str = "raise",
    on_contended: str = "skip",
) -> Callable[[Any], Any]:
    """Make a ``Task`` unique per ``key`` (a template over its arguments, or a callable of them).

    ``pending_timeout``: seconds a pending instance keeps the key before it starts (default one
    hour).  ``timeout``: the run's hold, renewed every ``timeout / 3`` while it runs (default
    ``DEFAULT_TIMEOUT``): how long a killed worker keeps the key.  ``on_duplicate``: ``"raise"``
    (:class:`TaskAlreadyEnqueued`) or ``"existing"`` (the existing ``TaskResult`` when its id is
    known).  ``on_contended``: what a run finding another run of the key does (``"skip"``:
    a :class:`~django_redis_coord.contention.Skipped` return value, ``"raise"``: :class:`LockContended`).
    """
    if not (isinstance(key, str) or callable(key)):
        raise InvalidLockArgumentType(f"unique_task needs a key template or callable, not {key!r}")
    if isinstance(pending_timeout, bool) or not isinstance(pending_timeout, (int, float)) or not (
        0 < pending_timeout <= 10 * 365 * 86400
    ):
        raise InvalidLockArgument(
            f"pending_timeout must be a number of seconds above 0 (at most ten years), not {pending_timeout!r}",
            lock_name=key,
        )
    if on_duplicate not in ON_DUPLICATE:
        raise InvalidLockArgument(f"on_duplicate must be one of {ON_DUPLICATE}, not {on_duplicate!r}", lock_name=key)
    contended = checked_on_contended(on_contended, key, retry=False)
    # The run's hold is checked (and NO_EXPIRY refused: a killed worker would keep the key) as @locked checks it.
    from ..decorator.options import checked_options

    timeout = checked_options(
        key, timeout=timeout, wait=0, limit=None, status=None, handler=None, template_name=None, auto_renew=None,
        rollback_on_loss=False, using=None, fail_open=None, label=None, params=None, redlock=False,
    )
    if timeout is None:
        raise InvalidLockArgument("unique_task needs a timeout: a killed worker's run would keep the key for ever",
                                  lock_name=key)

    def decorate(task: Any) -> Any:
        if not is_task(task):
            raise InvalidLockArgumentType(
                f"unique_task decorates a Task (put it above @task), not {type(task).__name__}", lock_name=key
            )
        if isinstance(task, _UniqueTask):
            raise InvalidLockArgument("this task is unique already", lock_name=key)
        func = task.func
        path = f"{func.__module__}.{func.__qualname__}"
        template = KeyTemplate(key, path)
        template.check_against(func, view_names=False)
        unique = _Uniqueness(template, float(pending_timeout), timeout, on_duplicate, contended, path)
        return with_func(task, _run_wrapper(func, unique), _unique_class(type(task)))

    return decorate
