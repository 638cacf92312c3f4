"""Key templates (of ``@locked``, ``@rate_limited``, unique tasks): parsed and checked when
decorating, filled on every call.

A template is a ``str.format`` string (``"orders:{pk}"``) filled from what a call offers (see
:mod:`.filling`).  Each value is percent-encoded (and the characters of the template's own text
between two fields too), two fields need text between them, and an encoded value longer than 128
characters is replaced by its SHA-256 digest (:mod:`.values`): two different sets of values never
give the same key.
"""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Optional, Union
from urllib.parse import quote

from django.core.exceptions import BadRequest

from ..core.exceptions import InvalidLockArgumentType, KeyTemplateError
from .values import shortened

__all__ = [
    "KeyTemplate", "KeyTooLong", "MissingKeyValue", "SAFE_CHARS", "VIEW_NAMES", "signature_of", "bound_arguments",
]


class MissingKeyValue(KeyTemplateError, BadRequest):
    """A value the key template needs is missing from the request (a 400 Bad Request in views)."""

    __module__ = "django_redis_coord.exceptions"  # its documented path, as for every error


class KeyTooLong(KeyTemplateError, BadRequest):
    """A key callable gave a name longer than a lock name may be (a 400 Bad Request in views)."""

    __module__ = "django_redis_coord.exceptions"

#: Characters kept as they are in interpolated key values (everything else is percent-encoded),
#: unless the template's text between two of its fields uses them: then they are encoded in values
#: too, so that this text can never be mistaken for part of a value.
SAFE_CHARS = "-_.~@+=,!*'()"
#: The characters :func:`urllib.parse.quote` leaves as they are whatever ``safe`` says.
_QUOTE_NEVER_ENCODES = "-_.~"

#: Names a view's key template may use besides the view's own arguments.
VIEW_NAMES = frozenset({"request", "user", "query", "headers", "client_ip", "args", "kwargs", "view"})
#: View names that hold many values: a template names one of them (``{query[page]}``).
_NAMED_VALUES = frozenset({"query", "headers"})


def _whole_values_message(template: str, root: str) -> str:
    return (f"The lock key {template!r} uses {{{root}}} whole: it holds many values, name one "
            f"(e.g. {{{root}[{'page' if root == 'query' else 'X-Tenant'}]}}); as a whole it would give "
            "every request a key of its own.")

_ROOT = re.compile(r"[^.\[]*")


class RequestValues(Mapping):
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

    def __iter__(self) -> Iterator[str]:
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
            given = ", ".join(sorted(str(name) for name in namespace if name not in VIEW_NAMES)) or "none"
            if "request" in namespace:
                given += "; views also offer request, user, query, headers, client_ip, args, kwargs, view"
            raise KeyTemplateError(
                f"The lock key {self.template!r} uses {{{key}}}, which this call does not provide "
                f"(its arguments: {given})."
            )
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
        #: The template parsed once (:meth:`string.Formatter.parse`), filled by :meth:`render`.
        self._parsed: list[tuple[str, Optional[str], Optional[str], Optional[str]]] = []
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
            parsed = list(_Formatter(key).parse(key))
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
        self._parsed = parsed

    @property
    def metric_template(self) -> str:
        """The label of the metrics of the names made from this key: the template as written
        (``"orders:{pk}"``), the default name (the view's or function's dotted path) when there is
        no key, and for a callable key the default name, else the callable's dotted path."""
        if self.callable is None or self.default_name:
            return self.template
        return f"{getattr(self.callable, '__module__', '?')}.{getattr(self.callable, '__qualname__', '?')}"

    def name_pattern(self) -> Optional[re.Pattern[str]]:
        """A pattern every name this key fills fully matches (each field: one or more characters),
        for telling which decorator a name read back from Redis came from; ``None`` for a callable key."""
        if self.callable is not None:
            return None
        if not self.roots:
            return re.compile(re.escape(self.template))
        return re.compile("".join(re.escape(literal) + ("" if field is None else "(.+)")
                                  for literal, field, _spec, _conversion in self._parsed))

    def check_against(self, func: Callable[..., Any], *, view_names: bool, extra: Iterable[str] = ()) -> None:
        """Refuse, when decorating, names that ``func`` can never provide (``extra``: names given
        by ``params``), and the view's query parameters or headers used whole."""
        self.signature = signature_of(func) if self.roots else None
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
                + ("; views also offer request, user, query, headers, client_ip, args, kwargs, view)."
                   if view_names else ").")
            )

    def render(self, namespace: Mapping[str, Any]) -> str:
        """The key: the template filled from ``namespace`` (a ``str.format`` of the template with
        the checks and encoding of :class:`_Formatter`, from the parts parsed when decorating)."""
        if not self.roots:
            return self.template
        formatter = self._formatter
        lookup = {"namespace": namespace}
        parts = []
        for literal, field, spec, conversion in self._parsed:
            if literal:
                parts.append(literal)
            if field is None:
                continue
            value, _first = formatter.get_field(field, (), lookup)
            if conversion is not None:
                value = formatter.convert_field(value, conversion)
            parts.append(formatter.format_field(value, spec or ""))
        return "".join(parts)


def signature_of(func: Callable[..., Any]) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None


def bound_arguments(signature: Optional[inspect.Signature], args: tuple, kwargs: dict) -> dict[str, Any]:
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
