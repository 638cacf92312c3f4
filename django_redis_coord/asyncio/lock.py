"""The asyncio twin of :class:`django_redis_coord.locks.Lock`, over ``redis.asyncio``.

Same names, arguments and behaviour.  One difference from redis-py's asyncio lock: the hold is
kept per *task* (not per thread), so two tasks sharing one instance never release or extend each
other's hold.  Pass ``thread_local=False`` to share one hold between tasks deliberately.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections.abc import Awaitable
from contextlib import nullcontext
from types import SimpleNamespace, TracebackType
from typing import Any, Optional, Union

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import watchdog as _watchdog
from .._base import (
    NO_REPLY,
    OUTAGE_ERRORS,
    Grant,
    LockBase,
    Number,
    Outage,
    QueuedBase,
    as_bytes,
    check_number,
    encode_token,
    new_token,
    to_ms,
)
from .._tasks import in_background, run_to_completion
from ..exceptions import (
    InvalidLockArgument,
    LockError,
    LockLostError,
    LockNotOwnedError,
)
from ..scripts import async_scripts
from . import waiting

__all__ = ["Lock", "QueuedPrimitive"]

logger = logging.getLogger("django_redis_coord")


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


class _TaskLocal:
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


class QueuedPrimitive(QueuedBase):
    """The asyncio side of a queued primitive; see :class:`django_redis_coord.locks.QueuedPrimitive`."""

    scripts = async_scripts

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
        """Try once and, when ``blocking``, wait in line until ``stop_at``; see the sync twin."""
        worker = self._worker()
        cancels = _cancels()
        if not blocking:
            sent_at = time.monotonic()
            grant = await self._attempt(token, self.acquire_mode(0, own), worker, cancels, None)
            return (grant, sent_at) if grant.acquired else None
        hub = waiting.hub_for(self.redis)
        waiter = await hub.register(self.redis, self.refresh_interval)
        try:
            sent_at = time.monotonic()
            grant = await self._attempt(token, self.acquire_mode(1, own), worker, cancels, waiter)
            if not grant.acquired:
                try:
                    grant, sent_at = await self._wait(token, worker, grant, stop_at, sent_at, own, waiter, cancels)
                except BaseException:
                    # Cancelled or failed while queued: leave the queue (and return a hold just
                    # handed over) even though this task is being cancelled.
                    await run_to_completion(self._abandon(token, worker, waiter))
                    raise
        finally:
            hub.unregister(waiter)
        return (grant, sent_at) if grant.acquired else None

    async def _attempt(self, token: bytes, enqueue: int, worker: str, cancels: int,
                       waiter: Optional[waiting.AsyncWaiter]) -> Grant:
        """One acquire call; see the sync twin.  A cancellation undoes what the call may have done."""
        try:
            if waiter is None:
                grant = await self.do_acquire(token, enqueue, worker)
            else:
                async with waiter.gate:
                    grant = await self.do_acquire(token, enqueue, worker, waiter.reply_to)
            _cancel_swallowed(cancels)
        except (asyncio.CancelledError, RedisConnectionError, RedisTimeoutError):
            await run_to_completion(self._abandon(token, worker, waiter))
            raise
        return grant

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
                    return await self.do_cancel(token, worker), queued_at
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
                if stop_at is not None and time.monotonic() >= stop_at:
                    return await self.do_cancel(token, worker), queued_at  # no refresh on the way out
                called_at = time.monotonic()
                try:
                    grant = await self.do_acquire(token, self.acquire_mode(2, own), worker, waiter.reply_to)
                except OUTAGE_ERRORS:
                    grant = outage.began(called_at)  # raises once the outage lasted too long
                    continue
            outage.ended()
            _cancel_swallowed(cancels)  # a cancelled waiter must not take a grant (the caller gives it back)
            if grant.acquired:  # possibly handed over before this call: measure from the one before
                return grant, queued_at
            queued_at = called_at

    async def _abandon(self, token: bytes, worker: str, waiter: Optional[waiting.AsyncWaiter] = None) -> None:
        """Best effort after an interrupted wait: leave the queue, give back a hold just handed over."""
        try:
            async with waiter.gate if waiter is not None else nullcontext():
                granted = (await self.do_cancel(token, worker)).acquired
            if granted:
                await self.do_release(token)
        except Exception:  # the original error matters more; the waiter lease bounds the rest
            pass

    async def _extend_hold(self, hold: Any, ms: int, mode: str) -> bool:
        """Change the expiry of ``hold`` (its ``token`` and local ``deadline``) in Redis."""
        sent_at = time.monotonic()
        hold.deadline = self.deadline_for(sent_at, await self.do_extend(hold.token, ms, mode))
        if getattr(hold, "watched", False):  # a shorter deadline must not wait for the loop's next look
            self._watchdog().look_again()
        return True

    async def do_acquire(self, token: bytes, enqueue: int, worker: str,
                         reply_to: tuple[bytes, int] = NO_REPLY) -> Grant:
        script = self.scripts.get(self.redis, self.acquire_script)
        reply = await script(self.acquire_keys(), self.acquire_args(token, enqueue, worker, reply_to),
                             client=self.redis)
        return self.grant_from_reply(reply)

    async def do_cancel(self, token: bytes, worker: str) -> Grant:
        script = self.scripts.get(self.redis, self.cancel_script)
        reply = await script(self.acquire_keys(), self.acquire_args(token, 2, worker), client=self.redis)
        return Grant.from_reply(reply)

    async def do_release(self, token: bytes) -> Any:
        raise NotImplementedError

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        raise NotImplementedError


class Lock(QueuedPrimitive, LockBase):
    """Asyncio distributed lock with fencing tokens, FIFO waiting and an explicit loss signal."""

    def __init__(self, redis: Any, name: Union[str, bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(redis, name, *args, **kwargs)
        self.local: Any = self._new_local()

    def _new_local(self) -> Any:
        return _TaskLocal() if self.thread_local else SimpleNamespace(token=None)

    def _state(self) -> Any:
        local = self.local
        return local.space() if isinstance(local, _TaskLocal) else local

    def _own(self, token: bytes, grant: Grant, sent_at: float) -> None:
        super()._own(token, grant, sent_at)
        task = asyncio.current_task() if isinstance(self.local, _TaskLocal) else None
        if task is not None:  # a hold of this task only: nobody else can release it
            hold = self._state()
            callback = functools.partial(_ended_holding, weakref.ref(self), hold, token)
            task.add_done_callback(callback)
            hold.task_end = (task, callback)  # removed on release (a long-lived task acquires many times)

    async def __aenter__(self) -> Lock:
        if await self.acquire():
            return self
        raise self.timed_out()

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError:
            self.release_failed()

    async def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Acquire the lock; see :meth:`django_redis_coord.locks.Lock.acquire`."""
        if sleep is not None:
            check_number("sleep", sleep, allow_none=False, positive=False, lock_name=self.name)
        blocking, stop_at = self.wait_args(blocking, blocking_timeout)
        local = self._state()
        if self.reentrant and local.token is not None and getattr(local, "count", 0) > 0:
            if token is not None and encode_token(token, self.name) != local.token:
                raise InvalidLockArgument("a reentrant hold keeps its first token", lock_name=self.name)
            if not self.valid:  # its TTL ran out, or the watchdog found it gone: nothing to join
                raise LockLostError("The hold this re-entry would join was lost", lock_name=self.name)
            local.count += 1
            return True
        own = token is None  # made here for this call: Redis can tell a resend of it (see _take)
        token = new_token() if token is None else encode_token(token, self.name)
        taken = await self._take(token, blocking, stop_at, own)
        if taken is None:
            return False
        self._own(token, *taken)
        return True

    async def locked(self) -> bool:
        return await self.redis.get(self.name) is not None

    async def owned(self) -> bool:
        token = self._state().token
        if token is None:
            return False
        return as_bytes(await self.redis.get(self.name)) == token

    async def release(self) -> None:
        local = self._state()
        token = local.token
        if token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        if self.reentrant and getattr(local, "count", 1) > 1:
            local.count -= 1
            return
        lost = getattr(local, "lost", False)
        # Once asked, the release completes even if this task is cancelled meanwhile (a client
        # going away under ASGI): otherwise the lock would stay held, renewed by nobody.
        await run_to_completion(self._release_call())
        if lost:
            raise LockLostError("The lock was lost before it was released", lock_name=self.name)

    def _release_call(self) -> Awaitable[None]:
        """Stop renewing this task's hold and return the call that releases it; that call needs
        nothing from the task, so it can finish in another one (see :func:`run_to_completion`)."""
        local = self._state()
        self._detach(local)
        return self._release_hold(local, local.token, getattr(local, "fence", None))

    def _detach(self, local: Any) -> None:
        """Take the hold ``local`` out of the watchdog and off its task's end (before it is released)."""
        if getattr(local, "watched", False):
            self._watchdog().unregister(self, local)
        task_end = getattr(local, "task_end", None)
        if task_end is not None:
            local.task_end = None
            task_end[0].remove_done_callback(task_end[1])

    async def _release_hold(self, local: Any, token: bytes, fence: Optional[int] = None) -> None:
        try:
            await self.do_release(token)
        except LockNotOwnedError:
            if self._still_holding(local, token, fence):
                self._forget_hold(local)
                self._mark_lost(local)  # found here before the watchdog did: on_lost still fires once
            raise
        if self._still_holding(local, token, fence):
            self._forget_hold(local)

    async def do_release(self, token: bytes) -> None:
        script = self.scripts.get(self.redis, "lock_release")
        reply = await script(self.release_keys(), self.release_args(token), client=self.redis)
        if int(reply) != 1:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        local = self._state()
        if local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        self.check_extendable("extend")
        return await self._extend_hold(local, to_ms(additional_time), "replace" if replace_ttl else "add")

    async def do_extend(self, token: bytes, ms: int, mode: str) -> int:
        script = self.scripts.get(self.redis, "lock_extend")
        pttl = int(await script(self.extend_keys(), self.extend_args(token, ms, mode), client=self.redis))
        if pttl == -2:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned", lock_name=self.name)
        if pttl == -3:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        return pttl

    async def reacquire(self) -> bool:
        local = self._state()
        if local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        self.check_extendable("reacquire")
        return await self._extend_hold(local, self._ttl_ms, "replace")
