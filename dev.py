#!/usr/bin/env python3
"""Developer entry point: one command for the demo, one for the tests (see README Quick start).

    python3 dev.py demo    # example project on an embedded redis-server, http://127.0.0.1:8000/
    python3 dev.py test    # the whole test suite (what CI runs)
    python3 dev.py bench   # the benchmarks (writes benchmarks/results/)
    python3 dev.py lint    # ruff + mypy

Each command first makes ``.venv`` (if missing) and installs the project with its ``dev`` extras
into it (again only when setup.cfg or pyproject.toml changed).  Needs only Python 3.10+.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"


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


def run(*args: str) -> int:
    return subprocess.call([str(PYTHON), *args], cwd=ROOT)


def replace_with(*args: str) -> int:
    """Become ``.venv/bin/python args``: signals (Ctrl-C, SIGTERM from CI) reach it directly."""
    os.chdir(ROOT)
    os.execv(str(PYTHON), [str(PYTHON), *args])
    return 1  # not reached


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test", "bench", "lint"}:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    ensure_venv()
    if command == "test":
        return replace_with("-m", "pytest", *rest)
    if command == "demo":
        return replace_with(str(ROOT / "example_project" / "run_demo.py"), *rest)
    if command == "bench":
        return replace_with(str(ROOT / "benchmarks" / "run.py"), *rest)
    status = run("-m", "ruff", "check", "django_redis_coord", "tests", "benchmarks")
    return status or run("-m", "mypy")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
