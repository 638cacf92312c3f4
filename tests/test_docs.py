"""Every code block of README.md and docs/*.md, checked against a real redis-server.

Each page is one test.  Its fenced blocks are taken in order:

* ```` ```python ```` blocks run, one after the other, in one namespace per page (a later block may
  use what an earlier one defined).  Interactive blocks (``>>>``) run as doctests, so their
  printed results are checked too.  A block with a top-level ``await`` runs in an event loop.
  ``redis.Redis()`` and ``redis.asyncio.Redis()`` called without an address reach the test
  session's private redis-server (their default host and port are pointed at it for the test),
  and Django is configured by ``tests/settings.py`` (``DJANGO_REDIS_COORD`` on the same server).
  Models a page defines get a table for the test (registered in the ``django_redis_coord`` app,
  dropped afterwards).  Names a page leaves to the reader (``send_invoice``, ``render``, ...) are
  no-op stand-ins recording their calls: see ``STAND_INS``.
* A Python block preceded by ``<!-- docs: settings -->`` is a settings snippet: it is executed in
  a fresh namespace, and what it defines is checked (``DJANGO_REDIS_COORD`` by the app's own
  validation, with the snippet's ``CACHES``; ``LOGGING`` by ``logging.config``; ``INSTALLED_APPS``
  must name the app).
* A block preceded by ``<!-- docs: no-run REASON -->`` is not run; ``test_blocks_not_run_are_few``
  keeps their number small and requires a reason for each.
* ``json`` blocks are parsed; shell (``bash``, ``console``, ``text``) blocks are not run, but every
  ``python3 dev.py SUBCOMMAND`` they show must be a subcommand dev.py has.

``test_relative_links_resolve`` checks that every relative link of those pages names a file that
exists (and, for ``#anchors``, a heading of it).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import doctest
import importlib.util
import inspect
import json
import logging
import logging.config
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import redis.asyncio
from django.conf import settings
from django.test import override_settings

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*docs:\s*(no-run|settings)\b\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
#: Blocks that may be marked ``no-run`` across all pages (each needs a reason): keep it small.
MAX_NOT_RUN = 12


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str
    marker: str = ""
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    marker, reason = "", ""
    while index < len(lines):
        line = lines[index]
        match = MARKER.search(line)
        if match:
            marker, reason = match.group(1), match.group(2)
            index += 1
            continue
        fence = FENCE.match(line)
        if fence:
            start = index
            index += 1
            body = []
            while index < len(lines) and lines[index].rstrip() != "```":
                body.append(lines[index])
                index += 1
            found.append(Block(page, start + 1, fence.group(1) or "text", "\n".join(body) + "\n", marker, reason))
            marker, reason = "", ""
        elif line.strip():
            marker, reason = "", ""  # a marker applies to the fence right after it only
        index += 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]


# -- stand-ins for what a page leaves to the reader ----------------------------------------------
class Calls(list):
    """Every call made to the stand-ins of one page: ``(name, args, kwargs)``."""


def stand_ins(calls: Calls) -> dict:
    def recorder(name: str):
        def stand_in(*args, **kwargs):
            calls.append((name, args, kwargs))

        stand_in.__name__ = name
        return stand_in

    async def arecorder(*args, **kwargs):
        calls.append(("aclose_month", args, kwargs))

    class App:
        """A Celery-like app: ``@app.task(bind=True)`` binds the task as its first argument."""

        def task(self, bind: bool = False, **options):
            def decorate(func):
                if not bind:
                    return func

                def task(*args, **kwargs):
                    return func(task, *args, **kwargs)

                return task

            return decorate

    functions = ["send_invoice", "render", "build_report", "import_rows", "write", "crawl", "pay_out",
                 "move_item", "close_ledger", "close_month"]
    names = {name: recorder(name) for name in functions}
    names.update(
        aclose_month=arecorder,
        batches=["batch 1", "batch 2"],
        today="2026-11-26",
        new_balance=200,
        app=App(),
        logger=logging.getLogger("docs"),
        metrics=types.SimpleNamespace(increment=recorder("metrics.increment")),
        View=__import__("django.views", fromlist=["View"]).View,
    )
    return names


# -- running ---------------------------------------------------------------------------------------
def point_default_clients_at(monkeypatch, host: str, port: int) -> None:
    """``redis.Redis()`` / ``redis.asyncio.Redis()`` without an address reach ``host:port``."""
    for cls in (redis.Redis, redis.asyncio.Redis):
        init = cls.__init__
        # redis-py wraps __init__ in decorators (deprecated arguments): patch the innermost function.
        while hasattr(init, "__wrapped__"):
            init = init.__wrapped__
        if init.__kwdefaults__ and "host" in init.__kwdefaults__:  # keyword-only (redis.asyncio)
            monkeypatch.setitem(init.__kwdefaults__, "host", host)
            monkeypatch.setitem(init.__kwdefaults__, "port", port)
            continue
        params = [p for p in inspect.signature(init).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params[len(params) - len(init.__defaults__):]]
        defaults = list(init.__defaults__)
        defaults[names.index("host")] = host
        defaults[names.index("port")] = port
        monkeypatch.setattr(init, "__defaults__", tuple(defaults))


class PageModels:
    """Models a page defines: registered in the django_redis_coord app, a table each as soon as the
    class is made (a block may define a model and use it at once), all removed at the end."""

    MODULE = "django_redis_coord.docs_examples"

    def __init__(self) -> None:
        from django.db.models.signals import class_prepared

        self.created: list = []
        class_prepared.connect(self.create, weak=False)

    def create(self, sender, **kwargs) -> None:
        from django.db import connection

        if sender.__module__ == self.MODULE and not sender._meta.abstract:
            with connection.schema_editor() as editor:
                editor.create_model(sender)
            self.created.append(sender)

    def drop(self) -> None:
        from django.apps import apps
        from django.db import connection
        from django.db.models.signals import class_prepared

        class_prepared.disconnect(self.create)

        for model in reversed(self.created):
            with connection.schema_editor() as editor:
                editor.delete_model(model)
        app_models = apps.all_models["django_redis_coord"]
        for model in self.created:
            app_models.pop(model._meta.model_name, None)
        apps.get_app_config("django_redis_coord").models = app_models
        apps.clear_cache()


def run_python(block: Block, namespace: dict) -> None:
    source = block.code
    if source.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(source, namespace, block.where, str(block.page), block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, clear_globs=False)
        namespace.update(test.globs)  # DocTest ran on a copy of the namespace
        result = runner.summarize(verbose=False)
        assert result.failed == 0, f"{block.where}: {result.failed} doctest example(s) failed (output above)"
        return
    # Line numbers of tracebacks are those of the page.
    code = compile("\n" * (block.line) + source, str(block.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


def check_settings(block: Block) -> list[str]:
    """The snippet executed alone; what it defines, validated.  Returns what it checked."""
    from django_redis_coord.config.settings import settings_problems

    namespace: dict = {}
    exec(compile(block.code, block.where, "exec"), namespace)
    checked = []
    if "INSTALLED_APPS" in namespace:
        assert "django_redis_coord" in namespace["INSTALLED_APPS"], block.where
        checked.append("INSTALLED_APPS")
    if "DJANGO_REDIS_COORD" in namespace:
        caches = namespace.get("CACHES", {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                                      "LOCATION": "redis://127.0.0.1:6379/1"}})
        problems = settings_problems(namespace["DJANGO_REDIS_COORD"], caches)
        assert problems == [], f"{block.where}: {problems}"
        checked.append("DJANGO_REDIS_COORD")
    if "CACHES" in namespace:
        for alias, cache in namespace["CACHES"].items():
            assert cache["BACKEND"].rsplit(".", 1)[0] in {"django_redis.cache", "django.core.cache.backends.redis"}
            checked.append(f"CACHES[{alias!r}]")
    if "LOGGING" in namespace:
        config = namespace["LOGGING"]
        # Django's own loggers stay enabled (the default, True, would silence them).
        assert config.get("disable_existing_loggers") is False, f"{block.where}: disable_existing_loggers"
        logger = logging.getLogger("django_redis_coord")
        saved = (logger.handlers[:], logger.level, logger.propagate)
        try:
            logging.config.dictConfig(config)
            assert logging.getLogger("django").disabled is False
            wanted = config.get("loggers", {}).get("django_redis_coord", {}).get("level", "WARNING")
            assert logger.level == logging.getLevelName(wanted) and logger.handlers
        finally:
            logger.handlers[:], logger.level, logger.propagate = saved
        checked.append("LOGGING")
    assert checked, f"{block.where}: a settings snippet that defines no setting"
    return checked


def check_shell(block: Block) -> int:
    """``python3 dev.py X`` lines name subcommands dev.py has; returns how many were checked."""
    sys.path.insert(0, str(ROOT))
    try:
        import dev
    finally:
        sys.path.remove(str(ROOT))
    count = 0
    for command in re.findall(r"python3 dev\.py (\w+)", block.code):
        assert command in dev.COMMANDS, f"{block.where}: dev.py has no {command!r} subcommand"
        count += 1
    return count


@pytest.fixture
def stack():
    with contextlib.ExitStack() as exits:
        yield exits


@pytest.fixture(autouse=True)
def _forget_redlock_users():
    """Functions a page decorates with ``@locked(redlock=True)`` must not make other modules'
    system checks report E017 (as in tests/django/test_redlock.py)."""
    from django_redis_coord.decorator.locked import redlock_users

    before = dict(redlock_users)
    yield
    for wrapper in list(redlock_users):
        if wrapper not in before:
            del redlock_users[wrapper]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_code_blocks_run(page, redis_client, redis_server, redis_servers, monkeypatch, stack):
    blocks = [b for b in ALL_BLOCKS if b.page == page]
    point_default_clients_at(monkeypatch, redis_server.host, redis_server.port)
    if "REDLOCK" in page.read_text():
        # Pages using DJANGO_REDIS_COORD["REDLOCK"] get three real masters of their own.
        masters = [server.url for server in redis_servers(3)]
        stack.enter_context(override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD,
                                                                  "REDLOCK": {"MASTERS": masters}}))
    calls = Calls()
    namespace = {"__name__": PageModels.MODULE, **stand_ins(calls)}
    models = PageModels()
    ran = 0
    try:
        for block in blocks:
            if block.marker == "no-run":
                continue
            if block.language == "python" and block.marker == "settings":
                check_settings(block)
                ran += 1
            elif block.language == "python":
                redis_client.flushdb()
                run_python(block, namespace)
                ran += 1
            elif block.language == "json":
                json.loads(block.code)
                ran += 1
            else:
                check_shell(block)
    finally:
        models.drop()
    runnable = [b for b in blocks if b.marker != "no-run" and b.language in {"python", "json"}]
    assert ran == len(runnable)


def test_blocks_not_run_are_few():
    not_run = [b for b in ALL_BLOCKS if b.marker == "no-run"]
    for block in not_run:
        assert block.reason, f"{block.where}: say why the block does not run: <!-- docs: no-run REASON -->"
        assert block.language == "python", f"{block.where}: only Python blocks need a no-run marker"
    assert len(not_run) <= MAX_NOT_RUN, [b.where for b in not_run]
    python = [b for b in ALL_BLOCKS if b.language == "python"]
    assert len(python) >= 40  # the collector found the pages' blocks
    print(f"\n{len(python)} Python blocks, {len(not_run)} not run: " + ", ".join(b.where for b in not_run))


def test_every_fence_names_its_language():
    unnamed = [b.where for b in ALL_BLOCKS if b.language == "text" and not b.code.strip()]
    assert unnamed == []
    assert {b.language for b in ALL_BLOCKS} <= {"python", "json", "bash", "sh", "console", "text"}


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\- ]", "", title)
            found.add(title.replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", [*PAGES, ROOT / "benchmarks" / "README.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link} names no file"
        if anchor and target.suffix == ".md":
            assert anchor in anchors(target), f"{page.name}: {link}: no such heading in {target.name}"


def python_source(block: Block) -> str:
    """A Python block's code, an interactive one's (``>>>``) without its prompts and output."""
    source = block.code
    if source.lstrip().startswith(">>>"):
        source = "\n".join(line[4:] for line in source.splitlines() if line.startswith((">>> ", "... ")))
    return source


def test_a_name_is_imported_from_one_module_across_the_pages():
    """A reader copying imports from two pages never meets two paths for one name: each name the
    pages import from a module of the package comes from one module (the package itself and the
    asyncio twins aside: ``from django_redis_coord import Lock`` next to
    ``from django_redis_coord.holders import semaphore_holders``, ``django_redis_coord.asyncio.Lock``)."""
    modules: dict[str, dict[str, list[str]]] = {}
    for block in ALL_BLOCKS:
        if block.language != "python":
            continue
        for node in ast.walk(ast.parse(python_source(block))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("django_redis_coord."):
                continue
            if node.module.startswith("django_redis_coord.asyncio"):
                continue
            for alias in node.names:
                modules.setdefault(alias.name, {}).setdefault(node.module, []).append(block.where)
    several = {name: found for name, found in modules.items() if len(found) > 1}
    assert not several, several
    assert "django_redis_coord.contention" in modules["is_skipped"]  # the collector read the pages


# -- the import paths docs/architecture.md lists ---------------------------------------------------
PACKAGE = ROOT / "django_redis_coord"


def listed_paths() -> tuple[list[str], list[str]]:
    """The two tables of docs/architecture.md's "Import paths" section: (the import paths, the
    modules that are not import paths), each the first column's names in order."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Import paths\n", 1)[1].split("\n## ", 1)[0]
    tables: list[list[str]] = []
    rows: list[str] = []
    for line in [*section.splitlines(), ""]:
        match = re.match(r"\| `(django_redis_coord[\w.]*)` \|", line)
        if match:
            rows.append(match.group(1))
        elif rows:
            tables.append(rows)
            rows = []
    assert len(tables) == 2, tables
    return tables[0], tables[1]


def top_level_modules() -> set[str]:
    """Every module and package right under ``django_redis_coord/``."""
    found = {path.stem for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    return found | {path.parent.name for path in PACKAGE.glob("*/__init__.py")}


def imported_paths(block: Block) -> set[str]:
    """The package's modules a Python block imports: ``from django_redis_coord import tracing`` is
    ``django_redis_coord.tracing`` (a module), ``from django_redis_coord import Lock`` the root."""
    found = set()
    for node in ast.walk(ast.parse(python_source(block))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                file = PACKAGE.parent / submodule.replace(".", "/")
                is_module = file.with_suffix(".py").is_file() or (file / "__init__.py").is_file()
                found.add(submodule if is_module else node.module)
    return {path for path in found if path.split(".")[0] == "django_redis_coord"}


def test_the_listed_import_paths_are_the_package_s_top_level_modules():
    """Every module or package at the top of the package is listed, as an import path or as one
    that is not; every listed one exists and imports; none is listed twice."""
    public, other = listed_paths()
    listed = [*public, *other]
    assert len(listed) == len(set(listed)), listed
    assert "django_redis_coord" in public and "django_redis_coord.core" in other  # the tables were read
    tops = {path.split(".")[1] for path in listed if path.count(".") >= 1}
    existing = top_level_modules()
    assert not existing - tops, f"not listed in docs/architecture.md: {sorted(existing - tops)}"
    assert not tops - existing, f"listed in docs/architecture.md, no such module: {sorted(tops - existing)}"
    for path in listed:
        assert importlib.util.find_spec(path) is not None, path
    assert all(path.count(".") == 1 for path in other), other


def test_the_pages_import_only_listed_paths_and_teach_each_of_them():
    """The README's and the guides' code imports the package through the listed import paths only,
    and each listed path is taught (imported or named) outside docs/architecture.md."""
    public, _ = listed_paths()
    imported: dict[str, list[str]] = {}
    for block in ALL_BLOCKS:
        if block.language == "python":
            for path in imported_paths(block):
                imported.setdefault(path, []).append(block.where)
    unlisted = {path: where for path, where in imported.items() if path not in public}
    assert not unlisted, unlisted
    assert {"django_redis_coord", "django_redis_coord.tracing", "django_redis_coord.asyncio"} <= set(imported)
    named = set(imported)
    for page in PAGES:
        if page.name != "architecture.md":
            named |= set(re.findall(r"django_redis_coord(?:\.\w+)+", page.read_text()))
    untaught = [path for path in public if path != "django_redis_coord"
                and not any(name == path or name.startswith(path + ".") for name in named)]
    assert not untaught, untaught
