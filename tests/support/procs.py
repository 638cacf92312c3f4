"""Helpers for tests that run several OS processes against one redis-server."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

CTX = multiprocessing.get_context("fork")


def run_processes(target: Callable[..., Any], args_list: Iterable[tuple], timeout: float = 60.0) -> list[Any]:
    """Run ``target(*args, results)`` in one process per ``args`` tuple; return what each put.

    Each process puts exactly one result on the queue; an exception in a child is re-raised here.
    """
    queue = CTX.Queue()
    procs = [CTX.Process(target=_wrap, args=(target, args, queue)) for args in args_list]
    for proc in procs:
        proc.start()
    results = []
    deadline = time.monotonic() + timeout
    for _ in procs:
        remaining = max(0.1, deadline - time.monotonic())
        ok, value = queue.get(timeout=remaining)
        if not ok:
            for proc in procs:
                proc.kill()
            raise AssertionError(f"child process failed: {value}")
        results.append(value)
    for proc in procs:
        proc.join(10)
    return results


def _wrap(target: Callable[..., Any], args: tuple, queue: Any) -> None:
    try:
        queue.put((True, target(*args)))
    except BaseException as exc:  # pragma: no cover - reported to the parent
        import traceback

        queue.put((False, "".join(traceback.format_exception(exc))))


ROOT = Path(__file__).resolve().parents[2]


def manage_py(redis_url: str, *args: str, **popen: Any) -> subprocess.Popen:
    """``python -m django ARGS`` with the test settings on ``redis_url``, as a child process
    (text pipes for stdout and stderr unless ``popen`` says otherwise)."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        DCOORD_TEST_REDIS_URL=redis_url,
    )
    options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    options.update(popen)
    return subprocess.Popen([sys.executable, "-m", "django", *args], env=env, cwd=ROOT, **options)
