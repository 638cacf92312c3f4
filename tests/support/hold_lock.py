"""Hold a lock from a separate OS process, for tests of what operators see.

    python -m tests.support.hold_lock REDIS_URL NAME [--timeout S] [--label L] [--auto-renew] [--host H]
        [--mode read|write]

Acquires the lock (blocking, in FIFO order, for up to ``--blocking-timeout`` seconds: by default
longer than any test may run, so that a waiter waits as long as its test needs it, however slow the
machine; a child still running when its test ends is killed), prints ``HELD <fence>`` and keeps it
until stdin is closed or a line is read; then releases it and prints ``RELEASED`` (or ``LOST`` when the hold was
taken away meanwhile, e.g. by a force release).  With ``--auto-renew`` the watchdog renews it and
its loss signal (``on_lost``) prints ``LOSS-SIGNAL``.  ``--host`` makes the holder record name
another host: a holder on another machine, as far as the listing can tell.  ``--mode`` holds that
side of a :class:`~django_redis_coord.ReadWriteLock` instead of a lock.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Optional

import redis

from django_redis_coord import Lock
from django_redis_coord.core.exceptions import LockNotOwnedError
from django_redis_coord.core.rwlock.sync import ReadWriteLock

#: The default ``--blocking-timeout``: longer than any test runs (pytest's timeout is 300 s).
WAIT_LONGER_THAN_A_TEST = 600.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--label", default=None)
    parser.add_argument("--blocking-timeout", type=float, default=WAIT_LONGER_THAN_A_TEST)
    parser.add_argument("--auto-renew", action="store_true")
    parser.add_argument("--host", default=None)
    parser.add_argument("--mode", choices=("read", "write"), default=None)
    options = parser.parse_args(argv)
    client = redis.Redis.from_url(options.url)
    lock_class = Lock if options.host is None else elsewhere(options.host)
    renewal: dict[str, Any] = {}
    if options.auto_renew:
        renewal = {"auto_renew": True, "on_lost": lambda lost: print("LOSS-SIGNAL", flush=True)}
    if options.mode is not None:
        rw = ReadWriteLock(client, options.name, timeout=options.timeout, label=options.label, **renewal)
        lock: Any = rw.hold(options.mode)
    else:
        lock = lock_class(client, options.name, timeout=options.timeout, label=options.label, **renewal)
    print("WAITING", flush=True)
    if not lock.acquire(blocking_timeout=options.blocking_timeout):
        print("TIMEOUT", flush=True)
        return 1
    print(f"HELD {lock.fence}", flush=True)
    sys.stdin.readline()
    try:
        lock.release()
    except LockNotOwnedError:
        print("LOST", flush=True)
        return 0
    print("RELEASED", flush=True)
    return 0


def elsewhere(host: str) -> type[Lock]:
    """A Lock whose holder record says it is held on ``host``."""

    class ElsewhereLock(Lock):
        def holder_info(self, worker: str) -> str:
            return json.dumps({**json.loads(super().holder_info(worker)), "host": host})

    return ElsewhereLock


ROOT = Path(__file__).resolve().parents[2]
#: How long the parent waits for each line of the child (its start-up, its hold, its release): a
#: guard against a hang, never a bound on the machine's speed.
HANG_GUARD = 120.0


class HolderProcess:
    """A ``python -m tests.support.hold_lock`` child: ``fence`` once it holds, ``finish()`` to release."""

    def __init__(self, url: str, name: str, *, timeout: Optional[float] = None, label: Optional[str] = None,
                 wait: bool = True, auto_renew: bool = False, host: Optional[str] = None,
                 mode: Optional[str] = None) -> None:
        args = [sys.executable, "-m", "tests.support.hold_lock", url, name]
        if timeout is not None:
            args += ["--timeout", str(timeout)]
        if label is not None:
            args += ["--label", label]
        if auto_renew:
            args += ["--auto-renew"]
        if host is not None:
            args += ["--host", host]
        if mode is not None:
            args += ["--mode", mode]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        self.fence: Optional[int] = None
        threading.Thread(target=self._read, daemon=True).start()
        self.expect("WAITING")
        if wait:
            self.wait_held()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("EOF")

    def expect(self, prefix: str, timeout: float = HANG_GUARD) -> str:
        line = self.lines.get(timeout=timeout)
        if not line.startswith(prefix):
            raise AssertionError(f"holder process said {line!r}, expected {prefix!r}")
        return line

    def wait_held(self, timeout: float = HANG_GUARD) -> int:
        self.fence = int(self.expect("HELD", timeout).split()[1])
        return self.fence

    def finish(self, timeout: float = HANG_GUARD) -> str:
        """Let the child release and exit; returns ``RELEASED`` or ``LOST``."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        line = self.lines.get(timeout=timeout)
        self.proc.wait(timeout)
        return line

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class HolderProcesses:
    """Start :class:`HolderProcess` children; leaving the ``with`` block kills those still running.

    A test module's fixture::

        @pytest.fixture
        def spawn(redis_url):
            with HolderProcesses(redis_url) as processes:
                yield processes.start
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.started: list[HolderProcess] = []

    def start(self, name: str, **kwargs: Any) -> HolderProcess:
        proc = HolderProcess(self.url, name, **kwargs)
        self.started.append(proc)
        return proc

    def __enter__(self) -> HolderProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.started:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
