"""Every system-check id means one kind of problem.

The ids live in one registry, ``django_redis_coord.config.check_ids``: one name and one meaning per
id, and no id under two names.  Nothing else in the package writes an id (so a new problem takes a
registry name, whose meaning it must fit, or a new id), ``Problem`` refuses an id the registry
lacks, and docs/django.md's check tables give each id exactly one row.  Read from the files
themselves, so a new module or a new table row is checked without being listed here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import django_redis_coord
from django_redis_coord.config import check_ids
from django_redis_coord.config.check_ids import CHECK_IDS, PREFIX
from django_redis_coord.config.defaults import Problem
from django_redis_coord.config.validation import settings_problems

PACKAGE = Path(django_redis_coord.__file__).resolve().parent
DOCS = PACKAGE.parent / "docs" / "django.md"
AN_ID = re.compile(r"django_redis_coord\.[EWI]\d{3}")
GOOD_URL = "redis://127.0.0.1:6379/0"


def registry_names() -> dict[str, str]:
    """Every public name of the registry bound to an id: name -> id."""
    return {
        name: value
        for name, value in vars(check_ids).items()
        if name.isupper() and name != "PREFIX" and isinstance(value, str)
    }


def test_each_id_has_one_name_and_one_meaning():
    names = registry_names()
    assert sorted(names.values()) == sorted(CHECK_IDS), "a registry name whose id has no meaning, or the reverse"
    shared = {check_id: sorted(n for n, v in names.items() if v == check_id) for check_id in CHECK_IDS}
    assert {k: v for k, v in shared.items() if len(v) > 1} == {}, "one id under two names: two kinds of problem"
    meanings = list(CHECK_IDS.values())
    assert len(set(meanings)) == len(meanings), "two ids with one meaning"
    assert all(AN_ID.fullmatch(check_id) for check_id in CHECK_IDS)


def test_no_module_writes_an_id_outside_the_registry():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(check_ids.__file__).resolve():
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and AN_ID.fullmatch(node.value):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value}")
    assert found == [], "take the id from django_redis_coord.config.check_ids"


def test_the_checks_take_their_ids_from_the_registry():
    """The system checks of checks.py give ``id=`` a registry name, or the id of a settings
    ``Problem`` (which refuses any other)."""
    names = registry_names()
    calls = []
    for node in ast.walk(ast.parse((PACKAGE / "checks.py").read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Error", "Warning", "Info"):
            (given,) = [keyword.value for keyword in node.keywords if keyword.arg == "id"]
            calls.append(ast.unparse(given))
    assert "problem.id" in calls
    others = [call for call in calls if call != "problem.id"]
    assert others and all(call.startswith("ids.") and call[4:] in names for call in others), others


def test_a_problem_refuses_an_id_the_registry_lacks():
    with pytest.raises(ValueError, match="E999"):
        Problem(PREFIX + "E999", "a new kind of problem")
    assert Problem(check_ids.BAD_URL, "malformed").id == "django_redis_coord.E006"


def documented_ids() -> list[str]:
    """The first cell of every row of the tables under docs/django.md's "System checks"."""
    text = DOCS.read_text()
    section = text.split("\n## System checks\n", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    return [cell for cell in cells if cell not in ("id", "---")]


def test_the_docs_give_each_id_one_row():
    rows = documented_ids()
    assert all(re.fullmatch(r"[EWI]\d{3}", row) for row in rows), f"one id per row, no ranges: {rows}"
    assert sorted(rows) == sorted(set(rows)), "an id documented twice"
    assert sorted(PREFIX + row for row in rows) == sorted(CHECK_IDS)


@pytest.mark.parametrize("expected, value", [
    # DEFAULT_TIMEOUT a lock refuses, and AUTO_RENEW with nothing to renew: two kinds, two ids.
    (check_ids.BAD_DEFAULT_TIMEOUT, {"URL": GOOD_URL, "DEFAULT_TIMEOUT": 0}),
    (check_ids.AUTO_RENEW_WITHOUT_EXPIRY, {"URL": GOOD_URL, "DEFAULT_TIMEOUT": "never", "AUTO_RENEW": True}),
    # An option the locks cannot use, and options redis-py refuses with the URL: two kinds, two ids.
    (check_ids.BAD_CLIENT_OPTIONS, {"URL": GOOD_URL, "CLIENT_OPTIONS": {"decode_responses": True}}),
    (check_ids.CLIENT_OPTIONS_REFUSED, {"URL": GOOD_URL, "CLIENT_OPTIONS": {"max_connections": "x"}}),
    (check_ids.CLIENT_OPTIONS_REFUSED, {"URL": "unix:///run/redis.sock", "CLIENT_OPTIONS": {"socket_keepalive": 1}}),
])
def test_problems_that_shared_an_id_have_their_own(expected, value):
    assert [problem.id for problem in settings_problems(value, {})] == [expected]
