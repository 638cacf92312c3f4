"""Ending the hold of a ``@locked`` view: when its response is closed (a streaming response:
when the stream ends), exactly once, logged rather than raised.

An asyncio hold is released on its event loop; when that loop has ended, or the hold needs
nothing of it, a sync twin (same name, token and fence, on the sync client) releases it from
the thread that closes the response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase

from ..config.connection import get_client, get_redlock_masters
from ..config.shortcuts import made_lock
from ..config.signalling import app_name, speak_for
from ..core.exceptions import LockError
from ..core.holds import copy_hold as copy_hold_record
from ..core.lock.aio import Lock as AsyncLock
from ..core.redlock.aio import Redlock as AsyncRedlock
from ..core.redlock.sync import Redlock
from ..core.rwlock.aio import RWHold as AsyncRWHold
from ..core.rwlock.rules import RWHoldBase
from .permits import AsyncPermitHold
from .unavailable import REDIS_ERRORS, redis_unavailable

__all__ = ["Release", "AsyncRelease", "release_at_close", "release_logged", "arelease_logged", "released_after"]

logger = logging.getLogger("django_redis_coord")

#: How long a closing thread waits for the event loop to release an asyncio hold (seconds).
ASYNC_RELEASE_WAIT = 10.0

#: Releases running on a loop (kept referenced until they finish).
_background: set[asyncio.Task] = set()


class Release:
    """Releases a sync hold exactly once, logging (not raising) what goes wrong."""

    def __init__(self, primitive: Any) -> None:
        self.primitive = primitive
        # Emptied by the one call that releases: list.pop() is atomic, so two threads closing the
        # same response at once cannot both claim the release.
        self._pending = [primitive]

    @property
    def done(self) -> bool:
        """Whether the release was claimed (it may still be under way)."""
        return not self._pending

    def _claim(self) -> bool:
        try:
            self._pending.pop()
        except IndexError:
            return False
        return True

    def __call__(self) -> None:
        if self._claim():
            release_logged(self.primitive)


class ReleasingClose:
    """A response's ``close()`` that releases first, then closes as before.

    Set on the response itself (its public ``close()``, the method the WSGI server, the ASGI
    handler and the test client call).  Pickled as the close it wraps: a response stored by
    ``cache_page`` holds no hold, no client and no lock of this process."""

    __slots__ = ("release", "close")

    def __init__(self, release: Callable[[], None], close: Callable[[], None]) -> None:
        self.release = release
        self.close = close

    def __call__(self) -> None:
        try:
            self.release()
        finally:
            self.close()

    def __reduce__(self) -> Any:
        return self.close.__reduce__()  # type: ignore[attr-defined]


def release_at_close(response: HttpResponseBase, request: HttpRequest, release: Callable[[], None]) -> None:
    """Release when ``response`` is closed, or at the latest when Django closes ``request``.

    A middleware may answer with another response and never close the view's (Django's
    ``ConditionalGetMiddleware`` turns it into a 304); the handler adds ``request.close`` to the
    closers of the response it sends, whichever it is, so the hold ends with that one.  A release
    runs once, whichever comes first."""
    response.close = ReleasingClose(release, response.close)  # type: ignore[method-assign]
    pending = request.__dict__.get("_coord_releases")
    if pending is None:
        pending = request._coord_releases = []  # type: ignore[attr-defined]
        close = request.close

        def close_releasing() -> None:
            try:
                while pending:
                    pending.pop()()
            finally:
                close()

        request.close = close_releasing  # type: ignore[method-assign]
    pending.append(release)


def _log_release_failure(primitive: Any, exc: BaseException) -> None:
    if isinstance(exc, LockError):
        logger.warning("%s %r ended before it was released: %s", primitive.kind, primitive.name, exc)
    else:
        logger.error("Could not release %s %r (it expires with its TTL): %s", primitive.kind, primitive.name, exc)


def release_logged(primitive: Any) -> None:
    try:
        primitive.release()
    except (LockError, *REDIS_ERRORS) as exc:
        if not isinstance(exc, LockError) and not redis_unavailable(exc):
            raise
        _log_release_failure(primitive, exc)


async def arelease_logged(primitive: Any) -> None:
    try:
        await primitive.release()
    except (LockError, *REDIS_ERRORS) as exc:
        if not isinstance(exc, LockError) and not redis_unavailable(exc):
            raise
        _log_release_failure(primitive, exc)


class AsyncRelease(Release):
    """Releases an asyncio hold once, on its event loop, also when closed from another thread.

    When that loop has ended — an ``async def`` view served by a sync (WSGI) handler runs in a
    loop of its own that is closed before the response is — the hold is released with the sync
    client under the same token.
    """

    def __init__(self, primitive: Any, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(primitive)
        self.loop = loop

    def _release_without_loop(self) -> None:
        twin = _sync_twin(self.primitive)
        try:
            release_logged(twin)
        finally:
            if not isinstance(self.primitive, AsyncPermitHold):  # a permit's twin shares its permits
                copy_hold(twin, self.primitive)  # the hold ended (or was found lost) for both

    def _needs_loop(self) -> bool:
        """Whether the release must run on the loop: the hold is in that loop's watchdog (renewal
        or the claim of a provisional hand-off), or it is a Redlock's.  Otherwise the thread that
        closes the response releases it with the sync client, without a hop to the loop."""
        primitive = self.primitive
        if isinstance(primitive, AsyncPermitHold):
            permit = primitive.semaphore.permit(primitive.identity)
            return permit is not None and permit.watched
        if isinstance(primitive, (AsyncLock, AsyncRWHold)):
            return hold_watched(primitive)
        return True

    async def arelease(self) -> None:
        if not self._claim():
            return
        if asyncio.get_running_loop() is self.loop:
            await arelease_logged(self.primitive)
        else:
            await asyncio.to_thread(self._release_without_loop)

    def __call__(self) -> None:
        """The response's closer (Django calls it synchronously, often from a worker thread)."""
        if self.done:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            task = self.loop.create_task(self.arelease())
            _background.add(task)
            task.add_done_callback(_background.discard)
            return
        if self.loop.is_closed() or not self.loop.is_running() or not self._needs_loop():
            if self._claim():
                self._release_without_loop()
            return
        future = asyncio.run_coroutine_threadsafe(self.arelease(), self.loop)
        try:
            future.result(ASYNC_RELEASE_WAIT)
        except Exception as exc:  # the loop is busy or went away: the TTL ends the hold
            logger.error("Releasing %r from a closing thread failed: %r", self.primitive.name, exc)


def _sync_twin(primitive: Any) -> Any:
    """A sync object holding what the asyncio ``primitive`` holds (same name, token, fence); for
    the read or write side of a read-write lock, that side of a sync read-write lock."""
    if isinstance(primitive, AsyncPermitHold):
        return primitive.sync_twin()
    if isinstance(primitive, AsyncRedlock):
        twin: Any = Redlock(
            get_redlock_masters(), primitive.name, timeout=primitive.timeout, thread_local=False,
            node_timeout=primitive.node_timeout, label=primitive.label,
        )
    else:  # a copy of the sync lock made once per name (not checked and computed again)
        twin = made_lock(app_name(primitive), primitive.name, asyncio=False, timeout=primitive.timeout,
                         auto_renew=False, rw=isinstance(primitive, AsyncRWHold)).fresh(get_client())
    copy_hold(primitive, twin)  # neither object is shared with a thread
    speak_for(twin, primitive)
    return twin.hold(primitive.mode) if isinstance(primitive, AsyncRWHold) else twin


async def released_after(stream: AsyncIterator[Any], release: AsyncRelease) -> AsyncIterator[Any]:
    """``stream``, then the release of the hold (an async streaming response's content)."""
    try:
        async for chunk in stream:
            yield chunk
    finally:
        await release.arelease()



def copy_hold(source: Any, target: Any) -> None:
    """Make ``target`` hold what ``source`` holds (a side of a read-write lock stands for the
    lock's hold): through the core's public hooks, ``hold_record`` and
    :func:`~django_redis_coord.core.holds.copy_hold` for a lock, ``copy_hold_to`` for a Redlock
    (its fences by token too)."""
    if isinstance(source, (AsyncRedlock, Redlock)):
        source.copy_hold_to(target)
    else:
        copy_hold_record(_holder(source).hold_record, _holder(target).hold_record)


def hold_watched(primitive: Any) -> bool:
    """Whether the watchdog looks after ``primitive``'s current hold (renewal or the claim of a hand-off)."""
    return bool(_holder(primitive).hold_record.watched)


def _holder(primitive: Any) -> Any:
    """The object keeping ``primitive``'s hold state: a read-write lock for its read or write side."""
    return primitive.lock if isinstance(primitive, RWHoldBase) else primitive
