"""@locked key templates: the fields parsed once when decorating fill a key exactly as the formatter
filling the template from scratch does, and values passed by keyword need no binding of the call."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_redis_coord import locked
from django_redis_coord.decorator.locked import Locked
from django_redis_coord.key_templates.filling import _view_namespace, call_namespace
from django_redis_coord.key_templates.template import (
    VIEW_NAMES,
    KeyTemplate,
    RequestValues,
    _Formatter,
    bound_arguments,
)


def outcome(fill):
    """What ``fill()`` gives: ``("ok", key)`` or ``("error", type, message)``."""
    try:
        return ("ok", fill())
    except Exception as exc:  # compared, never swallowed: both sides must fail alike
        return ("error", type(exc), str(exc))


def by_formatter(key: KeyTemplate, namespace: dict) -> str:
    """The key as the formatter fills the template, parsing it on each call."""
    return _Formatter(key.template, key.safe).vformat(key.template, (), {"namespace": namespace})


class Thing:
    pk = 7
    name = "a b"
    empty = ""
    nothing = None
    items = ["x", "y:z"]

    @property
    def broken(self):
        raise ValueError("a property that fails")

    def __format__(self, spec):
        return f"thing{spec}"


VALUES = st.one_of(
    st.text(max_size=6),
    st.integers(-1000, 1000),
    st.none(),
    st.just(Thing()),
    st.dictionaries(st.sampled_from(["k", "0", "x"]), st.text(max_size=4), max_size=2),
    st.lists(st.text(max_size=3), max_size=2),
    st.just(RequestValues({"item": "v/1"}, "query parameter", "t")),
)
FIELDS = st.sampled_from([
    "{a}", "{b}", "{a.pk}", "{a.name}", "{a.empty}", "{a.nothing}", "{a.items[1]}", "{a.broken}", "{a[k]}",
    "{a[0]}", "{b[item]}", "{b[missing]}", "{a!r}", "{a!s}", "{a!a}", "{b:>4}", "{a:d}", "{a:x}", "{c}",
    "{a.missing}", "{b[x][0]}",
])
TEXTS = st.sampled_from([":", "-", ".", "/", "{{", "}}", "x", "@", " ", "~"])


@st.composite
def templates(draw):
    parts = [draw(st.sampled_from(["", "k", "lock:", "{{"]))]
    for index in range(draw(st.integers(1, 3))):
        if index:
            parts.append(draw(TEXTS))
        parts.append(draw(FIELDS))
    parts.append(draw(st.sampled_from(["", ":end", "}}"])))
    return "".join(parts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=templates(), a=VALUES, b=VALUES, with_b=st.booleans())
def test_parsed_fields_fill_a_key_as_the_formatter_does(template, a, b, with_b):
    key = KeyTemplate(template, "default")
    assert key._parsed  # filled from the template parsed when decorating, not by the formatter itself
    namespace = {"a": a, **({"b": b} if with_b else {})}
    assert outcome(lambda: key.render(namespace)) == outcome(lambda: by_formatter(key, namespace))


def test_a_field_the_formatter_refuses_only_while_filling_still_fails_then():
    key = KeyTemplate("lock:{a[0]x}", "default")  # valid as a template, refused by the field's split
    with pytest.raises(ValueError, match="format field"):
        key.render({"a": ["v"]})


# -- the call's arguments ----------------------------------------------------------------------
def reference_call_namespace(decorator: Locked, key: KeyTemplate, args: tuple, kwargs: dict) -> dict:
    """What a plain function's template is filled from when the call is bound in full."""
    return {**decorator.params, **bound_arguments(key.signature, args, kwargs)}


def reference_view_namespace(decorator: Locked, key: KeyTemplate, request, index: int, args: tuple,
                             kwargs: dict) -> dict:
    """What a view's template is filled from when the call is bound in full."""
    namespace = {**decorator.params, **bound_arguments(key.signature, args, kwargs)}
    if "user" in key.roots:
        namespace["user"] = request.user
    namespace.update(request=request, args=args[index + 1:], kwargs=kwargs, view=key.default_name)
    return namespace


class User:
    pk = 11

    def __str__(self):
        return "user-11"


def positional_only(a, b="b-default", /, **extra):
    return a, b, extra


def keyword_only(*, a, b="b-default"):
    return a, b


def ordinary(a, b="b-default", *rest, **extra):
    return a, b, rest, extra


CALLS = [
    ((1,), {}), ((), {"a": 1}), ((1, 2), {}), ((1,), {"b": 2}), ((), {"a": 1, "b": 2}), ((1,), {"a": 2}),
    ((1,), {"a": 2, "b": 3}), ((), {}), ((), {"b": 2}), ((1, 2, 3), {"x": 4}), ((), {"a": None, "b": ""}),
]


@pytest.mark.parametrize("function", [positional_only, keyword_only, ordinary])
@pytest.mark.parametrize("params", [{}, {"b": "from-params", "a": "a-from-params"}])
@pytest.mark.parametrize("args, kwargs", CALLS)
def test_keyword_values_fill_a_plain_functions_key_as_binding_the_call_does(function, params, args, kwargs):
    decorator = Locked("job:{a}:{b}", params=params)
    key = KeyTemplate(decorator.key, "job")
    key.check_against(function, view_names=False)
    expected = outcome(lambda: key.render(reference_call_namespace(decorator, key, args, kwargs)))
    assert outcome(lambda: key.render(call_namespace(key, decorator.params, args, kwargs))) == expected


@pytest.mark.parametrize("template", ["order:{pk}:{kind}", "order:{pk}:{user}", "order:{kwargs[pk]}:{view}",
                                      "order:{args[0]}-{pk}", "order:{request.method}.{pk}"])
@pytest.mark.parametrize("args, kwargs", [((), {"pk": 3, "kind": "x"}), ((3,), {"kind": "x"}), ((), {"pk": 3}),
                                          ((3, "y"), {}), ((), {"pk": 3, "kind": "x", "extra": 1}),
                                          ((3,), {"pk": 4, "kind": "x"})])
def test_keyword_values_fill_a_views_key_as_binding_the_call_does(rf, template, args, kwargs):
    def view(request, pk, kind="k-default", **extra):
        return pk

    decorator = Locked(template, params={"kind": "from-params"})
    key = KeyTemplate(template, "tests.view")
    key.check_against(view, view_names=True)
    request = rf.get("/")
    request.user = User()
    call = (request, *args)
    expected = outcome(lambda: key.render(reference_view_namespace(decorator, key, request, 0, call, kwargs)))
    got = outcome(lambda: key.render(_view_namespace(key, decorator.params, request, 0, call, kwargs)))
    assert got == expected


def test_only_the_names_a_view_does_not_offer_itself_are_looked_for_among_its_arguments():
    key = KeyTemplate("x:{pk}:{user.pk}:{query[q]}:{kind}", "v")
    assert set(key.argument_roots) == {"pk", "kind"} and not set(key.argument_roots) & VIEW_NAMES


def test_a_context_manager_checks_its_key_once_and_fills_it_on_every_use(redis_client):
    held = locked("report:{day}", params={"day": "monday"})
    with held as first:
        assert first.name == "report:monday"
    made = held._context_key
    held.params["day"] = "tuesday"
    with held as second:
        assert second.name == "report:tuesday"
    assert held._context_key is made
