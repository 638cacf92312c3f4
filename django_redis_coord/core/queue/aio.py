"""The asyncio side of a queued primitive (a lock, a semaphore), over ``redis.asyncio``: the twin
of :mod:`django_redis_coord.core.queue.sync`, with the same names and shape.  A hold (or a semaphore's
anonymous permits) belongs to the asyncio *task* that took it (:class:`TaskLocal`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any, Optional

from redis.exceptions import RedisError

from .. import watchdog as _watchdog
from ..concurrency import in_background, run_to_completion
from ..grants import OUTAGE_ERRORS, Grant, Outage
from ..lock.rules import LockBase
from ..rwlock.rules import RWLockBase
from ..scripts import async_scripts
from ..semaphore.rules import SemaphoreBase
from ..waiting import aio as waiting
from .rules import GIVE_BACK_TRIES, NO_REPLY, InFlight, QueuedBase

__all__ = ["LockHeldPerTask", "QueuedPrimitive", "RWLockHeldPerTask", "SemaphoreHeldPerTask", "TaskLocal"]

logger = logging.getLogger("django_redis_coord")

#: The blocking acquires of this process's tasks queued or about to queue, per name (see :class:`InFlight`).
_in_flight = InFlight()


def _cancels() -> int:
    """How many cancellations of the current task are pending (``Task.cancelling()``, Python
    3.11+; 0 before)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def _cancel_swallowed(before: int) -> None:
    """Raise the ``CancelledError`` of a cancellation requested since ``before`` (see
    :func:`_cancels`) that nothing raised: Python 3.11's ``asyncio.wait_for``, which redis-py sends
    and reads through, swallows one that comes as its call completes.  The task still counts it."""
    if _cancels() > before:
        raise asyncio.CancelledError


class TaskLocal:
    """Attribute storage private to the current asyncio task (or to the thread outside a loop)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_by_task", weakref.WeakKeyDictionary())
        object.__setattr__(self, "_outside", SimpleNamespace(token=None))

    def _space(self) -> SimpleNamespace:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is None:
            return object.__getattribute__(self, "_outside")
        by_task = object.__getattribute__(self, "_by_task")
        space = by_task.get(task)
        if space is None:
            space = by_task[task] = SimpleNamespace(token=None)
        return space

    def __getattr__(self, name: str) -> Any:
        return getattr(self._space(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._space(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._space(), name)

    def space(self) -> SimpleNamespace:
        """The namespace of the current task (what the watchdog keeps a reference to)."""
        return self._space()


class QueuedPrimitive(QueuedBase):
    """The asyncio side of a queued primitive; see :class:`django_redis_coord.core.queue.sync.QueuedPrimitive`."""

    scripts = async_scripts
    _report_loss = QueuedBase._atell_lost

    def _watchdog(self) -> Any:
        return _watchdog.async_watchdog()

    @staticmethod
    def _worker() -> str:
        """Who is acquiring, for the holder metadata: the current task's name."""
        task = asyncio.current_task()
        return task.get_name() if task is not None else "asyncio"

    def _after_loss(self, result: Any) -> None:
        if asyncio.iscoroutine(result):
            in_background(result)

    async def _take(self, token: bytes, blocking: bool, stop_at: Optional[float],
                    own: bool = False) -> Optional[tuple[Grant, float]]:
        """Try once and, when ``blocking``, wait in line until ``stop_at``; see the sync twin.  A
        cancellation, or anything raised, undoes what a call may have done (:meth:`_abandon`)."""
        worker = self._worker()
        cancels = _cancels()
        hub: Any = None
        ticket: Optional[object] = None
        waiter: Optional[waiting.AsyncWaiter] = None
        try:
            try:
                if not blocking:
                    sent_at = time.monotonic()
                    grant = await self.do_acquire(token, self.acquire_mode(0, own), worker)
                    _cancel_swallowed(cancels)
                    return self.taken(grant, sent_at)
                hub = waiting.hub_for(self.redis)
                if not (self._contended or _in_flight.busy(self.keys.name)):
                    async with hub.gate_for(self.redis):  # bounds the calls of the loop's waiters (see waiting)
                        sent_at = time.monotonic()
                        grant = await self.do_acquire(token, self.acquire_mode(0, own), worker)
                    _cancel_swallowed(cancels)
                    if grant.acquired:
                        return grant, sent_at
                ticket = object()  # queued or about to queue: this process's later acquires queue after it
                _in_flight.enter(self.keys.name, ticket)
                waiter = await hub.register(self.redis, self.refresh_interval)
                sent_at = time.monotonic()
                async with waiter.gate:
                    grant = await self.do_acquire(token, self.acquire_mode(1, own), worker, waiter.reply_to())
                _cancel_swallowed(cancels)
                self._contended = not grant.acquired
                if not grant.acquired:
                    self._note_wait(grant)  # the waiting path (see core.reporting): tracing hears of it
                    grant, sent_at = await self._wait(token, worker, grant, stop_at, sent_at, own, waiter, cancels)
                return self.taken(grant, sent_at)
            finally:  # inside the undo's try: an exception raised here may follow a grant
                if ticket is not None:
                    _in_flight.leave(self.keys.name, ticket)
                if waiter is not None:
                    hub.unregister(waiter)
        except BaseException:
            # Cancelled, or anything raised, wherever (see the sync twin): leave the queue and give
            # back a grant, even though this task is being cancelled.
            await run_to_completion(self._abandon(token, worker, waiter))
            raise

    async def _wait(
        self, token: bytes, worker: str, grant: Grant, stop_at: Optional[float], sent_at: float,
        own: bool, waiter: waiting.AsyncWaiter, cancels: int,
    ) -> tuple[Grant, float]:
        """Wait in the queue until handed the hold, the holder expires or ``stop_at`` passes; see
        the sync twin."""
        queued_at = sent_at
        outage = Outage()
        while True:
            if stop_at is not None and time.monotonic() >= stop_at:
                async with waiter.gate:
                    called_at = time.monotonic()
                    return await self.do_cancel(token, worker), called_at
            budget = self.wait_budget(grant, stop_at)
            message = await waiter.wait(self.refresh_interval if budget is None
                                        else min(budget, self.refresh_interval))
            _cancel_swallowed(cancels)
            if message:
                grant = self.woken_grant(message)
                if grant.acquired:
                    return grant, queued_at
                continue  # told of a new holder's expiry: wait until then
            async with waiter.gate:
                called_at = time.monotonic()
                if stop_at is not None and called_at >= stop_at:
                    return await self.do_cancel(token, worker), called_at  # no refresh on the way out
                try:
                    grant = await self.do_acquire(token, self.acquire_mode(2, own), worker, waiter.reply_to())
                except OUTAGE_ERRORS:
                    grant = outage.began(called_at)  # raises once the outage lasted too long
                    continue
            outage.ended()
            _cancel_swallowed(cancels)  # a cancelled waiter must not take a grant (the caller gives it back)
            if grant.acquired:  # the reply's TTL is what was left when this call ran
                return grant, called_at
            queued_at = called_at  # a hand-off announced from now on came after this call ran

    async def _abandon(self, token: bytes, worker: str, waiter: Optional[waiting.AsyncWaiter] = None) -> None:
        """Undo an acquire stopped while a call of it may have reached Redis: leave the queue and
        give back a hold this token was granted, in one script; see the sync twin.  It runs to its
        end when the task is cancelled again (:func:`~django_redis_coord.core.concurrency.run_to_completion`);
        an exception a signal handler raises into it makes it try again."""
        for _ in range(GIVE_BACK_TRIES):
            try:
                async with waiter.gate if waiter is not None else nullcontext():
                    await self.do_cancel(token, worker, give_back=True)
                return
            except RedisError:  # the original error matters more; the TTL and the lease bound the rest
                return
            except Exception:  # interrupted: once more (the original exception is raised after)
                continue

    async def _extend_hold(self, hold: Any, ms: int, mode: str) -> bool:
        """Change the expiry of ``hold`` (its ``token`` and local ``deadline``) in Redis."""
        sent_at = time.monotonic()
        hold.deadline = self.deadline_for(sent_at, await self.do_extend(hold.token, ms, mode))
        if getattr(hold, "watched", False):  # a shorter deadline must not wait for the loop's next look
            self._watchdog().look_again()
        return True

    async def do_acquire(self, token: bytes, enqueue: int, worker: str,
                         reply_to: tuple[bytes, Any] = NO_REPLY) -> Grant:
        script = self.scripts.get(self.redis, self.acquire_script)
        reply = await script(self.acquire_keys(), self.acquire_args(token, enqueue, worker, reply_to),
                             client=self.redis)
        return self.grant_from_reply(reply)

    async def do_cancel(self, token: bytes, worker: str, give_back: bool = False) -> Grant:
        """Leave the queue; a hold this token has is kept, or with ``give_back`` released; see the sync twin."""
        script = self.scripts.get(self.redis, self.cancel_script)
        reply = await script(self.acquire_keys(), self.acquire_args(token, 3 if give_back else 2, worker),
                             client=self.redis)
        return Grant.from_reply(reply)

    async def do_release(self, token: bytes) -> Any:
        raise NotImplementedError

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        raise NotImplementedError


def _ended_holding(lock_ref: Any, hold: Any, token: bytes, task: asyncio.Future) -> None:
    """A task that took a hold of its own ended without releasing it: nothing can release it any
    more.  Say so, and stop renewing it, so that its TTL ends it."""
    if getattr(hold, "token", None) != token:
        return
    lock = lock_ref()
    if lock is None:
        return
    renewed = getattr(hold, "watched", False)
    if renewed:
        lock._watchdog().unregister(lock, hold)
    logger.warning(
        "The task that acquired lock %r ended without releasing it: no other task can release it, so it "
        "ends with its TTL%s.  Release it in the task that acquired it (asyncio.wait_for() runs the "
        "acquire in a task of its own before Python 3.12), or pass thread_local=False.",
        lock.name,
        " (its renewal was stopped)" if renewed else " (it has none: it stays held)" if lock.timeout is None else "",
    )


def _end_with_task(primitive: Any, hold: Any, token: bytes) -> None:
    """When ``hold`` belongs to the current task only, watch that task's end (see
    :func:`_ended_holding`); :func:`_off_task_end` undoes it at release."""
    task = asyncio.current_task() if isinstance(primitive.local, TaskLocal) else None
    if task is not None:  # a hold of this task only: nobody else can release it
        callback = functools.partial(_ended_holding, weakref.ref(primitive), hold, token)
        task.add_done_callback(callback)
        hold.task_end = (task, callback)  # removed on release (a long-lived task acquires many times)


def _off_task_end(hold: Any) -> None:
    task_end = getattr(hold, "task_end", None)
    if task_end is not None:
        hold.task_end = None
        task_end[0].remove_done_callback(task_end[1])


class LockHeldPerTask(QueuedPrimitive, LockBase):
    """Where an asyncio lock keeps its hold: per task (``thread_local``, the default), or one hold
    for every task.  The sync twin is :class:`django_redis_coord.core.queue.sync.LockHeldPerThread`; the
    lock's body, the same on both sides, is generated (docs/twins.md).

    A hold of one task only is watched: when that task ends without releasing it, nobody can
    release it any more; a warning says so, and its renewal stops, so that its TTL ends it.
    """

    def _new_local(self) -> Any:
        return TaskLocal() if self.thread_local else SimpleNamespace(token=None)

    def _state(self) -> Any:
        local = self.local
        return local.space() if isinstance(local, TaskLocal) else local

    def _own(self, token: bytes, grant: Grant, sent_at: float) -> Any:
        hold = super()._own(token, grant, sent_at)
        _end_with_task(self, hold, token)
        return hold

    def _detach(self, local: Any) -> None:
        """Take the hold ``local`` out of the watchdog and off its task's end (before it is released)."""
        if getattr(local, "watched", False):
            self._watchdog().unregister(self, local)
        _off_task_end(local)


class RWLockHeldPerTask(QueuedPrimitive, RWLockBase):
    """Where an asyncio read-write lock keeps its hold: per task (``thread_local``), or one hold
    for every task, watched as :class:`LockHeldPerTask` watches a lock's.  The sync twin is
    :class:`django_redis_coord.core.queue.sync.RWLockHeldPerThread`."""

    def _new_local(self) -> Any:
        return TaskLocal() if self.thread_local else SimpleNamespace(token=None)

    def _state(self) -> Any:
        local = self.local
        return local.space() if isinstance(local, TaskLocal) else local

    def _own(self, mode: str, token: bytes, grant: Grant, sent_at: float) -> Any:
        hold = super()._own(mode, token, grant, sent_at)
        _end_with_task(self, hold, token)
        return hold

    def _detach(self, local: Any) -> None:
        """Stop renewing the hold ``local`` and take it off its task's end (before it is released)."""
        self._stop_watching(local)
        _off_task_end(local)


class SemaphoreHeldPerTask(QueuedPrimitive, SemaphoreBase):
    """Where an asyncio semaphore keeps the permits taken without an identity: per task.  The
    sync twin is :class:`django_redis_coord.core.queue.sync.SemaphoreHeldPerThread`; the semaphore's body,
    the same on both sides, is generated (docs/twins.md)."""

    def _new_local(self) -> Any:
        return TaskLocal()

    def _stack(self) -> list[bytes]:
        space = self.local.space()
        stack = getattr(space, "stack", None)
        if stack is None:
            stack = space.stack = []
        return stack
