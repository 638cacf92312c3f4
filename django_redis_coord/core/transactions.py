"""Optimistic read-modify-write on Redis: WATCH, read, MULTI, write, EXEC - retried on conflict.

The function receives a pipeline that is already watching the given keys (and may watch more
with ``pipe.watch(...)``).  It reads with the pipeline (commands run at once while watching),
calls ``pipe.multi()``, queues its writes and returns a result.  The helper runs EXEC; when a
watched key changed in between, the whole function runs again after an exponential backoff with
full jitter, at most ``retries`` more times, then :class:`TransactionConflict` is raised.  A
function that returns without calling ``multi()`` (nothing to write, e.g. insufficient funds)
ends the call with its result and no EXEC.

A user id counter::

    >>> @optimistic(client, "user_id_counter")                              # doctest: +SKIP
    ... def register(pipe, email, password):
    ...     user_id = int(pipe.get("user_id_counter") or 0)
    ...     pipe.multi()
    ...     pipe.set(f"user::{user_id}::email", email)
    ...     pipe.set(f"user::{user_id}::password", password)
    ...     pipe.incr("user_id_counter")
    ...     return user_id
    >>> register("peter@spamer.com", "topsecret")
    256
    >>> register.stats.attempts, register.stats.conflicts
    (1, 0)

The same object also runs a function directly (``optimistic(client, "k").run(func, *args)``) and
works with ``redis.asyncio`` clients: decorate an ``async def`` function (or use ``arun``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar, Union

from redis.exceptions import WatchError

from .exceptions import InvalidLockArgument, InvalidLockArgumentType, TransactionConflict

__all__ = ["optimistic", "Optimistic", "TransactionStats", "TransactionConflict"]

T = TypeVar("T")

DEFAULT_RETRIES = 10
DEFAULT_BACKOFF = 0.002
DEFAULT_MAX_BACKOFF = 0.25


@dataclass
class TransactionStats:
    """Counters of one :class:`Optimistic` (for metrics); safe to read from any thread."""

    #: Calls made (each runs the function at least once).
    calls: int = 0
    #: Times the function ran (first runs and retries).
    attempts: int = 0
    #: Attempts whose EXEC was refused because a watched key changed.
    conflicts: int = 0
    #: Calls that ended in :class:`TransactionConflict`.
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, calls: int = 0, attempts: int = 0, conflicts: int = 0, failures: int = 0) -> None:
        with self._lock:
            self.calls += calls
            self.attempts += attempts
            self.conflicts += conflicts
            self.failures += failures


class Optimistic:
    """A WATCH/MULTI/EXEC retry policy bound to a client and the keys to watch.

    Use it as a decorator (sync or ``async def`` functions) or call :meth:`run` / :meth:`arun`.
    ``retries`` is how many times a conflicting attempt is run again (so at most
    ``retries + 1`` attempts); the n-th retry waits a random time in ``[0, min(max_backoff,
    backoff * 2 ** (n - 1))]`` (``jitter=False``: exactly that upper bound).
    """

    def __init__(
        self,
        client: Any,
        *watch_keys: Union[str, bytes],
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        jitter: bool = True,
    ) -> None:
        if client is None:
            raise InvalidLockArgumentType("client must be a Redis client, not None")
        for key in watch_keys:
            if not isinstance(key, (str, bytes)):
                raise InvalidLockArgumentType(f"keys to watch must be str or bytes, not {type(key).__name__}")
            if not key:
                raise InvalidLockArgument("keys to watch must not be empty")
        if isinstance(retries, bool) or not isinstance(retries, int):
            raise InvalidLockArgumentType(f"retries must be an int, not {type(retries).__name__}")
        if retries < 0:
            raise InvalidLockArgument(f"retries must not be negative, got {retries!r}")
        for label, value in (("backoff", backoff), ("max_backoff", max_backoff)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidLockArgumentType(f"{label} must be a number of seconds, not {type(value).__name__}")
            if not 0 <= value < float("inf"):
                raise InvalidLockArgument(f"{label} must be a finite number >= 0, got {value!r}")
        if max_backoff < backoff:
            raise InvalidLockArgument("max_backoff must not be less than backoff")
        self.client = client
        self.watch_keys = watch_keys
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.jitter = jitter
        self.stats = TransactionStats()

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        cap = min(self.max_backoff, self.backoff * 2 ** (retry - 1))
        return random.uniform(0, cap) if self.jitter else cap

    def _conflict(self, attempts: int, cause: Optional[BaseException]) -> TransactionConflict:
        self.stats.add(failures=1)
        error = TransactionConflict(
            f"Watched keys kept changing: gave up after {attempts} attempts", attempts=attempts
        )
        error.__cause__ = cause
        return error

    @staticmethod
    def _pending(pipe: Any) -> bool:
        """True when the function called ``multi()`` and left the transaction for us to execute."""
        return bool(getattr(pipe, "explicit_transaction", False) or pipe.command_stack)

    # -- sync ------------------------------------------------------------------------------------
    def run(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``func(pipe, *args, **kwargs)`` in an optimistic transaction; return its result."""
        self.stats.add(calls=1)
        last: Optional[BaseException] = None
        for attempt in range(1, self.retries + 2):
            if attempt > 1:
                time.sleep(self.delay(attempt - 1))
            self.stats.add(attempts=1)
            pipe = self.client.pipeline(transaction=True)
            try:
                if self.watch_keys:
                    pipe.watch(*self.watch_keys)
                result = func(pipe, *args, **kwargs)
                if self._pending(pipe):
                    pipe.execute()
                return result
            except WatchError as exc:
                self.stats.add(conflicts=1)
                last = exc
            finally:
                pipe.reset()
        raise self._conflict(self.retries + 1, last)

    # -- asyncio -----------------------------------------------------------------------------------
    async def arun(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Asyncio twin of :meth:`run` (``redis.asyncio`` client, ``async def`` function)."""
        self.stats.add(calls=1)
        last: Optional[BaseException] = None
        for attempt in range(1, self.retries + 2):
            if attempt > 1:
                await asyncio.sleep(self.delay(attempt - 1))
            self.stats.add(attempts=1)
            pipe = self.client.pipeline(transaction=True)
            try:
                if self.watch_keys:
                    await pipe.watch(*self.watch_keys)
                result = await func(pipe, *args, **kwargs)
                if self._pending(pipe):
                    await pipe.execute()
                return result
            except WatchError as exc:
                self.stats.add(conflicts=1)
                last = exc
            finally:
                await pipe.reset()
        raise self._conflict(self.retries + 1, last)

    # -- decorator -----------------------------------------------------------------------------------
    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Decorate ``func(pipe, ...)``: calling the result runs it in an optimistic transaction."""
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await self.arun(func, *args, **kwargs)

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(func)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                return self.run(func, *args, **kwargs)

            wrapper = sync_wrapper
        wrapper.stats = self.stats
        wrapper.transaction = self
        return wrapper

    def __repr__(self) -> str:
        return f"<Optimistic watch={self.watch_keys!r} retries={self.retries}>"


def optimistic(
    client: Any,
    *watch_keys: Union[str, bytes],
    retries: int = DEFAULT_RETRIES,
    backoff: float = DEFAULT_BACKOFF,
    max_backoff: float = DEFAULT_MAX_BACKOFF,
    jitter: bool = True,
) -> Optimistic:
    """An optimistic-transaction policy for ``client`` watching ``watch_keys`` (see the module)."""
    return Optimistic(client, *watch_keys, retries=retries, backoff=backoff, max_backoff=max_backoff, jitter=jitter)
