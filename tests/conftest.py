"""Fixtures that run real redis-server processes (no fakes): see django_redis_coord.testing.

* ``redis_server``: one server for the whole session (its URL is what tests.settings uses).
* ``redis_client`` / ``async_redis``: clients of it, the database flushed before each test.
* ``redis_servers``: a factory for extra private servers (Redlock, faults), stopped after the test.

The tests of the core primitives and their Lua scripts (the files under ``tests/core/``: no Django
layer, no cluster or sentinel deployment, no fault harness) carry the ``core`` marker:
``pytest -m core`` runs them alone, as ``dev.py test`` does against each further server and client
(tests/README.md).  The run's header names the server and the client the tests talk to.
"""

from __future__ import annotations

import json
import os
import signal as os_signal
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from django_redis_coord.testing.server import RedisServer
from tests.support import redis_session

TESTS = Path(__file__).resolve().parent
FACTS_ENV = "DCOORD_TEST_FACTS"
CORE_TESTS = TESTS / "core"  #: every test under it carries the ``core`` marker


def pytest_configure() -> None:
    """Let the processes the tests start take Ctrl-C, however the suite itself was started.

    Several tests send SIGINT to a child (``manage.py locks list --watch``, a singleton command, the
    demo) and expect it to end as on Ctrl-C.  A non-interactive shell starts ``cmd &`` with SIGINT
    ignored (POSIX Shell Command Language, 2.11), an ignored signal stays ignored across fork and
    exec (POSIX exec), and Python turns SIGINT into ``KeyboardInterrupt`` only "if the parent process
    has not changed it" (the ``signal`` module's documentation): run in the background that way, every
    child would ignore the tests' Ctrl-C.  A handled signal is reset to the default on exec, so with
    Python's own handler here, each child starts with the default and installs its own.
    """
    if os_signal.getsignal(os_signal.SIGINT) is os_signal.SIG_IGN:
        os_signal.signal(os_signal.SIGINT, os_signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(CORE_TESTS):
            item.add_marker(pytest.mark.core)


def server_and_client() -> dict[str, str]:
    """What the session's server says of itself and of this connection (``HELLO``): its name and
    version, and the RESP version redis-py speaks by default; plus redis-py's version."""
    client = redis.Redis.from_url(redis_session.url())
    try:
        reply = client.execute_command("HELLO")
    finally:
        client.close()
    if isinstance(reply, list):  # RESP2: a flat list of names and values
        reply = dict(zip(reply[::2], reply[1::2]))
    facts = {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}
    name = facts["server"].decode() if isinstance(facts["server"], bytes) else str(facts["server"])
    version = facts["version"].decode() if isinstance(facts["version"], bytes) else str(facts["version"])
    return {
        "server": f"{name.capitalize()} {version}",
        "client": f"redis-py {redis.__version__}",
        "protocol": f"RESP{facts['proto']}",
    }


def pytest_report_header() -> str:
    facts = server_and_client()
    return f"server: {facts['server']}; client: {facts['client']}, {facts['protocol']}"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The same facts as the header, as JSON in the file ``DCOORD_TEST_FACTS`` names (dev.py reads
    it), written by the process that runs the session (under pytest-xdist, the controller; its
    workers' servers are the same binary)."""
    path = os.environ.get(FACTS_ENV)
    if path and not hasattr(session.config, "workerinput"):
        Path(path).write_text(json.dumps(server_and_client()))


class SessionServer:
    """Host and port of the session's server, with the client helpers of RedisServer."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.url = url
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def async_client(self, **kwargs):
        import redis.asyncio

        return redis.asyncio.Redis(host=self.host, port=self.port, **kwargs)


@pytest.fixture(autouse=True)
def _no_recorded_hold_times():
    """Each test starts without the hold durations earlier tests recorded (``Retry-After``)."""
    from django_redis_coord.core import hold_times

    hold_times.clear()


@pytest.fixture(scope="session")
def redis_server() -> SessionServer:
    """The shared server: never kill it (use ``redis_servers`` for fault tests)."""
    return SessionServer(redis_session.url())


@pytest.fixture
def redis_client(redis_server: SessionServer):
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def redis_url(redis_server: SessionServer) -> str:
    return redis_server.url


@pytest.fixture
def async_redis(redis_server: SessionServer):
    """An asyncio client factory: call it inside the test's event loop."""
    redis_server.client().flushall()
    return redis_server.async_client


@pytest.fixture
def sync_redis(redis_server: SessionServer):
    """A sync client factory, the twin of ``async_redis`` in the generated sync tests (docs/twins.md)."""
    redis_server.client().flushall()
    return redis_server.client


@pytest.fixture
def redis_servers():
    """Start extra servers: ``redis_servers(3)`` returns a list of three running servers."""
    started: list[RedisServer] = []

    def start(count: int = 1, **kwargs) -> list[RedisServer]:
        servers = [RedisServer(**kwargs).start() for _ in range(count)]
        started.extend(servers)
        return servers

    yield start
    for server in started:
        server.cleanup()


@pytest.fixture
def spawn(redis_url):
    """``spawn(...)`` starts a holder process (tests/support/hold_lock.py); all are stopped after the test."""
    from tests.support.hold_lock import HolderProcesses

    with HolderProcesses(redis_url) as processes:
        yield processes.start


def connect_hold_signals():
    """Receivers of the four hold signals, connected now: ``(events, disconnect)``; ``events``
    gets every signal sent, as ``(label, {"sender": ..., **arguments})``."""
    from django_redis_coord.signals import lock_acquired, lock_contended, lock_lost, lock_released

    signals = {"acquired": lock_acquired, "released": lock_released, "contended": lock_contended, "lost": lock_lost}
    events: list[tuple[str, dict]] = []
    receivers = {}
    for label, signal in signals.items():

        def receiver(sender, signal=None, _label=label, **kwargs):
            events.append((_label, {"sender": sender, **kwargs}))

        receivers[label] = receiver
        signal.connect(receiver, weak=False)

    def disconnect():
        for label, signal in signals.items():
            signal.disconnect(receivers[label])

    return events, disconnect


@pytest.fixture
def received():
    """Every hold signal sent during the test, as ``(label, {"sender": ..., **arguments})``."""
    events, disconnect = connect_hold_signals()
    yield events
    disconnect()
