"""Celery tasks that run once: ``@locked`` on tasks, and :class:`UniqueTask` (one pending-or-running
instance per key).

Only this module imports Celery (``pip install django-redis-coord[celery]``); the rest of the
package never does.  The whole story is in ``docs/tasks.md``.

* Run-time exclusion: ``@locked(...)`` under ``@app.task`` or over a task object; when the key is
  taken, ``on_contended`` says what happens: ``"raise"`` (``LockContended``), ``"skip"`` (the task
  returns ``None``) or ``"retry"`` (``task.retry(countdown=<the Retry-After estimate>)``).
* Enqueue-time uniqueness: ``@app.task(base=UniqueTask, unique_key="report:{day}")``.  ``delay``
  / ``apply_async`` reserve the key before sending (a lock hold whose token names the task id,
  with a TTL covering the wait in the queue); the worker takes the key over with a fresh fence
  when the task starts (one MULTI/EXEC: the reservation's release and the run's grant, to a token
  of its own attempt), renews it while it runs and releases it when it ends.  A retry sent by the
  run makes the run hand the key back to a reservation when it ends, whatever way it ends, and
  only if it still holds it (WATCH/MULTI/EXEC); a retry that starts while an earlier attempt still
  runs waits for it (``retry(throw=False)``).  A revoke, a hard time limit or a lost child process
  releases it from the worker's main process; a worker killed outright leaves it to its TTL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Optional, Union

from celery import Task
from celery.exceptions import WorkerLostError
from celery.signals import task_revoked
from celery.worker.request import Request

from ..config.connection import get_client
from ..config.settings import coord_settings
from ..config.signalling import DjangoSignals, app_name, retry_after
from ..core.arguments import check_number
from ..core.exceptions import InvalidLockArgument, InvalidLockArgumentType, LockContended, LockError, LockNotOwnedError
from ..core.lock.handover import HandOver
from ..core.lock.sync import Lock
from ..decorator.contention import retry_contended
from ..key_templates.filling import call_namespace, checked_name
from ..key_templates.template import KeyTemplate

__all__ = [
    "UniqueTask",
    "DuplicateTask",
    "SKIPPED",
    "retry_contended",
    "task_token",
    "TOKEN_PREFIX",
]

logger = logging.getLogger("django_redis_coord")

#: The token of a task's hold is this prefix and the task id (its reservation), followed by
#: :data:`ATTEMPT_MARK` and the attempt's number (``request.retries``) while an attempt runs: the
#: enqueuer, the worker running it and the worker's main process (after a revoke or a time limit)
#: all know it, and no attempt can end or renew another one's hold.
TOKEN_PREFIX = "celery-task:"
ATTEMPT_MARK = "#attempt-"
#: What ``apply_async`` of a :class:`UniqueTask` does with a duplicate: return the pending (or
#: running) instance's ``AsyncResult``, or raise :class:`DuplicateTask`.
ON_DUPLICATE = ("return", "raise")
#: What a :class:`UniqueTask` returns (its result) when its key was taken when it started.
SKIPPED = None
#: How many times an enqueue tries to reserve a key that was freed between its refusal and the
#: read of who held it.
RESERVE_ATTEMPTS = 3


class DuplicateTask(LockContended):
    """An enqueue of a :class:`UniqueTask` refused: an instance for the same key is pending or running.

    ``task_id``: that instance's id (``None`` when the key is held by something else than a task).
    """

    __module__ = "django_redis_coord.celery"  # its documented path

    def __init__(self, message: str, *, lock_name: Any, task_id: Optional[str], retry_after: Optional[int] = None):
        super().__init__(message, lock_name=lock_name, retry_after=retry_after)
        self.task_id = task_id


def task_token(task_id: str, attempt: Optional[int] = None) -> bytes:
    """The token of the reservation of the task ``task_id``, or of the run of its attempt number
    ``attempt`` (0 for the first run, then ``request.retries``)."""
    suffix = "" if attempt is None else f"{ATTEMPT_MARK}{attempt}"
    return (TOKEN_PREFIX + task_id + suffix).encode()


def _task_id_of(token: Any) -> Optional[str]:
    """The task id a hold's token names (``None``: not a task's token)."""
    text = token.decode(errors="replace") if isinstance(token, bytes) else None
    if not text or not text.startswith(TOKEN_PREFIX):
        return None
    task_id, mark, attempt = text[len(TOKEN_PREFIX):].rpartition(ATTEMPT_MARK)
    return task_id if mark and attempt.isdigit() else text[len(TOKEN_PREFIX):]


# -- the lock of a task's key ------------------------------------------------------------------------
def _task_lock(name: str, timeout: float, *, label: str, auto_renew: bool,
               template: Optional[str] = None) -> Lock:
    """A lock on ``KEY_PREFIX:name`` of the configured Redis, with a hand-over hook
    (:class:`~django_redis_coord.core.lock.handover.HandOver`: the run takes its reservation over,
    and a run that sent a retry hands the key to the retry's reservation, each in one step); a
    renewed one logs its loss (besides the ``lock_lost`` signal and ``valid``)."""
    settings = coord_settings()
    lock = Lock(get_client(), settings.prefixed(name), timeout=timeout, auto_renew=auto_renew,
                label=label, events=DjangoSignals(name, template=template),
                on_lost=_log_lost_run if auto_renew else None)
    lock.hand_over = HandOver()
    return lock


def _log_lost_run(hold: Lock) -> None:
    logger.error("%s: the run's hold on %r was lost (a renewal came too late): another instance may start "
                 "while this one still runs", hold.label, app_name(hold))


def _release_quietly(hold: Lock) -> None:
    try:
        hold.release()
    except LockError as exc:  # its TTL ran out, or it was taken over: nothing left to end
        logger.warning("%r: the task's hold had ended before its release (%s)", app_name(hold), exc)


# -- unique tasks ------------------------------------------------------------------------------------
class UniqueRequest(Request):
    """The worker's main process's view of a :class:`UniqueTask` run: on a hard time limit the
    pool kills the child, which never releases its hold; this releases it (every Celery 5)."""

    def on_timeout(self, soft: bool, timeout: float) -> None:
        super().on_timeout(soft, timeout)
        if not soft:
            _release_for(self.task, self.id, self.args, self.kwargs, "TimeLimitExceeded", _attempt_of(self))

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> None:
        """A lost pool process (killed: out of memory, SIGKILL) never released its hold.  The
        attempt has ended whatever the failure: releasing its own token cannot touch another's."""
        super().on_failure(exc_info, send_failed_event, return_ok)
        exc = getattr(exc_info.exception, "exc", exc_info.exception)
        if isinstance(exc, (WorkerLostError, SystemExit, KeyboardInterrupt)):
            _release_for(self.task, self.id, self.args, self.kwargs, "WorkerLostError", _attempt_of(self))


def _attempt_of(request: Any) -> int:
    """The attempt number (``retries``) of a request seen by the worker's main process."""
    return int((getattr(request, "request_dict", None) or {}).get("retries") or 0)


class UniqueTask(Task):
    """A task with at most one pending-or-running instance per key (``unique_key``).

    Options (task options: ``@app.task(base=UniqueTask, unique_key=..., ...)``):

    * ``unique_key``: a ``str.format`` template over the task's arguments by name
      (``"report:{day}"``), or a callable taking the task's arguments and returning the key;
      default: the task's name (one instance at all).
    * ``unique_pending_timeout`` (seconds, default 3600): how long a reservation waits in the
      queue before its key is free again, counted from the planned start (``countdown``/``eta``).
    * ``unique_timeout`` (seconds, default 60): the run's hold, renewed every third of it while
      the task runs; the bound after which a worker killed outright frees the key.
    * ``unique_on_duplicate``: ``"return"`` (default: the pending instance's ``AsyncResult``) or
      ``"raise"`` (:class:`DuplicateTask`).
    """

    abstract = True
    Request = UniqueRequest
    unique_key: Union[str, Callable[..., Any], None] = None
    unique_pending_timeout: float = 3600.0
    unique_timeout: float = 60.0
    unique_on_duplicate: str = "return"

    _unique_template: Optional[KeyTemplate] = None

    # -- the key --------------------------------------------------------------------------------
    def _key_template(self) -> KeyTemplate:
        template = self._unique_template
        if template is None or template.default_name != self.name:
            self._check_unique_options()
            template = KeyTemplate(self.unique_key, self.name)
            template.check_against(self.run, view_names=False)
            self._unique_template = template
        return template

    def _check_unique_options(self) -> None:
        for option in ("unique_pending_timeout", "unique_timeout"):
            check_number(option, getattr(self, option), allow_none=False, positive=True, lock_name=self.name)
        if self.unique_on_duplicate not in ON_DUPLICATE:
            raise InvalidLockArgument(
                f"unique_on_duplicate must be one of {ON_DUPLICATE}, not {self.unique_on_duplicate!r}",
                lock_name=self.name,
            )
        if self.unique_key is not None and not isinstance(self.unique_key, str) and not callable(self.unique_key):
            raise InvalidLockArgumentType(f"unique_key must be a str template or a callable, not "
                                          f"{type(self.unique_key).__name__}", lock_name=self.name)

    def unique_name(self, args: Any = None, kwargs: Any = None) -> str:
        """The key of a call with ``args`` and ``kwargs`` (without ``KEY_PREFIX``)."""
        key = self._key_template()
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        if key.callable is not None:
            return checked_name(key.callable(*args, **kwargs), key)
        return key.render(call_namespace(key, {}, args, kwargs))

    # -- enqueue ----------------------------------------------------------------------------------
    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: Optional[str] = None,
                    producer: Any = None, link: Any = None, link_error: Any = None, shadow: Any = None,
                    **options: Any) -> Any:
        """Reserve the key, then send; a duplicate gets the pending instance's ``AsyncResult``
        (``unique_on_duplicate="return"``) or :class:`DuplicateTask`."""
        name = self.unique_name(args, kwargs)
        running = self._running_hold(task_id)
        if running is not None and app_name(running) == name:  # a retry of the run: it keeps the key
            running.hand_over.hands_to = self._hold(name, self._pending_ttl(options), task_id, "retrying")
            try:
                return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
            except BaseException:
                running.hand_over.hands_to = None  # not sent: nothing to keep the key for
                raise
        task_id = task_id or _new_task_id()
        reservation = self._hold(name, self._pending_ttl(options), task_id, "pending")
        holder = None
        for _ in range(RESERVE_ATTEMPTS):
            if reservation.acquire(token=task_token(task_id), blocking=False):
                break
            holder = reservation.redis.get(reservation.name)
            if holder is not None:
                return self._duplicate(name, reservation, holder)
            # The instance that held the key ended between the refusal and the read: try again.
        else:
            return self._duplicate(name, reservation, holder)
        try:
            return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        except BaseException:
            _release_quietly(reservation)  # not sent: not pending
            raise

    def _pending_ttl(self, options: dict[str, Any]) -> float:
        """The reservation's TTL: ``unique_pending_timeout`` after the planned start."""
        delay = float(options.get("countdown") or 0)
        eta = options.get("eta")
        if isinstance(eta, datetime):
            now = datetime.now(timezone.utc) if eta.tzinfo else datetime.now()
            delay = max(delay, (eta - now).total_seconds())
        return float(self.unique_pending_timeout) + max(0.0, delay)

    def _hold(self, name: str, timeout: float, task_id: Optional[str], phase: str,
              auto_renew: bool = False) -> Lock:
        """The lock of key ``name`` for task ``task_id`` in ``phase`` (``pending``, ``running``,
        ``retrying``...): labelled ``celery <task>[<id>] <phase>``, its holder record naming the
        task, its id, the phase and the key for operators (``HolderInfo.extra``)."""
        hold = _task_lock(name, timeout, label=f"celery {self.name}[{task_id}] {phase}", auto_renew=auto_renew,
                          template=self._key_template().metric_template)
        hold.holder_fields = {"role": "task", "task": self.name, "task_id": task_id, "state": phase, "key": name}
        return hold

    def _duplicate(self, name: str, reservation: Lock, holder: Optional[bytes]) -> Any:
        pending = _task_id_of(holder)
        if self.unique_on_duplicate == "return" and pending is not None:
            logger.info("%s(%r): already pending or running as %s", self.name, name, pending)
            return self.AsyncResult(pending)
        if pending is not None:
            why = f"is already pending or running as task {pending}"
        elif holder is None:
            why = "was held when this one was sent (the hold has ended since)"
        else:  # a lock(), @locked or a command holding the same key: no task of this name
            why = "is held by a lock that is not a task's (lock(), @locked or a command on the same key)"
        raise DuplicateTask(f"{self.name}: {name!r} {why}", lock_name=name, task_id=pending,
                            retry_after=retry_after(reservation))

    # -- run ----------------------------------------------------------------------------------------
    def _running_hold(self, task_id: Optional[str]) -> Optional[Lock]:
        request = self.request
        if task_id is None or request.called_directly or request.id != task_id:
            return None
        return getattr(request, "coord_unique_hold", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.called_directly:  # task(...) in the caller's process: a plain call
            return super().__call__(*args, **kwargs)
        name = self.unique_name(args, kwargs)
        hold = self._hold(name, self.unique_timeout, request.id, "running", auto_renew=True)
        hold.hand_over.replaces = task_token(request.id)
        token = task_token(request.id, int(request.retries or 0))
        if not hold.acquire(token=token, blocking=False):
            if _task_id_of(hold.redis.get(hold.name)) != request.id:
                logger.warning("%s[%s]: %r is held by another instance (this one's reservation had expired): "
                               "skipped", self.name, request.id, name)
                return SKIPPED
            # An earlier attempt still runs (it sent this retry without ending: retry(throw=False)):
            # this one starts when that one ends, which hands the key to the first in line.
            logger.info("%s[%s]: waiting for the earlier attempt to end", self.name, request.id)
            if not hold.acquire(token=token, blocking=True):
                return SKIPPED
        request.coord_unique_hold = hold
        try:
            return super().__call__(*args, **kwargs)
        finally:
            # To the retry's reservation when this run sent a retry (apply_async set hand_over.hands_to),
            # whether it raised Retry, returned or failed: that message runs whatever this one did.
            _release_quietly(hold)


def _new_task_id() -> str:
    from celery.utils import uuid

    return str(uuid())


# -- the worker's main process: holds of children that will never release them --------------------------
def _release_for(task: Any, task_id: Optional[str], args: Any, kwargs: Any, why: str,
                 attempt: Optional[int]) -> None:
    """End the hold of ``task_id`` on its key, its run's (attempt number ``attempt``) or, with
    ``None``, its reservation's: it ended without releasing it."""
    if not isinstance(task, UniqueTask) or not task_id:
        return
    try:
        name = task.unique_name(args, kwargs)
        lock = task._hold(name, task.unique_timeout, task_id, why)
        lock.do_release(task_token(task_id, attempt))
    except LockNotOwnedError:
        return  # released already, or another instance's by now
    except Exception:  # a signal receiver must not break the worker: the TTL ends the hold
        logger.exception("%s[%s]: could not release %s's hold; it ends with its TTL", task.name, task_id, why)
        return
    logger.info("%s[%s]: released the key %r (%s)", task.name, task_id, name, why)


@task_revoked.connect(weak=False)
def _on_revoked(sender: Any = None, request: Any = None, terminated: bool = False, expired: bool = False,
                **_: Any) -> None:
    """A revoked task gives its key back: its run's hold when terminated while running, else its
    reservation."""
    if request is not None:
        _release_for(sender, getattr(request, "id", None), getattr(request, "args", ()),
                     getattr(request, "kwargs", {}), "revoked", _attempt_of(request) if terminated else None)

