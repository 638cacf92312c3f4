"""One rule for twins: each family package keeps what its sync and asyncio halves share in
``rules.py``, the sync half in ``sync.py`` and the asyncio half in ``aio.py``; the halves offer
the same public methods with the same parameters.  Where the sync half is generated from the
asyncio one (tools/unasync.py, docs/twins.md), the generated file is what its source gives, and
the check says so when it is not."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import shutil
from pathlib import Path

import pytest

import django_redis_coord
from django_redis_coord.core.durable import aio as async_durable
from django_redis_coord.core.durable import sync as durable
from django_redis_coord.core.lock import aio as async_lock
from django_redis_coord.core.lock import sync as locks
from django_redis_coord.core.redlock import aio as async_redlock
from django_redis_coord.core.redlock import sync as redlock
from django_redis_coord.core.rwlock import aio as async_rwlock
from django_redis_coord.core.rwlock import sync as rwlock
from django_redis_coord.core.semaphore import aio as async_semaphore
from django_redis_coord.core.semaphore import sync as semaphores
from django_redis_coord.integrations.cache_fill import aio as async_cache_fill
from django_redis_coord.integrations.cache_fill import sync as cache_fill

PACKAGE = Path(django_redis_coord.__file__).resolve().parent
ROOT = PACKAGE.parent

FAMILIES = {
    "Lock": (locks.Lock, async_lock.Lock),
    "Semaphore": (semaphores.Semaphore, async_semaphore.Semaphore),
    "Redlock": (redlock.Redlock, async_redlock.Redlock),
    "DurableLock": (durable.DurableLock, async_durable.DurableLock),
    # A read-write lock's holds (``lock.read``, ``lock.write``) are what acquires and releases.
    "RWHold": (rwlock.RWHold, async_rwlock.RWHold),
}
#: Twins whose objects are not held themselves (no with block of their own).
HOLDERS_OF_HOLDS = {
    "ReadWriteLock": (rwlock.ReadWriteLock, async_rwlock.ReadWriteLock),
}

#: Twin functions: the asyncio one is named as Django names its asyncio cache methods (``a`` + name).
FUNCTIONS = {
    "get_or_set": (cache_fill.get_or_set, async_cache_fill.aget_or_set),
}


def public_api(cls: type) -> dict[str, str]:
    """Public methods and properties of ``cls`` (inherited ones too) with their signatures."""
    api = {}
    for name in dir(cls):
        if name.startswith("_") and name != "__init__":
            continue
        attribute = inspect.getattr_static(cls, name)
        if isinstance(attribute, (staticmethod, classmethod)):
            attribute = attribute.__func__
        if isinstance(attribute, property):
            api[name] = "property"
        elif inspect.isfunction(attribute):
            api[name] = str(inspect.signature(attribute))
    return api


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_asyncio_twin_has_the_same_public_methods_and_parameters(family):
    sync, asynchronous = FAMILIES[family]
    assert public_api(sync) == public_api(asynchronous)
    assert hasattr(sync, "__enter__") and hasattr(sync, "__exit__")
    assert hasattr(asynchronous, "__aenter__") and hasattr(asynchronous, "__aexit__")


@pytest.mark.parametrize("family", sorted(HOLDERS_OF_HOLDS))
def test_twins_holding_holds_have_the_same_public_methods_and_parameters(family):
    sync, asynchronous = HOLDERS_OF_HOLDS[family]
    assert public_api(sync) == public_api(asynchronous)
    for method in ("locked", "holders", "do_release", "do_extend", "do_inspect"):
        assert not inspect.iscoroutinefunction(getattr(sync, method)), (family, method)
        assert inspect.iscoroutinefunction(getattr(asynchronous, method)), (family, method)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_what_talks_to_redis_is_awaited_in_the_asyncio_twin(family):
    sync, asynchronous = FAMILIES[family]
    for method in ("acquire", "release", "extend", "reacquire"):
        assert not inspect.iscoroutinefunction(getattr(sync, method)), (family, method)
        assert inspect.iscoroutinefunction(getattr(asynchronous, method)), (family, method)


@pytest.mark.parametrize("family", sorted(FUNCTIONS))
def test_twin_functions_take_the_same_parameters_and_the_asyncio_one_is_awaited(family):
    sync, asynchronous = FUNCTIONS[family]
    assert asynchronous.__name__ == "a" + sync.__name__
    def parameters(function):  # names, kinds and defaults (a producer's type differs: it may be async)
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]

    assert parameters(sync) == parameters(asynchronous)
    assert not inspect.iscoroutinefunction(sync) and inspect.iscoroutinefunction(asynchronous)


FAMILY_DIRS = {
    "lock": "core/lock", "semaphore": "core/semaphore", "redlock": "core/redlock", "durable": "core/durable",
    "waiting": "core/waiting", "queue": "core/queue", "rwlock": "core/rwlock", "leader": "core/leader",
    "ratelimit": "core/ratelimit", "cache_fill": "integrations/cache_fill",
}
ASYNC_MODULES = [PACKAGE / folder / "aio.py" for folder in FAMILY_DIRS.values()]


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """The ``from .x import names`` / ``from ..family.x import names`` of a module, as (module, names)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            found.append((node.module or "", [alias.name for alias in node.names]))
    return found


@pytest.mark.parametrize("path", ASYNC_MODULES, ids=lambda path: path.parent.name)
def test_asyncio_modules_take_nothing_private_from_a_sync_module(path):
    for module, names in _imports(path):
        assert module.rpartition(".")[2] != "sync" and "sync" not in names, (
            f"{path.parent.name}/aio.py imports from a sync twin ({module}): use the family's rules.py")
        if module.rpartition(".")[2] != "rules":
            private = [name for name in names if name.startswith("_")]
            assert not private, f"{path.parent.name}/aio.py imports private {private} from {module}"


@pytest.mark.parametrize("family", sorted(FAMILY_DIRS))
def test_each_family_has_a_base_a_sync_and_an_asyncio_module(family):
    folder = PACKAGE / FAMILY_DIRS[family]
    assert (folder / "rules.py").exists()
    assert (folder / "sync.py").exists()
    assert (folder / "aio.py").exists()


def _generator():
    """tools/unasync.py, imported from the checkout (it is no module of the package)."""
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "tools" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def copy_of_the_twins(tmp_path, monkeypatch):
    """The generator, pointed at a copy of every generated twin and its source under ``tmp_path``."""
    unasync = _generator()
    for source, target in unasync.TWINS:
        for path in (source, target):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / path, tmp_path / path)
    monkeypatch.setattr(unasync, "ROOT", tmp_path)
    return unasync


def test_each_generated_twin_is_what_its_source_gives(capsys):
    unasync = _generator()
    assert unasync.TWINS
    assert unasync.main(["--check"]) == 0, capsys.readouterr().err
    for source, target in unasync.TWINS:
        text = (ROOT / target).read_text()
        assert text.startswith(f"# Generated from {source} by `python3 dev.py twins`")
        assert "async def" not in text and "await " not in text


def test_the_check_fails_on_a_generated_twin_edited_by_hand(copy_of_the_twins, capsys):
    source, target = copy_of_the_twins.TWINS[0]
    path = copy_of_the_twins.ROOT / target
    path.write_text(path.read_text().replace("return True", "return False", 1))
    assert copy_of_the_twins.main(["--check"]) == 1
    assert f"{target} differs from what {source} gives" in capsys.readouterr().err
    assert copy_of_the_twins.main([]) == 0  # regenerated: the check passes again
    assert copy_of_the_twins.main(["--check"]) == 0


@pytest.mark.parametrize("source, target", _generator().TWINS, ids=[target for _, target in _generator().TWINS])
def test_the_check_fails_on_each_generated_twin_edited_by_hand(copy_of_the_twins, capsys, source, target):
    path = copy_of_the_twins.ROOT / target
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(len(lines) // 2, "# edited by hand\n")
    path.write_text("".join(lines))
    assert copy_of_the_twins.main(["--check"]) == 1
    assert f"{target} differs from what {source} gives" in capsys.readouterr().err
    copy_of_the_twins.main([])
    assert copy_of_the_twins.main(["--check"]) == 0


def test_the_check_fails_on_a_source_changed_without_regenerating(copy_of_the_twins, capsys):
    source, target = copy_of_the_twins.TWINS[0]
    path = copy_of_the_twins.ROOT / source
    path.write_text(path.read_text() + "\n\nasync def added() -> None:\n    await something()\n")
    assert copy_of_the_twins.main(["--check"]) == 1
    assert f"{target} differs from what {source} gives" in capsys.readouterr().err
    copy_of_the_twins.main([])
    assert "def added() -> None:\n    something()" in (copy_of_the_twins.ROOT / target).read_text()


def test_the_check_fails_on_a_substitution_no_source_uses(copy_of_the_twins, capsys, monkeypatch):
    monkeypatch.setattr(copy_of_the_twins, "_COMPILED",
                        [*copy_of_the_twins._COMPILED, (copy_of_the_twins._compile("NoSuchName"), "Other")])
    monkeypatch.setattr(copy_of_the_twins, "SUBS", [*copy_of_the_twins.SUBS, ("NoSuchName", "Other")])
    assert copy_of_the_twins.main(["--check"]) == 1
    assert "'NoSuchName' -> 'Other' changes no source" in capsys.readouterr().err
