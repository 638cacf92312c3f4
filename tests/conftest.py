"""Fixtures that run real redis-server processes (no fakes): see django_redis_coord.server.

* ``redis_server``: one server for the whole session (its URL is what tests.settings uses).
* ``redis_client`` / ``async_redis``: clients of it, the database flushed before each test.
* ``redis_servers``: a factory for extra private servers (Redlock, faults), stopped after the test.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import redis

from django_redis_coord.server import RedisServer
from tests import redis_session


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
    from django_redis_coord import hold_times

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
    """``spawn(...)`` starts a holder process (tests/hold_lock.py); all are stopped after the test."""
    from tests.hold_lock import HolderProcesses

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
