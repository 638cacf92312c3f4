#!/usr/bin/env python3
"""Run the benchmark modules (``benchmarks/bench_*.py``) against one private redis-server.

    python3 dev.py bench                  # all modules
    python3 dev.py bench --only lock      # only bench_lock.py (comma-separated list or repeat)
    python3 dev.py bench --quick          # small sizes (smoke run)
    python3 dev.py bench --list           # list the modules

Each module's ``run(ctx)`` returns a Section; its report goes to ``results/<name>.md`` and
``results/<name>.json``.  See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("MPLBACKEND", "Agg")

from benchmarks.common import RESULTS_DIR, Context, Section, write_report  # noqa: E402
from django_redis_coord.testing.server import RedisServer  # noqa: E402


def discover() -> list[str]:
    """Names of the benchmark modules (``bench_lock.py`` -> ``lock``), sorted."""
    return sorted(path.stem[len("bench_"):] for path in HERE.glob("bench_*.py"))


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 dev.py bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help="run only these modules (comma-separated, e.g. lock,semaphore); may repeat")
    parser.add_argument("--quick", action="store_true", help="small sizes: seconds, rough figures")
    parser.add_argument("--list", action="store_true", help="list the benchmark modules and exit")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for the reports (default: %(default)s)")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a target is missed")
    return parser.parse_args(argv)


def selected(args: argparse.Namespace) -> list[str]:
    available = discover()
    if not args.only:
        return available
    wanted: list[str] = []
    for item in args.only:
        for name in item.split(","):
            name = name.strip().removeprefix("bench_").removesuffix(".py")
            if name and name not in wanted:
                wanted.append(name)
    unknown = [name for name in wanted if name not in available]
    if unknown:
        raise SystemExit(f"unknown benchmark module(s): {', '.join(unknown)} (available: {', '.join(available)})")
    return wanted


def run_module(name: str, ctx: Context) -> tuple[Section, Optional[str], Path]:
    """Import ``bench_<name>`` and run it; a failure is caught and written into its report."""
    started = time.monotonic()
    ctx.log(f"== {name}")
    error: Optional[str] = None
    try:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        ctx.flush()
        section = module.run(ctx)
        if not isinstance(section, Section):
            raise TypeError(f"bench_{name}.run() returned {type(section).__name__}, not a Section")
    except Exception:
        error = traceback.format_exc()
        print(error, file=sys.stderr, flush=True)
        section = Section(name, f"Benchmark: {name}")
    path = write_report(section, ctx, started=started, error=error)
    ctx.log(f"== {name}: report {path}")
    return section, error, path


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name in discover():
            print(name)
        return 0
    names = selected(args)
    if not names:
        print("no benchmark modules found", file=sys.stderr)
        return 1
    status = 0
    with RedisServer() as server:
        ctx = Context(server, quick=args.quick, results_dir=args.out)
        ctx.log(f"redis-server {ctx.redis_version()} on {server.host}:{server.port} ({server.binary})")
        missed: list[str] = []
        try:
            for name in names:
                section, error, _ = run_module(name, ctx)
                if error:
                    status = 1
                missed += [f"{name}: {item.line()}" for item in section.checks if not item.passed]
        finally:
            ctx.close()
    if missed:
        print("\nTargets missed:\n  " + "\n  ".join(missed), flush=True)
        if args.strict:
            status = status or 1
    return status


if __name__ == "__main__":
    sys.exit(main())
