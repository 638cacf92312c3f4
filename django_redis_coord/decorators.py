"""``@locked``: at most one (or ``limit``) concurrent execution of a view or function per key.

>>> from django_redis_coord import locked                          # doctest: +SKIP
>>> @locked("checkout:{user.pk}", timeout=30)                     # doctest: +SKIP
... def checkout(request):
...     ...

Works on function views, class-based views (decorate the class or one of its methods),
``async def`` views (the Redis calls are asyncio calls on the event loop), plain functions
(Celery tasks, management commands) and as a context manager::

    with locked("nightly-report") as held:
        build_report(fence=held.fence)

The key
    A ``str.format`` template or a callable; the default is the dotted name of the view.  A view's
    template sees its arguments by name (``{pk}``), ``{args[0]}``, ``{kwargs[pk]}``, ``{user}``
    (``request.user``), ``{query[name]}`` (a query-string parameter), ``{headers[X-Tenant]}``,
    ``{request}`` and ``{view}``; a plain function's template sees its arguments by name.
    Interpolated values are percent-encoded (``:``, ``/``, ``{``, ``}``, ``%``, spaces and any
    character of the template's text between two fields), and two fields need text between them,
    so two different sets of values never give the same key.  An encoded value longer than 128
    characters is replaced by its SHA-256 digest (:mod:`django_redis_coord.key_values`); a key
    callable's name longer than 32 KiB answers 400 (:class:`KeyTooLong`).  A name the function cannot provide is an
    error when decorating; a value missing from a request (absent query parameter or header, a
    ``None`` or empty value) answers 400 Bad Request (:class:`MissingKeyValue`); a template that
    cannot be filled for another reason raises :class:`KeyTemplateError`.  Never a shared key.

On contention
    409 Conflict (``CONTENTION_STATUS``) with ``Retry-After``: the median of the key's recent hold
    durations in this process, at most the holder's remaining TTL (rounded up; the TTL when no
    hold of the key ended here yet, see :mod:`~django_redis_coord.hold_times`); or ``status=``,
    ``handler=`` (``handler(request, contention)``), ``template_name=``; or wait up to ``wait``
    seconds first.  A plain function or context manager raises
    :class:`LockContended`.  ``limit=N`` uses a semaphore: at most N concurrent executions per key.

Lifetime
    ``timeout`` (default ``DEFAULT_TIMEOUT``) in seconds; a hold without expiry is asked for by
    name, ``timeout=NO_EXPIRY`` (``None`` is refused: a hold whose acquire reply is lost would
    stay held for ever).  The hold lasts until the response is closed (for a ``StreamingHttpResponse``: until the stream
    is exhausted or closed) and is released when the view raises.  ``auto_renew=True`` renews it
    with the watchdog; with ``rollback_on_loss=True`` (sync views) the view runs in
    ``transaction.atomic()`` and a hold lost before the view returns rolls the transaction back
    and raises :class:`~django_redis_coord.exceptions.LockLostError`.  The hold is
    ``request.coord_lock`` and :func:`current_lock` inside the view (``.fence`` for fenced writes).

Redis unreachable
    503 (``UNAVAILABLE_STATUS``), logged: fail closed.  ``fail_open=True`` (or ``FAIL_OPEN``) runs
    the view without the lock, also logged.  A plain function re-raises the connection error
    unless it fails open.

Redlock
    ``redlock=True`` takes the lock with :class:`~django_redis_coord.Redlock` over the masters of
    ``DJANGO_REDIS_COORD["REDLOCK"]["MASTERS"]`` (same signals, same answers).  Fewer than a quorum
    of masters answering (:class:`~django_redis_coord.QuorumUnavailable`) counts as Redis
    unreachable.  ``Retry-After`` is the time until enough of the refusing masters' holds end for
    a quorum to be free, or the timeout when they cannot tell.  It needs a timeout and refuses
    ``limit``; both, and missing masters, are errors when decorating.
"""

from __future__ import annotations

import _string
import asyncio
import contextvars
import functools
import hashlib
import inspect
import logging
import re
import secrets
import string
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union
from urllib.parse import quote

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import BadRequest, ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from redis.exceptions import (
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._base import check_number
from .conf import CoordSettings, coord_settings
from .connection import get_async_client, get_async_redlock_masters, get_client, get_redlock_masters
from .exceptions import CoordError, InvalidLockArgument, InvalidLockArgumentType, LockError, LockLostError
from .expiry import no_expiry_timeout
from .key_values import check_key_length, shortened
from .keys import cacheable
from .semaphores import encode_identity
from .shortcuts import (
    AsyncSignallingLock,
    AsyncSignallingRedlock,
    SignallingLock,
    SignallingRedlock,
    make_semaphore,
    redlock_node_timeout,
    semaphore_class,
)

__all__ = [
    "locked",
    "Locked",
    "Contention",
    "KeyTemplateError",
    "MissingKeyValue",
    "KeyTooLong",
    "LockContended",
    "current_lock",
]

logger = logging.getLogger("django_redis_coord")

#: Errors meaning "Redis cannot be reached or cannot take writes right now".
UNAVAILABLE_ERRORS = (RedisConnectionError, RedisTimeoutError, ReadOnlyError, OutOfMemoryError, TryAgainError,
                      ClusterError, SlotNotCoveredError)
#: The error codes of the same conditions (and of writes refused after a failed save), as a
#: command refused inside a Lua script reports them: a ResponseError whose text holds "-CODE ".
UNAVAILABLE_CODES = ("OOM", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MISCONF")
#: What the acquire sites catch before telling "unavailable" from other errors (re-raised).
_REDIS_ERRORS = (RedisError, RedisClusterException)


def redis_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` means Redis cannot be reached or cannot take writes right now (out of
    memory, read-only, a cluster or Sentinel master down): ``@locked`` answers 503 or fails open."""
    if isinstance(exc, UNAVAILABLE_ERRORS):
        return True
    if not isinstance(exc, ResponseError):
        return False
    text = str(exc)
    return any(text.startswith(code + " ") or f"-{code} " in text for code in UNAVAILABLE_CODES)

#: How long a closing thread waits for the event loop to release an asyncio hold (seconds).
ASYNC_RELEASE_WAIT = 10.0

#: Characters kept as they are in interpolated key values (everything else is percent-encoded),
#: unless the template's text between two of its fields uses them: then they are encoded in values
#: too, so that this text can never be mistaken for part of a value.
SAFE_CHARS = "-_.~@+=,!*'()"
#: The characters :func:`urllib.parse.quote` leaves as they are whatever ``safe`` says.
_QUOTE_NEVER_ENCODES = "-_.~"

#: Names a view's key template may use besides the view's own arguments.
VIEW_NAMES = frozenset({"request", "user", "query", "headers", "args", "kwargs", "view"})
#: View names that hold many values: a template names one of them (``{query[page]}``).
_NAMED_VALUES = frozenset({"query", "headers"})


def _whole_values_message(template: str, root: str) -> str:
    return (f"The lock key {template!r} uses {{{root}}} whole: it holds many values, name one "
            f"(e.g. {{{root}[{'page' if root == 'query' else 'X-Tenant'}]}}); as a whole it would give "
            "every request a key of its own.")

_DEFAULT: Any = object()
#: What :meth:`Locked._unavailable` returns when the call goes ahead without the lock.
_RUN_UNLOCKED: Any = object()
#: Locks one ``locked(...)`` object keeps to copy from (by name, label and flavour), at most.
_MADE_LOCKS_MAX = 256

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("django_redis_coord_current_lock", default=None)
_background: set[asyncio.Task] = set()

#: What was decorated with ``redlock=True`` (wrapper -> dotted name), read by the system checks.
redlock_users: weakref.WeakKeyDictionary[Callable[..., Any], str] = weakref.WeakKeyDictionary()


def current_lock() -> Any:
    """The lock or semaphore held by the innermost ``@locked`` call running here, else ``None``."""
    return _current.get()


# -- errors ----------------------------------------------------------------------------------------
class KeyTemplateError(InvalidLockArgument):
    """A key template that is malformed or names a value the decorated function cannot provide."""


class MissingKeyValue(KeyTemplateError, BadRequest):
    """A value the key template needs is missing from the request (a 400 Bad Request in views)."""


class KeyTooLong(KeyTemplateError, BadRequest):
    """A key callable gave a name longer than a lock name may be (a 400 Bad Request in views)."""


class LockContended(CoordError):
    """The key is held (or all ``limit`` permits are taken): raised by plain functions and ``with``."""

    def __init__(self, message: str, lock_name: Any = None, retry_after: Optional[int] = None) -> None:
        super().__init__(message, lock_name=lock_name)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Contention:
    """What a contention handler or template receives about the refused request."""

    #: The key as rendered from the template (without ``KEY_PREFIX``).
    name: str
    #: The Redis key.
    key: str
    #: Seconds to wait: the key's typical recent hold, at most the current holder's remaining TTL,
    #: rounded up (``None``: unknown or no expiry and no recent hold).
    retry_after: Optional[int]
    #: The semaphore's limit, or ``None`` for a lock.
    limit: Optional[int]
    #: Seconds spent trying (``wait``).
    wait_time: float
    #: The status the default answer uses.
    status: int


# -- key templates ---------------------------------------------------------------------------------
_ROOT = re.compile(r"[^.\[]*")


class _RequestValues(Mapping):
    """Query parameters or headers for templates: a missing one is a :class:`MissingKeyValue`."""

    def __init__(self, source: Mapping[str, Any], what: str, template: str) -> None:
        self.source, self.what, self.template = source, what, template

    def __getitem__(self, name: str) -> Any:
        try:
            return self.source[name]
        except KeyError:
            raise MissingKeyValue(
                f"The lock key {self.template!r} needs the {self.what} {name!r}, which the request lacks."
            ) from None

    def __iter__(self) -> Any:
        return iter(self.source)

    def __len__(self) -> int:
        return len(self.source)

    def __format__(self, spec: str) -> str:
        """Used whole in a template (``{query}``; refused when decorating unless the function has
        an argument of that name): no key of its own per request."""
        raise KeyTemplateError(_whole_values_message(self.template, "query" if self.what == "query parameter"
                                                     else "headers"))

    def __str__(self) -> str:  # ``{query!s}``
        return self.__format__("")


class _Formatter(string.Formatter):
    """Fills a template from a namespace, percent-encoding each value and refusing empty ones."""

    def __init__(self, template: str, safe: str = SAFE_CHARS) -> None:
        self.template = template
        self.safe = safe
        # quote() never encodes these; encode them by hand when the template's text uses them.
        self.also_encoded = [char for char in _QUOTE_NEVER_ENCODES if char not in safe]

    def get_value(self, key: Any, args: Any, kwargs: Any) -> Any:
        namespace = kwargs["namespace"]
        if key not in namespace:
            raise KeyTemplateError(f"The lock key {self.template!r} uses {{{key}}}, which is not available here.")
        return namespace[key]

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyTemplateError, BadRequest):
            raise
        except (AttributeError, KeyError, IndexError, TypeError) as exc:
            raise _unfillable(self.template, field_name, exc) from exc

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            raise MissingKeyValue(f"The lock key {self.template!r} got None for one of its values.")
        text = super().format_field(value, format_spec)
        if not text:
            raise MissingKeyValue(f"The lock key {self.template!r} got an empty value.")
        text = quote(text, safe=self.safe)
        for char in self.also_encoded:
            text = text.replace(char, f"%{ord(char):02X}")
        return shortened(text)


#: A part of a parsed template: literal text, then the field (or ``None``), its first name, the
#: attributes and indexes after it, its conversion and its format spec.
_Field = tuple[str, Optional[str], str, list, Optional[str], str]


def _unfillable(template: str, field: str, exc: BaseException) -> KeyTemplateError:
    """The error of a template field whose value cannot be looked up in what a call offers."""
    return KeyTemplateError(f"The lock key {template!r} cannot fill {{{field}}}: {type(exc).__name__}: {exc}")


class KeyTemplate:
    """A lock key: a template, a callable or a fixed default, checked when decorating."""

    def __init__(self, key: Union[str, Callable[..., Any], None], default: str) -> None:
        self.callable: Optional[Callable[..., Any]] = None
        self.signature: Optional[inspect.Signature] = None
        self.default_name = default
        self.template = default
        self.roots: frozenset[str] = frozenset()
        self.safe = SAFE_CHARS
        #: The key is the same for every call (a template without fields, or the default name).
        self.fixed = True
        #: The names the template uses that a view's call provides among its arguments (not the
        #: names every view offers, :data:`VIEW_NAMES`).
        self.argument_roots: tuple[str, ...] = ()
        #: The names used whole, with no attribute or index after them (``{user}``, not ``{user.pk}``).
        self.bare_roots: frozenset[str] = frozenset()
        #: Names every view offers (:data:`VIEW_NAMES`) that the decorated function takes as
        #: arguments of its own: the template gets the argument (``def search(request, query)``).
        self.shadowed: frozenset[str] = frozenset()
        #: The template's fields, parsed once (see :meth:`render`); ``None``: filled by the
        #: formatter as it parses.
        self._fields: Optional[list[_Field]] = None
        self._formatter = _Formatter(self.template, self.safe)
        if key is None:
            return
        if callable(key):
            self.callable = key
            self.fixed = False
            return
        if not isinstance(key, str):
            raise InvalidLockArgumentType(f"A lock key must be a str template or a callable, not {type(key).__name__}")
        if not key:
            raise KeyTemplateError("A lock key template must not be empty.")
        roots, bare = set(), set()
        try:
            parsed = list(string.Formatter().parse(key))
        except ValueError as exc:
            raise KeyTemplateError(f"The lock key {key!r} is not a valid template: {exc}") from exc
        # The text between two fields is what a value could be mistaken for: its characters are
        # encoded in values (a template with one field, or text only around the fields, keeps its
        # keys), and it must not be empty.  ("{{" and "}}" split the text into several parts.)
        between = since = ""
        seen_field = False
        for literal, field, spec, _conversion in parsed:
            since += literal
            if field is None:
                continue
            if seen_field and not since:
                raise KeyTemplateError(
                    f"The lock key {key!r} has two fields with nothing between them: values such as "
                    "('ab', 'c') and ('a', 'bc') would give the same key; put a separator between them."
                )
            if seen_field:
                between += since
            seen_field, since = True, ""
            root = _ROOT.match(field).group(0)  # type: ignore[union-attr]
            if not root or root.isdigit():
                raise KeyTemplateError(
                    f"The lock key {key!r} has a positional field {{{field}}}; name the value, e.g. {{pk}}."
                )
            if spec and "{" in spec:
                raise KeyTemplateError(f"The lock key {key!r} nests a field in a format spec.")
            roots.add(root)
            if field == root:
                bare.add(root)
        self.template = key
        self.roots = frozenset(roots)
        self.bare_roots = frozenset(bare)
        self.fixed = not roots
        self.argument_roots = tuple(sorted(self.roots - VIEW_NAMES))
        self.safe = "".join(char for char in SAFE_CHARS if char not in between)
        self._formatter = _Formatter(key, self.safe)
        self._fields = _parsed_fields(parsed)

    def check_against(self, func: Callable[..., Any], *, view_names: bool, extra: Iterable[str] = ()) -> None:
        """Refuse, when decorating, names that ``func`` can never provide (``extra``: names given
        by ``params``), and the view's query parameters or headers used whole."""
        self.signature = _signature(func) if self.roots else None
        if self.callable is not None or self.signature is None:
            return
        params = self.signature.parameters
        if view_names:
            named = {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
            self.shadowed = frozenset(self.roots & (VIEW_NAMES - {"request"}) & named)
            self.argument_roots = tuple(sorted((self.roots - VIEW_NAMES) | self.shadowed))
            whole = sorted(self.bare_roots & _NAMED_VALUES - set(params))
            if whole:
                raise KeyTemplateError(_whole_values_message(self.template, whole[0]))
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return
        known = set(params) | set(extra) | (VIEW_NAMES if view_names else set())
        unknown = sorted(self.roots - known)
        if unknown:
            names = ", ".join(sorted(n for n in params if n not in ("self", "cls")))
            raise KeyTemplateError(
                f"The lock key {self.template!r} uses {', '.join('{' + n + '}' for n in unknown)}, but "
                f"{getattr(func, '__qualname__', func)!r} has no such argument (its arguments: {names or 'none'}"
                + ("; views also offer request, user, query, headers, args, kwargs, view)." if view_names else ").")
            )

    def render(self, namespace: Mapping[str, Any]) -> str:
        """The key: the template filled from ``namespace`` (a ``str.format`` of the template with
        the checks and encoding of :class:`_Formatter`, from the fields parsed when decorating)."""
        if not self.roots:
            return self.template
        formatter = self._formatter
        fields = self._fields
        if fields is None:
            return formatter.vformat(self.template, (), {"namespace": namespace})
        parts = []
        for literal, field, first, rest, conversion, spec in fields:
            if literal:
                parts.append(literal)
            if field is None:
                continue
            if first not in namespace:
                raise KeyTemplateError(f"The lock key {self.template!r} uses {{{first}}}, which is not available here.")
            value = namespace[first]
            if rest:
                try:
                    for is_attribute, item in rest:
                        value = getattr(value, item) if is_attribute else value[item]
                except (KeyTemplateError, BadRequest):
                    raise
                except (AttributeError, KeyError, IndexError, TypeError) as exc:
                    raise _unfillable(self.template, field, exc) from exc
            if conversion is not None:
                value = formatter.convert_field(value, conversion)
            parts.append(formatter.format_field(value, spec))
        return "".join(parts)


def _parsed_fields(parsed: list[tuple[Any, ...]]) -> Optional[list[_Field]]:
    """``(literal, field, first name, [(is_attribute, attribute or index), ...], conversion, spec)``
    for each part of a parsed template, as :meth:`string.Formatter.get_field` splits a field; ``None``
    when a field or spec is one the formatter would refuse only while filling it (its error stays)."""
    fields: list[_Field] = []
    for literal, field, spec, conversion in parsed:
        if field is None:
            fields.append((literal, None, "", [], None, ""))
            continue
        if "{" in (spec or "") or "}" in (spec or ""):
            return None
        try:
            first, rest = _string.formatter_field_name_split(field)
            steps = list(rest)
        except ValueError:
            return None
        fields.append((literal, field, first, steps, conversion, spec or ""))
    return fields


def _dotted(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _signature(func: Callable[..., Any]) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None


def _bound_arguments(signature: Optional[inspect.Signature], args: tuple, kwargs: dict) -> dict[str, Any]:
    """The arguments of a call by name (extra keyword arguments included)."""
    if signature is None:
        return dict(kwargs)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return dict(kwargs)
    bound.apply_defaults()
    values: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        param = bound.signature.parameters[name]
        if param.kind is param.VAR_KEYWORD:
            values.update(value)
        else:
            values[name] = value
    return values


def _keyword_values(names: Any, kwargs: dict) -> Optional[dict[str, Any]]:
    """``names`` and their values when the call passed all of them by keyword, else ``None``.

    Then they are what :func:`_bound_arguments` would give for them (a value passed by keyword is
    the argument's value, also when binding fails), so the template needs no binding."""
    values = {}
    for name in names:
        if name not in kwargs:
            return None
        values[name] = kwargs[name]
    return values


def _find_request(args: tuple) -> tuple[Optional[HttpRequest], int]:
    """The request among the first two positional arguments (function view or method), if any."""
    if args:
        if isinstance(args[0], HttpRequest):
            return args[0], 0
        if len(args) > 1 and isinstance(args[1], HttpRequest):
            return args[1], 1
    return None, -1


# -- releasing -------------------------------------------------------------------------------------
class _Release:
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
            _release_logged(self.primitive)


def _release_at_close(response: HttpResponseBase, request: HttpRequest, release: Callable[[], None]) -> None:
    """Release when ``response`` is closed, or at the latest when Django closes ``request``.

    A middleware may answer with another response and never close the view's (Django's
    ``ConditionalGetMiddleware`` turns it into a 304); the handler adds ``request.close`` to the
    closers of the response it sends, whichever it is, so the hold ends with that one.  A release
    runs once, whichever comes first."""
    response._resource_closers.append(release)
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


def _release_logged(primitive: Any) -> None:
    try:
        primitive.release()
    except (LockError, *_REDIS_ERRORS) as exc:
        if not isinstance(exc, LockError) and not redis_unavailable(exc):
            raise
        _log_release_failure(primitive, exc)


async def _arelease_logged(primitive: Any) -> None:
    try:
        await primitive.release()
    except (LockError, *_REDIS_ERRORS) as exc:
        if not isinstance(exc, LockError) and not redis_unavailable(exc):
            raise
        _log_release_failure(primitive, exc)


class _AsyncRelease(_Release):
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
            _release_logged(twin)
        finally:
            if not isinstance(self.primitive, _AsyncPermitHold):  # a permit's twin shares its permits
                # The hold ended (or was found lost) for the asyncio object as well.
                vars(self.primitive._state()).update(vars(twin._state()))

    def _needs_loop(self) -> bool:
        """Whether the release must run on the loop: the hold is in that loop's watchdog (renewal
        or the claim of a provisional hand-off), or it is a Redlock's.  Otherwise the thread that
        closes the response releases it with the sync client, without a hop to the loop."""
        primitive = self.primitive
        if isinstance(primitive, _AsyncPermitHold):
            permit = primitive.semaphore._permits.get(encode_identity(primitive.identity, primitive.name))
            return permit is not None and permit.watched
        if isinstance(primitive, AsyncSignallingLock):
            return bool(getattr(primitive._state(), "watched", False))
        return True

    async def arelease(self) -> None:
        if not self._claim():
            return
        if asyncio.get_running_loop() is self.loop:
            await _arelease_logged(self.primitive)
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
    """A sync object holding what the asyncio ``primitive`` holds (same name, token, fence)."""
    if isinstance(primitive, _AsyncPermitHold):
        return primitive.sync_twin()
    if isinstance(primitive, AsyncSignallingRedlock):
        redlock = SignallingRedlock(
            get_redlock_masters(), primitive.name, timeout=primitive.timeout, thread_local=False,
            node_timeout=primitive.node_timeout, label=primitive.label, app_name=primitive.app_name,
        )
        vars(redlock._state()).update(vars(primitive._state()))
        redlock._fences.update(primitive._fences)
        redlock.speak_for(primitive)
        return redlock
    twin = _twin_template(primitive)._fresh(get_client())
    # The hold's state (token, fence, deadline, start); neither object is shared with a thread.
    vars(twin._state()).update(vars(primitive._state()))
    twin.speak_for(primitive)
    return twin


#: Keys of ``@locked(limit=N)`` already logged for a limit in Redis that differs from N.
_warned_limits: set[str] = set()

#: Sync locks the sync twins of asyncio holds are copied from (see :func:`_twin_template`).
_twin_templates: dict[tuple[Any, ...], Any] = {}


def _twin_template(primitive: Any) -> Any:
    """A sync lock without a client, with the name, timeout and application name of the asyncio
    lock ``primitive``: its twins are copies of it (made once per name, not checked and computed
    again for every release from a thread)."""
    key = (primitive.name, primitive.timeout, type(primitive.timeout), primitive.app_name)
    template = _twin_templates.get(key)
    if template is None:
        template = SignallingLock(None, primitive.name, timeout=primitive.timeout, thread_local=False,
                                  app_name=primitive.app_name)
        if cacheable(primitive.name):
            if len(_twin_templates) >= _MADE_LOCKS_MAX:
                _twin_templates.clear()
            _twin_templates[key] = template
    return template


async def _released_after(stream: Any, release: _AsyncRelease) -> Any:
    try:
        async for chunk in stream:
            yield chunk
    finally:
        await release.arelease()


# -- semaphore permits -----------------------------------------------------------------------------
class _PermitHold:
    """One permit of a semaphore taken by ``@locked``, with a lock's shape (``fence``, ``valid``,
    ``release()``) and usable from any thread: it acquires under its own identity."""

    kind = "semaphore"

    def __init__(self, semaphore: Any) -> None:
        self.semaphore = semaphore
        self.identity = secrets.token_hex(16)
        self._fence: Optional[int] = None

    @property
    def name(self) -> Any:
        return self.semaphore.name

    @property
    def limit(self) -> Optional[int]:
        """The limit in force: the one stored in Redis when a refusal reported it, else this
        semaphore's (the first acquire of a name stores it)."""
        return getattr(self.semaphore, "refused_limit", None) or self.semaphore.limit

    @property
    def retry_after(self) -> Optional[int]:
        return self.semaphore.retry_after

    @property
    def fence(self) -> Optional[int]:
        permit = self.semaphore.permit(self.identity)
        return permit.fence if permit is not None else self._fence

    @property
    def valid(self) -> bool:
        permit = self.semaphore.permit(self.identity)
        return permit is not None and permit.valid

    def _after_acquire(self, acquired: bool) -> bool:
        if acquired:
            self._fence = self.semaphore.permit(self.identity).fence
        return acquired

    def acquire(self, blocking: bool = False, blocking_timeout: Optional[float] = None) -> bool:
        return self._after_acquire(self.semaphore.acquire(self.identity, blocking, blocking_timeout))

    def release(self) -> None:
        if not self.semaphore.release(self.identity):
            raise LockLostError("The permit was lost before it was released", lock_name=self.name)

    def __repr__(self) -> str:
        return f"<permit of {self.semaphore!r} fence={self.fence}>"


class _AsyncPermitHold(_PermitHold):
    """The asyncio form of :class:`_PermitHold`."""

    def sync_twin(self) -> _PermitHold:
        """The same permit seen through a sync semaphore (for a release after the loop ended)."""
        semaphore = self.semaphore
        twin = semaphore_class(asyncio=False)(
            get_client(), semaphore.name, semaphore.limit, semaphore.timeout, app_name=semaphore.app_name
        )
        twin._permits, twin._acquired_at = semaphore._permits, semaphore._acquired_at
        twin.speak_for(semaphore)
        hold = _PermitHold(twin)
        hold.identity, hold._fence = self.identity, self._fence
        return hold

    async def acquire(self, blocking: bool = False, blocking_timeout: Optional[float] = None) -> bool:  # type: ignore[override]
        return self._after_acquire(await self.semaphore.acquire(self.identity, blocking, blocking_timeout))

    async def release(self) -> None:  # type: ignore[override]
        if not await self.semaphore.release(self.identity):
            raise LockLostError("The permit was lost before it was released", lock_name=self.name)


# -- the decorator ---------------------------------------------------------------------------------
class Locked:
    """The object ``locked(...)`` returns: a decorator and a (sync or async) context manager."""

    def __init__(
        self,
        key: Union[str, Callable[..., Any], None] = None,
        *,
        timeout: Any = _DEFAULT,
        wait: float = 0,
        limit: Optional[int] = None,
        status: Optional[int] = None,
        handler: Optional[Callable[..., Any]] = None,
        template_name: Optional[str] = None,
        auto_renew: Optional[bool] = None,
        rollback_on_loss: bool = False,
        using: Optional[str] = None,
        fail_open: Optional[bool] = None,
        label: Optional[str] = None,
        params: Optional[Mapping[str, Any]] = None,
        redlock: bool = False,
    ) -> None:
        if not isinstance(redlock, bool):
            raise InvalidLockArgumentType("redlock must be True or False", lock_name=key)
        timeout = no_expiry_timeout(timeout, key)
        if redlock and limit is not None:
            raise InvalidLockArgument(
                "redlock=True cannot be combined with limit: a Redlock is a lock, not a semaphore", lock_name=key
            )
        if redlock and timeout is None:
            raise InvalidLockArgument("redlock=True needs a timeout: a Redlock always expires", lock_name=key)
        if timeout is not _DEFAULT:
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
        self.key = key
        self.timeout = timeout
        self.wait = wait
        self.limit = limit
        self.status = status
        self.handler = handler
        self.template_name = template_name
        self.auto_renew = auto_renew
        self.rollback_on_loss = rollback_on_loss
        self.using = using
        self.fail_open = fail_open
        self.label = label
        self.params = dict(params or {})
        self.redlock = redlock
        # What each acquire is called with; a plain lock (neither a Redlock nor a semaphore).
        self._acquire_kw: dict[str, Any] = (
            {"blocking": True, "blocking_timeout": wait} if wait else {"blocking": False}
        )
        self._plain_lock = not redlock and limit is None
        # The same, as positional arguments of a lock's acquire(sleep, blocking, blocking_timeout).
        self._lock_acquire_args = (None, True, wait) if wait else (None, False, None)
        # The key of the context manager, checked on its first use.
        self._context_key: Optional[KeyTemplate] = None
        # Context-manager holds of this object, per thread/task (one object may be shared).
        self._held: contextvars.ContextVar[tuple] = contextvars.ContextVar(f"locked-{id(self)}", default=())
        # One lock made per name, label and flavour (with the settings it was made from, and no
        # client): each use takes a fresh copy of it on the current client (Lock._fresh) instead of
        # checking and computing it all again.
        self._made: dict[tuple[str, Optional[str], Optional[str], bool], tuple[CoordSettings, Any]] = {}

    # -- primitives ------------------------------------------------------------------------------
    def _check_redlock_settings(self, settings: Optional[CoordSettings] = None) -> None:
        """With ``redlock=True``: refuse settings without masters or with no default timeout.

        When decorating (``settings`` None), only once Django's settings are configured and valid
        (otherwise the call itself raises the error)."""
        if not self.redlock:
            return
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
                f"@locked(redlock=True) on {self.key!r} needs Redlock masters: set "
                'DJANGO_REDIS_COORD["REDLOCK"] = {"MASTERS": ["redis://host-a:6379/0", ...]}.'
            )
        if self.timeout is _DEFAULT and settings.default_timeout is None:
            raise InvalidLockArgument(
                "redlock=True needs a timeout: a Redlock always expires (DEFAULT_TIMEOUT is None; pass timeout=...)",
                lock_name=self.key,
            )

    def _primitive_options(self, settings: CoordSettings) -> dict[str, Any]:
        timeout = settings.default_timeout if self.timeout is _DEFAULT else self.timeout
        auto_renew = self.auto_renew
        if auto_renew is None:
            auto_renew = settings.auto_renew and timeout is not None
        return {"timeout": timeout, "auto_renew": bool(auto_renew)}

    def _make(self, name: str, label: Optional[str], settings: CoordSettings, *, is_async: bool,
              view: Optional[str] = None) -> Any:
        """The primitive of one use; ``view``: the dotted path of the view it guards (holder info)."""
        if self._plain_lock:
            return self._make_lock(name, label, settings, is_async=is_async, view=view)
        options = self._primitive_options(settings)
        key = settings.prefixed(name)
        if self.redlock:
            self._check_redlock_settings(settings)
            options.update(redlock_node_timeout(options["timeout"]))
            if is_async:
                redlock: Any = AsyncSignallingRedlock(
                    get_async_redlock_masters(), key, app_name=name, label=label, thread_local=False, **options
                )
            else:
                redlock = SignallingRedlock(get_redlock_masters(), key, app_name=name, label=label,
                                            thread_local=False, **options)
            redlock.name_view(view)
            return redlock
        assert self.limit is not None  # neither a Redlock nor a lock: a semaphore
        semaphore = make_semaphore(name, self.limit, options["timeout"], asyncio=is_async, label=label,
                                   auto_renew=options["auto_renew"])
        semaphore.name_view(view)
        return _AsyncPermitHold(semaphore) if is_async else _PermitHold(semaphore)

    def _make_lock(self, name: str, label: Optional[str], settings: CoordSettings, *, is_async: bool,
                   view: Optional[str]) -> Any:
        """A signalling lock on the current client: a copy of the one made for this name, label,
        view, flavour and settings (made here the first time)."""
        client = get_async_client() if is_async else get_client()
        made = self._made.get((name, label, view, is_async))
        if made is None or made[0] is not settings:
            lock_class = AsyncSignallingLock if is_async else SignallingLock
            made_lock = lock_class(None, settings.prefixed(name), app_name=name, label=label, thread_local=False,
                                   **self._primitive_options(settings))
            made_lock.name_view(view)
            made = (settings, made_lock)
            if cacheable(name) and cacheable(label):  # long names are not kept (see keys.CACHED_NAME_MAX)
                if len(self._made) >= _MADE_LOCKS_MAX:
                    self._made.clear()
                self._made[(name, label, view, is_async)] = made
        return made[1]._fresh(client)

    def _fails_open(self, settings: CoordSettings) -> bool:
        return settings.fail_open if self.fail_open is None else self.fail_open

    # -- responses -------------------------------------------------------------------------------
    def _contention(self, name: str, primitive: Any, waited: float, settings: CoordSettings) -> Contention:
        limit = self.limit
        if limit is not None:
            limit = primitive.limit or limit
            seen = name if cacheable(name) else hashlib.sha256(name.encode()).hexdigest()
            if limit != self.limit and seen not in _warned_limits:
                if len(_warned_limits) >= _MADE_LOCKS_MAX:
                    _warned_limits.clear()
                _warned_limits.add(seen)
                logger.warning(
                    "@locked(%r, limit=%d): Redis holds the limit %d for this key, stored by an earlier "
                    "acquire, and that one is in force; change it with Semaphore.set_max_size()",
                    name, self.limit, limit,
                )
        return Contention(
            name=name,
            key=primitive.name if isinstance(primitive.name, str) else primitive.name.decode(),
            retry_after=getattr(primitive, "retry_after", None),
            limit=limit,
            wait_time=waited,
            status=self.status or settings.contention_status,
        )

    def _handler(self, settings: CoordSettings) -> Optional[Callable[..., Any]]:
        if self.handler is not None:
            return self.handler
        handler = settings.contention_handler
        if isinstance(handler, str):
            from django.utils.module_loading import import_string

            handler = import_string(handler)
        return handler

    def _default_contention_response(self, request: HttpRequest, info: Contention) -> HttpResponse:
        if self.template_name is not None:
            from django.shortcuts import render

            response = render(request, self.template_name, {"contention": info}, status=info.status)
        else:
            wait = f" Retry in {info.retry_after} s." if info.retry_after is not None else ""
            what = "all permits are taken" if info.limit is not None else "another request holds it"
            response = HttpResponse(
                f"{info.name}: {what}.{wait}\n", status=info.status, content_type="text/plain; charset=utf-8"
            )
        return response

    @staticmethod
    def _with_retry_after(response: Any, info: Contention) -> Any:
        if isinstance(response, HttpResponseBase) and info.retry_after is not None and "Retry-After" not in response:
            response["Retry-After"] = str(info.retry_after)
        return response

    def _contended_sync(self, request: HttpRequest, info: Contention, settings: CoordSettings) -> Any:
        handler = self._handler(settings)
        if handler is not None:
            response = handler(request, info)
            if inspect.isawaitable(response):
                raise ImproperlyConfigured(f"The contention handler {handler!r} of a sync view must not be async.")
        else:
            response = self._default_contention_response(request, info)
        return self._with_retry_after(response, info)

    async def _contended_async(self, request: HttpRequest, info: Contention, settings: CoordSettings) -> Any:
        handler = self._handler(settings)
        if handler is not None:
            response = handler(request, info)
            if inspect.isawaitable(response):
                response = await response
        else:
            response = self._default_contention_response(request, info)
        return self._with_retry_after(response, info)

    def _unavailable_response(self, name: str, settings: CoordSettings) -> HttpResponse:
        return HttpResponse(
            f"{name}: the coordination service is unavailable; try again later.\n",
            status=settings.unavailable_status,
            content_type="text/plain; charset=utf-8",
        )

    def _unavailable(
        self, request: Optional[HttpRequest], name: str, settings: CoordSettings, exc: BaseException
    ) -> Any:
        """Redis could not be reached: log, then :data:`_RUN_UNLOCKED` (fail open), the 503 response
        (a view failing closed), or re-raise (anything else failing closed)."""
        if self._fails_open(settings):
            logger.warning("Redis unreachable for lock %r (%s): running without the lock (fail open)", name, exc)
            if request is not None:
                request.coord_lock = None  # type: ignore[attr-defined]
            return _RUN_UNLOCKED
        logger.error("Redis unreachable for lock %r (%s): refusing (fail closed)", name, exc)
        if request is None:
            raise exc
        return self._unavailable_response(name, settings)

    def _refused(
        self, request: Optional[HttpRequest], name: str, primitive: Any, started: float, settings: CoordSettings
    ) -> Contention:
        """The key is taken: what a view's answer needs; anything else gets :class:`LockContended`."""
        info = self._contention(name, primitive, _now() - started, settings)
        if request is None:
            raise LockContended(_contended_message(info), lock_name=name, retry_after=info.retry_after)
        return info

    # -- decoration ------------------------------------------------------------------------------
    def __call__(self, target: Any) -> Any:
        if isinstance(target, type):
            return self._decorate_class(target)
        if not callable(target):
            raise InvalidLockArgumentType(f"@locked decorates a function or a class, not {type(target).__name__}")
        # A class-based view's as_view() is a function of Django's, the same for every class:
        # named after its class, as when the class itself is decorated.
        view_class = getattr(target, "view_class", None)
        return self._decorate(target, _dotted(view_class if isinstance(view_class, type) else target))

    def _decorate_class(self, cls: type) -> type:
        dispatch = getattr(cls, "dispatch", None)
        if dispatch is None:
            raise InvalidLockArgumentType(f"@locked on a class needs a view class with dispatch(); {cls!r} has none")
        is_async = bool(getattr(cls, "view_is_async", False))
        cls.dispatch = self._decorate(dispatch, _dotted(cls), force_async=is_async)  # type: ignore[attr-defined]
        return cls

    def _decorate(self, func: Callable[..., Any], default_name: str, *, force_async: bool = False) -> Any:
        self._check_redlock_settings()
        key = KeyTemplate(self.key, default_name)
        key.check_against(func, view_names=True, extra=self.params)
        label = self.label or default_name
        is_async = force_async or iscoroutinefunction(func)
        if is_async and self.rollback_on_loss:
            raise ImproperlyConfigured(
                f"rollback_on_loss needs a sync view: Django's transactions are sync-only ({default_name})."
            )
        if not is_async and iscoroutinefunction(self.handler):
            raise ImproperlyConfigured(
                f"The contention handler {self.handler!r} is async, and {default_name} is sync: give it a sync one."
            )
        if is_async:

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await self._call_async(func, key, label, args, kwargs)

            async_wrapper.locked = self  # type: ignore[attr-defined]
            if self.redlock:
                redlock_users[async_wrapper] = default_name
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return self._call_sync(func, key, label, args, kwargs)

        wrapper.locked = self  # type: ignore[attr-defined]
        if self.redlock:
            redlock_users[wrapper] = default_name
        return wrapper

    # -- naming ----------------------------------------------------------------------------------
    def _view_namespace(
        self, func: Callable[..., Any], key: KeyTemplate, request: HttpRequest, index: int, args: tuple, kwargs: dict,
        user: Any = _DEFAULT,
    ) -> dict[str, Any]:
        namespace = _keyword_values(key.argument_roots, kwargs)
        if namespace is None:
            namespace = dict(self.params)
            namespace.update(_bound_arguments(key.signature, args, kwargs))
        roots = key.roots - key.shadowed  # the view's own arguments win
        if "user" in roots:
            if user is _DEFAULT:
                if not hasattr(request, "user"):
                    raise KeyTemplateError(
                        f"The lock key {key.template!r} uses {{user}} but the request has no user "
                        "(is AuthenticationMiddleware installed?)."
                    )
                user = request.user
            if "user" in key.bare_roots and getattr(user, "is_anonymous", False):
                # str() of every anonymous user is the same: they would all share one key.
                raise MissingKeyValue(f"The lock key {key.template!r} uses {{user}}, and the request is anonymous.")
            namespace["user"] = user
        if "query" in roots:
            namespace["query"] = _RequestValues(request.GET, "query parameter", key.template)
        if "headers" in roots:
            namespace["headers"] = _RequestValues(request.headers, "header", key.template)
        namespace["request"] = request
        for name, value in (("args", args[index + 1 :]), ("kwargs", kwargs), ("view", key.default_name)):
            if name not in key.shadowed:
                namespace[name] = value
        return namespace

    def _call_namespace(self, key: KeyTemplate, args: tuple, kwargs: dict) -> dict[str, Any]:
        """What a plain function's key template is filled from: ``params`` and the call's arguments."""
        namespace = _keyword_values(key.roots, kwargs)
        if namespace is None:
            namespace = {**self.params, **_bound_arguments(key.signature, args, kwargs)}
        return namespace

    def _name_sync(self, func: Callable[..., Any], key: KeyTemplate, args: tuple, kwargs: dict) -> tuple[Any, str]:
        request, index = _find_request(args)
        if key.fixed:
            return request, key.template
        if key.callable is not None:
            name = key.callable(*args[index:], **kwargs) if request is not None else key.callable(*args, **kwargs)
            if inspect.isawaitable(name):
                raise ImproperlyConfigured("The key callable of a sync function must not be async.")
            return request, self._check_name(name, key)
        if request is not None:
            return request, key.render(self._view_namespace(func, key, request, index, args, kwargs))
        return None, key.render(self._call_namespace(key, args, kwargs))

    async def _name_async(
        self, func: Callable[..., Any], key: KeyTemplate, args: tuple, kwargs: dict
    ) -> tuple[Any, str]:
        request, index = _find_request(args)
        if key.fixed:
            return request, key.template
        if key.callable is not None:
            name = key.callable(*args[index:], **kwargs) if request is not None else key.callable(*args, **kwargs)
            if inspect.isawaitable(name):
                name = await name
            return request, self._check_name(name, key)
        if request is not None:
            user = _DEFAULT
            if "user" in key.roots and "user" not in key.shadowed and hasattr(request, "auser"):
                user = await request.auser()
            return request, key.render(self._view_namespace(func, key, request, index, args, kwargs, user))
        return None, key.render(self._call_namespace(key, args, kwargs))

    @staticmethod
    def _check_name(name: Any, key: KeyTemplate) -> str:
        if name is None or name == "" or name == b"":
            raise MissingKeyValue(f"The lock key callable {key.callable!r} returned {name!r}.")
        if not isinstance(name, (str, bytes)):
            raise KeyTemplateError(f"The lock key callable {key.callable!r} returned a {type(name).__name__}.")
        return check_key_length(name.decode() if isinstance(name, bytes) else name, KeyTooLong)

    # -- sync calls ------------------------------------------------------------------------------
    def _call_sync(self, func: Callable[..., Any], key: KeyTemplate, label: str, args: tuple, kwargs: dict) -> Any:
        if key.fixed:
            request, name = _find_request(args)[0], key.template
        else:
            request, name = self._name_sync(func, key, args, kwargs)
        settings = coord_settings()
        view = key.default_name if request is not None else None  # a plain function is no view
        primitive = self._make(name, label, settings, is_async=False, view=view)
        started = _now()
        try:
            if self._plain_lock:
                acquired = primitive.acquire(*self._lock_acquire_args)
            else:
                acquired = primitive.acquire(**self._acquire_kw)
        except _REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            outcome = self._unavailable(request, name, settings, exc)
            return func(*args, **kwargs) if outcome is _RUN_UNLOCKED else outcome
        if not acquired:
            return self._contended_sync(request, self._refused(request, name, primitive, started, settings), settings)
        release = _Release(primitive)
        token = _current.set(primitive)
        try:
            if request is not None:
                request.coord_lock = primitive  # type: ignore[attr-defined]
            if self.rollback_on_loss:
                from django.db import transaction

                with transaction.atomic(using=self.using):
                    result = func(*args, **kwargs)
                    if not primitive.valid:
                        logger.error("Lost %r before the view returned: rolling its transaction back", name)
                        raise LockLostError(
                            f"The hold of {name!r} was lost before the view returned; its transaction was rolled back",
                            lock_name=name,
                        )
            else:
                result = func(*args, **kwargs)
        except BaseException:
            release()
            raise
        finally:
            _current.reset(token)
        if request is not None and isinstance(result, HttpResponseBase):
            _release_at_close(result, request, release)
        else:
            release()
        return result

    # -- asyncio calls ---------------------------------------------------------------------------
    async def _call_async(
        self, func: Callable[..., Any], key: KeyTemplate, label: str, args: tuple, kwargs: dict
    ) -> Any:
        if key.fixed:
            request, name = _find_request(args)[0], key.template
        else:
            request, name = await self._name_async(func, key, args, kwargs)
        settings = coord_settings()
        view = key.default_name if request is not None else None  # a plain function is no view
        primitive = self._make(name, label, settings, is_async=True, view=view)
        started = _now()
        try:
            acquired = await primitive.acquire(**self._acquire_kw)
        except _REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            outcome = self._unavailable(request, name, settings, exc)
            return await _maybe_await(func(*args, **kwargs)) if outcome is _RUN_UNLOCKED else outcome
        if not acquired:
            info = self._refused(request, name, primitive, started, settings)
            return await self._contended_async(request, info, settings)
        release = _AsyncRelease(primitive, asyncio.get_running_loop())
        token = _current.set(primitive)
        try:
            if request is not None:
                request.coord_lock = primitive  # type: ignore[attr-defined]
            result = await _maybe_await(func(*args, **kwargs))
        except BaseException:
            await release.arelease()
            raise
        finally:
            _current.reset(token)
        if request is not None and isinstance(result, HttpResponseBase):
            if getattr(result, "streaming", False) and getattr(result, "is_async", False):
                result.streaming_content = _released_after(result.streaming_content, release)  # type: ignore
            _release_at_close(result, request, release)
        else:
            await release.arelease()
        return result

    # -- context manager -------------------------------------------------------------------------
    def _context_name(self) -> str:
        if self.key is None:
            raise KeyTemplateError("locked() used as a context manager needs a key.")
        key = self._context_key
        if key is None:
            key = self._context_key = KeyTemplate(self.key, "")
        if key.callable is not None:
            return self._check_name(key.callable(**self.params), key)
        return key.render(self.params)

    def _start(self, *, is_async: bool) -> tuple[str, CoordSettings, Any, float]:
        name = self._context_name()
        settings = coord_settings()
        return name, settings, self._make(name, self.label or name, settings, is_async=is_async), _now()

    def _push(self, primitive: Any) -> Any:
        self._held.set((*self._held.get(), primitive))
        return primitive

    def _pop(self) -> Any:
        held = self._held.get()
        self._held.set(held[:-1])
        return held[-1]

    def __enter__(self) -> Any:
        name, settings, primitive, started = self._start(is_async=False)
        try:
            acquired = primitive.acquire(**self._acquire_kw)
        except _REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            self._unavailable(None, name, settings, exc)  # raises unless failing open
            return self._push(None)
        if not acquired:
            self._refused(None, name, primitive, started, settings)
        return self._push(primitive)

    def __exit__(self, *exc_info: Any) -> None:
        primitive = self._pop()
        if primitive is not None:
            _release_logged(primitive)

    async def __aenter__(self) -> Any:
        name, settings, primitive, started = self._start(is_async=True)
        try:
            acquired = await primitive.acquire(**self._acquire_kw)
        except _REDIS_ERRORS as exc:
            if not redis_unavailable(exc):
                raise
            self._unavailable(None, name, settings, exc)
            return self._push(None)
        if not acquired:
            self._refused(None, name, primitive, started, settings)
        return self._push(primitive)

    async def __aexit__(self, *exc_info: Any) -> None:
        primitive = self._pop()
        if primitive is not None:
            await _arelease_logged(primitive)


def _contended_message(info: Contention) -> str:
    what = f"all {info.limit} permits of {info.name!r} are taken" if info.limit else f"{info.name!r} is held"
    return what + (f"; retry in {info.retry_after} s" if info.retry_after is not None else "")


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


#: The clock of the time spent trying (``Contention.wait_time``).
_now = time.monotonic


def locked(key: Any = None, /, **options: Any) -> Any:
    """Decorate a view, a class-based view, a method or a function, or use as a context manager.

    ``@locked`` (bare) locks on the view's dotted name; ``@locked("orders:{pk}", timeout=30)``
    on a template (a callable key goes by keyword: ``@locked(key=lambda request, pk: ...)``).
    Options: ``timeout``, ``wait``, ``limit``, ``status``, ``handler``, ``template_name``,
    ``auto_renew``, ``rollback_on_loss``, ``using``, ``fail_open``, ``label``, ``params``,
    ``redlock`` (take the lock with Redlock over ``REDLOCK["MASTERS"]``).
    """
    if "key" in options:
        if key is not None:
            raise InvalidLockArgumentType("locked() got the key twice")
        return Locked(options.pop("key"), **options)
    if callable(key) and not options:
        # Bare @locked on a function or class.
        return Locked()(key)
    if callable(key):
        raise InvalidLockArgumentType("pass a callable key by keyword: locked(key=my_key_function, ...)")
    return Locked(key, **options)
