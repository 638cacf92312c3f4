"""The package's layout keeps its rules: a Django-free core, no import loop, no documented
re-export module used from inside, no private attribute of another module's objects.

Everything here is read from the files themselves (every module of the package, walked), so a new
module is checked without being listed; see docs/architecture.md for the layout and its rules."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import django_redis_coord

PACKAGE = Path(django_redis_coord.__file__).resolve().parent
NAME = "django_redis_coord"
CORE = f"{NAME}.core"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def in_core(module: str) -> bool:
    return module == CORE or module.startswith(CORE + ".")


def imports_of(module: str) -> list[tuple[str, ast.AST]]:
    """The modules of the package that ``module`` imports, at module level or inside a function
    (relative imports resolved; ``from package import submodule`` is the submodule)."""
    found = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package(module):
                    base.pop()
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.append((submodule if submodule in MODULES else target, node))
    return [(target, node) for target, node in found if target in MODULES and target != module]


GRAPH = {module: sorted({target for target, _ in imports_of(module)}) for module in MODULES}


def is_documented_path(module: str) -> bool:
    """A thin module that keeps a documented import path working: its docstring says so."""
    doc = ast.get_docstring(ast.parse(MODULES[module].read_text())) or ""
    return doc.startswith("The documented path")


DOCUMENTED_PATHS = sorted(module for module in MODULES if is_documented_path(module))


def test_every_module_of_the_core_imports_without_django():
    """A process where importing ``django`` fails imports every module under ``core/``."""
    core = sorted(module for module in MODULES if in_core(module))
    code = textwrap.dedent(
        f"""
        import importlib, sys

        class NoDjango:
            def find_spec(self, name, path=None, target=None):
                if name == "django" or name.startswith("django."):
                    raise ImportError(f"the core imported {{name}}")
                return None

        sys.meta_path.insert(0, NoDjango())
        sys.path.insert(0, {str(PACKAGE.parent)!r})  # this copy of the package, whatever is installed
        for module in {core!r}:
            importlib.import_module(module)
        print(len({core!r}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(core) > 40


def find_cycle(graph: dict[str, list[str]]) -> list[str]:
    """One import loop of ``graph`` (a list of modules, the first repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in graph[module]:
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = 2
        return []

    for module in graph:
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return []


def test_find_cycle_finds_a_loop_and_only_a_loop():
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b", "c"], "b": ["c"], "c": []}) == []


def test_no_import_loop_in_the_package():
    """Lazy (function-level) imports count: a loop of them is a loop of concerns."""
    print("\n".join(f"{module} -> {', '.join(targets)}" for module, targets in GRAPH.items() if targets))
    assert sum(map(len, GRAPH.values())) > 100  # the graph was read
    cycle = find_cycle(GRAPH)
    assert not cycle, " -> ".join(cycle)


def test_the_core_imports_nothing_outside_the_core():
    outside = [(module, target) for module in MODULES if in_core(module)
               for target in GRAPH[module] if not in_core(target)]
    assert not outside, outside


KEY_TEMPLATES = f"{NAME}.key_templates"


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_key_templates_build_on_the_core_and_the_settings_only():
    """The key-template language sits below every decorator that uses it (``@locked``,
    ``@rate_limited``, the unique tasks): it imports none of them."""
    outside = [(module, target) for module in MODULES if in_package(module, KEY_TEMPLATES)
               for target in GRAPH[module]
               if not any(in_package(target, home) for home in (KEY_TEMPLATES, CORE, f"{NAME}.config"))]
    assert not outside, outside


def template_names() -> set[str]:
    """The public names the modules of ``key_templates/`` define (classes, functions, constants)."""
    names = set()
    for module in MODULES:
        if not in_package(module, KEY_TEMPLATES):
            continue
        for node in ast.parse(MODULES[module].read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def test_key_template_names_are_imported_from_their_home():
    """``decorator/`` (``@locked``), ``ratelimited/`` and the integrations take the template
    language from ``key_templates/``, never through one another (``from ..decorator.locked import
    MissingKeyValue`` in ``ratelimited/``); documented paths and the package's root, which serve
    names to users, aside."""
    names = template_names()
    assert {"KeyTemplate", "MissingKeyValue", "name_sync", "client_ip", "shortened"} <= names  # they were read
    found = set()
    for module in MODULES:
        if module == NAME or module in DOCUMENTED_PATHS or in_package(module, KEY_TEMPLATES):
            continue
        for target, node in imports_of(module):
            if isinstance(node, ast.ImportFrom) and not in_package(target, KEY_TEMPLATES):
                found |= {(module, target, alias.name) for alias in node.names if alias.name in names}
    assert not found, sorted(found)


def test_no_module_of_the_package_imports_a_documented_path():
    """The documented paths re-export their real homes; the package itself imports the homes.

    The package's root serves the documented module ``holders`` as its attribute
    (``django_redis_coord.holders``): that is the documented path itself."""
    assert f"{NAME}.decorators" in DOCUMENTED_PATHS and f"{NAME}.exceptions" in DOCUMENTED_PATHS
    served = {f"{NAME}.{name}" for name in django_redis_coord._MODULES}
    found = [(module, target) for module in MODULES for target in GRAPH[module]
             if target in DOCUMENTED_PATHS and not (module == NAME and target in served)]
    assert not found, found


def test_documented_paths_are_thin():
    """Nothing but imports from the real home, ``__all__``, and a ``__getattr__`` serving a name."""
    for module in DOCUMENTED_PATHS:
        for node in ast.parse(MODULES[module].read_text()).body[1:]:
            kinds = (ast.ImportFrom, ast.Import, ast.Assign, ast.AnnAssign)
            thin = isinstance(node, kinds) or (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
            assert thin, f"{module}: {ast.dump(node)[:80]}"


#: Underscore names of other objects that are public API: Django's model ``_meta`` and
#: ``_base_manager`` (documented: "Model _meta API"), and namedtuple's ``_replace``.
PUBLIC_UNDERSCORE = {"_meta", "_base_manager", "_replace"}

#: Private attributes read or written across objects that stay within one concern, each named
#: here; the list may shrink, never grow.  (module, the text of the object, attribute)
KNOWN = {
    # a read-write lock's read and write holds run their lock's steps (the lock is another class)
    *{(f"{NAME}.core.rwlock.{side}", "self.lock", "_held") for side in ("sync", "aio")},
    # the watchdog and the Redlock's loss report call back into the primitive that registered with them
    (f"{NAME}.core.watchdog", "hold.owner", "_mark_lost"),
    (f"{NAME}.core.reporting", "primitive", "_report_loss"),
    # @locked keeps the releases still to run on the request it serves (its own mark on Django's
    # object, read back through ``request.__dict__``)
    (f"{NAME}.decorator.release", "request", "_coord_releases"),
}


SELF = {"self", "cls"}


def private_accesses(module: str) -> set[tuple[str, str, str]]:
    """``x._name``, read or written, where ``x`` is not ``self``, ``cls``, ``super()``, a class of
    the module or a base class of one (a method calling its base class's method by name), and
    ``_name`` is not the module's own: a method or function it defines, a name a class of it
    defines, an attribute it sets on ``self`` or ``cls``.  Setting ``x._name`` on another object
    does not make ``_name`` the module's: ``target._permits = source._permits`` is two accesses."""
    tree = ast.parse(MODULES[module].read_text())
    defined = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    classes = {node.name for node in defined}
    classes |= {base.id for node in defined for base in node.bases if isinstance(base, ast.Name)}
    own = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    own |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name) and node.value.id in SELF}
    own |= {target.id for node in defined for statement in node.body
            for target in (statement.targets if isinstance(statement, ast.Assign) else
                           [statement.target] if isinstance(statement, ast.AnnAssign) else [])
            if isinstance(target, ast.Name)}
    found = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in {"self", "cls", *classes}:
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        if node.attr in PUBLIC_UNDERSCORE or node.attr in own:
            continue
        found.add((module, ast.unparse(owner), node.attr))
    return found


def test_no_private_attribute_of_another_module_s_objects():
    found = set().union(*(private_accesses(module) for module in MODULES))
    assert not found - KNOWN, sorted(found - KNOWN)
    assert not KNOWN - found, f"no longer read, take them off KNOWN: {sorted(KNOWN - found)}"


@pytest.mark.parametrize("source, expected", [
    ("import x\nx._y()\n", {("m", "x", "_y")}),
    ("def f(made):\n    return made._fresh(1)\n", {("m", "made", "_fresh")}),
    ("class A(B):\n    def f(self, o):\n        return self._a, A._b, B._d, super()._c, o._meta\n", set()),
    ("def _own(o):\n    return o._own, o._theirs\n", {("m", "o", "_theirs")}),
    # Setting another object's private attribute is an access, not ownership.
    ("def share(source, target):\n    target._permits = source._permits\n",
     {("m", "target", "_permits"), ("m", "source", "_permits")}),
    ("class A:\n    def __init__(self):\n        self._mine = 1\n\n    def f(self, o):\n        return o._mine\n",
     set()),
    ("class A:\n    _slot = 1\n\ndef f(o):\n    return o._slot, o._state()\n", {("m", "o", "_state")}),
])
def test_private_accesses_sees_what_it_should(source, expected, tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text(source)
    monkeypatch.setitem(MODULES, "m", path)
    assert private_accesses("m") == expected


#: The families of the core: each package (or module: ``identity``, the lock held under a caller's
#: identity) builds one kind of primitive on the shared machinery.
FAMILIES = [f"{CORE}.{family}" for family in
            ("lock", "semaphore", "rwlock", "redlock", "durable", "leader", "ratelimit", "identity")]


def test_no_import_runs_back_up_inside_the_core():
    """The core's shared machinery (``queue/``, ``waiting/``, ``side/``, ``holds``, ``reporting``,
    ``grants``, ...: every module of ``core/`` outside a family's package) knows no family: it
    imports none of ``lock/``, ``semaphore/``, ``rwlock/``, ... (a family imports what it builds on)."""
    shared = [module for module in MODULES if in_core(module) and module != CORE
              and not any(in_package(module, family) for family in FAMILIES)]
    assert f"{CORE}.queue.aio" in shared and f"{CORE}.side.sync" in shared  # the layers were told apart
    up = [(module, target) for module in shared for target in GRAPH[module]
          if any(in_package(target, family) for family in FAMILIES)]
    assert not up, up


def package_classes(cls: type) -> list[str]:
    """The classes of the package in ``cls``'s method resolution order, ``cls`` included."""
    return [klass.__qualname__ for klass in cls.__mro__ if klass.__module__.startswith(NAME + ".")]


@pytest.mark.parametrize("module, name", [
    (f"{CORE}.{family}.{side}", name) for family, name in (("lock", "Lock"), ("semaphore", "Semaphore"),
                                                           ("rwlock", "ReadWriteLock"))
    for side in ("sync", "aio")
])
def test_the_queued_primitives_compose_rather_than_inherit(module, name):
    """A lock, a semaphore and a read-write lock inherit from at most three of the package's classes
    (themselves, their family's rules and what every queued primitive shares); the wait in line, the
    calls to ``events`` and the holds are objects they hold (docs/architecture.md)."""
    import importlib

    cls = getattr(importlib.import_module(module), name)
    classes = package_classes(cls)
    assert len(classes) <= 3, classes
    made = cls(None, "layout")  # no client needed to be made
    assert (type(made.line).__name__, type(made.report).__name__) == ("Line", "Reporter")
