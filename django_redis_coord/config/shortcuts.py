"""Locks and semaphores configured from ``DJANGO_REDIS_COORD``, sending Django signals.

:func:`lock` and :func:`semaphore` (also importable from ``django_redis_coord``) build the core
primitives on the client of :func:`django_redis_coord.connection.get_client`, with the
configured ``KEY_PREFIX``, ``DEFAULT_TIMEOUT`` and ``AUTO_RENEW``; :func:`alock` and
:func:`asemaphore` are the asyncio forms (call them inside a coroutine).  The objects they return
are the core classes, whose ``events`` send the signals of :mod:`django_redis_coord.signals`
(see :mod:`django_redis_coord.config.signalling`).  :func:`redlock` and
:func:`aredlock` build a :class:`~django_redis_coord.Redlock` over the masters of
``REDLOCK["MASTERS"]``, with the same signals.  ``template=`` names the key template a name was
made from (``lock("invoice:42", template="invoice:{pk}")``): the label of its metrics (see
:mod:`django_redis_coord.metrics`); without it, the label is ``DEFAULT_TEMPLATE``, never the name.

>>> from django_redis_coord import lock                   # doctest: +SKIP
>>> with lock("invoice:42") as held:                      # doctest: +SKIP
...     Invoice.objects.filter(pk=42).update(fence=held.fence, status="sent")

>>> from django_redis_coord.shortcuts import alock        # doctest: +SKIP
>>> async with alock("invoice:42", timeout=10):           # doctest: +SKIP
...     ...
"""

from __future__ import annotations

from typing import Any, Optional, Union

from ..core.exceptions import InvalidLockArgument, InvalidLockArgumentType
from ..core.keys import cacheable
from ..core.lock.aio import Lock as AsyncLock
from ..core.lock.sync import Lock
from ..core.redlock.aio import Redlock as AsyncRedlock
from ..core.redlock.sync import Redlock
from ..core.rwlock.aio import ReadWriteLock as AsyncReadWriteLock
from ..core.rwlock.sync import ReadWriteLock
from ..core.semaphore.aio import Semaphore as AsyncSemaphore
from ..core.semaphore.sync import Semaphore
from .connection import get_async_client, get_async_redlock_masters, get_client, get_redlock_masters
from .settings import coord_settings
from .signalling import DjangoSignals, name_view

__all__ = [
    "lock",
    "semaphore",
    "alock",
    "asemaphore",
    "redlock",
    "aredlock",
    "locked_primitive",
    "made_lock",
    "rwlock",
    "arwlock",
]

#: Marks an argument the caller did not give (``None`` is a meaningful timeout).
DEFAULT: Any = object()

Name = Union[str, bytes]

#: Locks made by :func:`made_lock`, without a client, by key, name, label, view, flavour, timeout
#: and renewal (at most :data:`_MADE_MAX`: a new one past that starts the dict again).
_made: dict[tuple[Any, ...], Any] = {}
_MADE_MAX = 256


def _options(timeout: Any, auto_renew: Optional[bool]) -> tuple[Any, bool]:
    settings = coord_settings()
    if timeout is DEFAULT:
        timeout = settings.default_timeout
    if auto_renew is None:
        auto_renew = settings.auto_renew and timeout is not None
    return timeout, bool(auto_renew)


def _events(name: Name, template: Optional[str]) -> DjangoSignals:
    """The signals (and metrics) of a primitive named ``name``, made from the key ``template``."""
    if template is not None and not isinstance(template, str):
        raise InvalidLockArgumentType("template must be a str: the key template the name was made from",
                                      lock_name=name)
    return DjangoSignals(name, template=template)


def _new_lock(name: Name, key: Name, *, asyncio: bool, client: Any, template: Optional[str] = None,
              rw: bool = False, **kwargs: Any) -> Any:
    """The one place a lock is made: :func:`lock`, :func:`alock`, :func:`made_lock` and, with
    ``rw``, a read-write lock for :func:`rwlock` and :func:`arwlock`."""
    if rw:
        lock_class: Any = AsyncReadWriteLock if asyncio else ReadWriteLock
    else:
        lock_class = AsyncLock if asyncio else Lock
    return lock_class(client, key, events=_events(name, template), **kwargs)


def lock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    client: Any = None,
    template: Optional[str] = None,
    **kwargs: Any,
) -> Lock:
    """A :class:`~django_redis_coord.core.lock.sync.Lock` named ``KEY_PREFIX:name`` on the configured Redis.

    ``timeout`` defaults to ``DEFAULT_TIMEOUT`` and ``auto_renew`` to ``AUTO_RENEW``; ``template``
    labels its metrics; every other keyword goes to the Lock (``blocking_timeout``, ``label``,
    ``on_lost``, ...).
    """
    timeout, auto_renew = _options(timeout, auto_renew)
    return _new_lock(name, coord_settings().prefixed(name), asyncio=False,
                     client=client if client is not None else get_client(), template=template,
                     timeout=timeout, auto_renew=auto_renew, **kwargs)


def alock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    client: Any = None,
    template: Optional[str] = None,
    **kwargs: Any,
) -> AsyncLock:
    """The asyncio form of :func:`lock` (call it inside a coroutine: the client is per event loop)."""
    timeout, auto_renew = _options(timeout, auto_renew)
    return _new_lock(name, coord_settings().prefixed(name), asyncio=True,
                     client=client if client is not None else get_async_client(), template=template,
                     timeout=timeout, auto_renew=auto_renew, **kwargs)


def made_lock(name: Name, key: Name, *, asyncio: bool, timeout: Any, auto_renew: bool,
              label: Optional[str] = None, view: Optional[str] = None, template: Optional[str] = None,
              max_hold: Optional[float] = None, rw: bool = False) -> Any:
    """A lock (with ``rw``, a read-write lock) without a client, shared (``thread_local=False``),
    made once per key, name, label, view, template, flavour, timeout and renewal: each use takes a
    copy of it on a client (``made_lock(...).fresh(client)``), a fraction of the cost of making
    one (``@locked`` makes one per request)."""
    cache_key = (key, name, label, view, template, asyncio, timeout, type(timeout), auto_renew, max_hold, rw)
    made = _made.get(cache_key)
    if made is None:
        made = _new_lock(name, key, asyncio=asyncio, client=None, template=template, timeout=timeout,
                         auto_renew=auto_renew, label=label, thread_local=False, max_hold=max_hold, rw=rw)
        name_view(made, view)
        if cacheable(name) and cacheable(label):  # long names are not kept (see keys.CACHED_NAME_MAX)
            if len(_made) >= _MADE_MAX:
                _made.clear()
            _made[cache_key] = made
    return made


def _redlock_options(name: Name, timeout: Any, auto_renew: Optional[bool]) -> tuple[Any, bool]:
    timeout, auto_renew = _options(timeout, auto_renew)
    if timeout is None:
        raise InvalidLockArgument(
            "A Redlock always expires: give it a timeout (DEFAULT_TIMEOUT is None in DJANGO_REDIS_COORD)",
            lock_name=name,
        )
    return timeout, auto_renew


def redlock_node_timeout(timeout: Any) -> dict[str, Any]:
    """``{"node_timeout": ...}`` from ``REDLOCK["NODE_TIMEOUT"]`` (capped at a quarter of
    ``timeout``), or nothing when it is not set (the Redlock's own default applies)."""
    configured = (coord_settings().redlock or {}).get("NODE_TIMEOUT")
    if configured is None or not isinstance(timeout, (int, float)):
        return {}
    return {"node_timeout": min(float(configured), timeout / 4.0)}


def _new_redlock(name: Name, timeout: Any, auto_renew: Optional[bool], *, asyncio: bool, masters: Any,
                 template: Optional[str] = None, **kwargs: Any) -> Any:
    """The one place a Redlock is made: :func:`redlock`, :func:`aredlock` and ``@locked``."""
    timeout, auto_renew = _redlock_options(name, timeout, auto_renew)
    if masters is None:
        masters = get_async_redlock_masters() if asyncio else get_redlock_masters()
    redlock_class = AsyncRedlock if asyncio else Redlock
    return redlock_class(masters, coord_settings().prefixed(name), timeout=timeout, auto_renew=auto_renew,
                         events=_events(name, template), **{**redlock_node_timeout(timeout), **kwargs})


def redlock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    masters: Any = None,
    template: Optional[str] = None,
    **kwargs: Any,
) -> Redlock:
    """A :class:`~django_redis_coord.Redlock` named ``KEY_PREFIX:name`` over ``REDLOCK["MASTERS"]``.

    ``timeout`` defaults to ``DEFAULT_TIMEOUT`` (which must not be None: a Redlock always expires)
    and ``auto_renew`` to ``AUTO_RENEW``; other keywords go to the Redlock (``blocking_timeout``,
    ``node_timeout``, ``label``, ``on_lost``, ...).  Raises ``ImproperlyConfigured`` when no masters
    are configured (unless ``masters`` is given).

    >>> from django_redis_coord.shortcuts import redlock              # doctest: +SKIP
    >>> with redlock("ledger:close-month", timeout=30) as held:        # doctest: +SKIP
    ...     close_month(fence=held.fence)
    """
    return _new_redlock(name, timeout, auto_renew, asyncio=False, masters=masters, template=template, **kwargs)


def aredlock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    masters: Any = None,
    template: Optional[str] = None,
    **kwargs: Any,
) -> AsyncRedlock:
    """The asyncio form of :func:`~django_redis_coord.get_redlock` (call it inside a coroutine: the
    clients are per event loop)."""
    return _new_redlock(name, timeout, auto_renew, asyncio=True, masters=masters, template=template, **kwargs)


def make_semaphore(name: Name, limit: int, timeout: Any = DEFAULT, *, asyncio: bool = False,
                   auto_renew: Optional[bool] = None, client: Any = None, template: Optional[str] = None,
                   **kwargs: Any) -> Any:
    """A semaphore named ``KEY_PREFIX:name`` with ``limit`` permits (see :func:`semaphore`)."""
    timeout, auto_renew = _options(timeout, auto_renew)
    settings = coord_settings()
    if client is None:
        client = get_async_client() if asyncio else get_client()
    semaphore_class = AsyncSemaphore if asyncio else Semaphore
    return semaphore_class(
        client, settings.prefixed(name), limit, timeout, events=_events(name, template), auto_renew=auto_renew,
        **kwargs
    )


def semaphore(name: Name, limit: int, timeout: Any = DEFAULT, **kwargs: Any) -> Semaphore:
    """A :class:`~django_redis_coord.core.semaphore.sync.Semaphore` of ``limit`` permits named ``KEY_PREFIX:name``.

    ``timeout`` (each permit's lease) defaults to ``DEFAULT_TIMEOUT`` and ``auto_renew`` to
    ``AUTO_RENEW``; ``template`` labels its metrics; other keywords go to the Semaphore (``blocking``,
    ``blocking_timeout``, ``label``, ``on_lost``, ...).  The limit is stored in Redis by the first
    acquire of the name; see :meth:`~django_redis_coord.Semaphore.set_max_size` to change it.
    """
    return make_semaphore(name, limit, timeout, asyncio=False, **kwargs)


def asemaphore(name: Name, limit: int, timeout: Any = DEFAULT, **kwargs: Any) -> AsyncSemaphore:
    """The asyncio form of :func:`semaphore` (call it inside a coroutine)."""
    return make_semaphore(name, limit, timeout, asyncio=True, **kwargs)


def locked_primitive(name: str, *, asyncio: bool, timeout: Any, auto_renew: Optional[bool], label: Optional[str],
                     view: Optional[str], limit: Optional[int] = None, redlock: bool = False,
                     template: Optional[str] = None, max_hold: Optional[float] = None,
                     mode: Optional[str] = None) -> Any:
    """What ``@locked`` holds for one call, made by the factories above: a lock (a copy of
    :func:`made_lock`'s on the current client), a semaphore of ``limit`` permits, a Redlock, or
    with ``mode`` (``"read"`` or ``"write"``) that side of a read-write lock (a copy, as a lock's).
    None is per thread (``thread_local=False``): a view's hold may end in the thread that closes
    its response.  ``view`` (a dotted path) is named in the holder info; ``template`` labels the metrics."""
    if redlock:
        primitive = _new_redlock(name, timeout, auto_renew, asyncio=asyncio, masters=None, label=label,
                                 thread_local=False, template=template, max_hold=max_hold)
    elif limit is not None:
        primitive = make_semaphore(name, limit, timeout, asyncio=asyncio, auto_renew=auto_renew, label=label,
                                   template=template, max_hold=max_hold)
    else:
        timeout, auto_renew = _options(timeout, auto_renew)
        made = made_lock(name, coord_settings().prefixed(name), asyncio=asyncio, timeout=timeout,
                         auto_renew=auto_renew, label=label, view=view, template=template, max_hold=max_hold,
                         rw=mode is not None)
        fresh = made.fresh(get_async_client() if asyncio else get_client())
        return fresh if mode is None else fresh.hold(mode)
    name_view(primitive, view)
    return primitive


# -- read-write locks ------------------------------------------------------------------------------
def _configured_rwlock(name: Name, timeout: Any, auto_renew: Optional[bool], client: Any, *, asyncio: bool,
                       **kwargs: Any) -> Any:
    """A read-write lock for :func:`rwlock` (sync) or :func:`arwlock` (``asyncio``)."""
    timeout, auto_renew = _options(timeout, auto_renew)
    if client is None:
        client = get_async_client() if asyncio else get_client()
    return _new_lock(name, coord_settings().prefixed(name), asyncio=asyncio, client=client, rw=True,
                     timeout=timeout, auto_renew=auto_renew, **kwargs)


def rwlock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    client: Any = None,
    **kwargs: Any,
) -> ReadWriteLock:
    """A :class:`~django_redis_coord.ReadWriteLock` named ``KEY_PREFIX:name`` on the
    configured Redis, sending the signals (for ``lock.read`` or ``lock.write``).

    ``timeout`` (each hold's TTL) defaults to ``DEFAULT_TIMEOUT`` and ``auto_renew`` to
    ``AUTO_RENEW``; other keywords go to the ReadWriteLock (``blocking_timeout``, ``label``,
    ``on_lost``, ``max_hold``, ``thread_local``, ...).

    >>> from django_redis_coord.shortcuts import rwlock      # doctest: +SKIP
    >>> catalog = rwlock("catalog", timeout=30)               # doctest: +SKIP
    >>> with catalog.read:                                    # doctest: +SKIP
    ...     show(fence=catalog.read.fence)
    """
    return _configured_rwlock(name, timeout, auto_renew, client, asyncio=False, **kwargs)


def arwlock(
    name: Name,
    timeout: Any = DEFAULT,
    *,
    auto_renew: Optional[bool] = None,
    client: Any = None,
    **kwargs: Any,
) -> AsyncReadWriteLock:
    """The asyncio form of :func:`~django_redis_coord.get_rwlock` (call it inside a coroutine: the
    client is per event loop)."""
    return _configured_rwlock(name, timeout, auto_renew, client, asyncio=True, **kwargs)
