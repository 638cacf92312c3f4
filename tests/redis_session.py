"""The test session's redis-server, started on first use by whoever needs it first.

tests.settings (imported by pytest-django before any conftest hook runs) and the fixtures share
it.  Its URL goes into ``DCOORD_TEST_REDIS_URL`` so child processes reuse it instead of starting
their own.
"""

from __future__ import annotations

import atexit
import os

from django_redis_coord.testing.server import RedisServer

ENV = "DCOORD_TEST_REDIS_URL"
SERVER: RedisServer | None = None


def url() -> str:
    global SERVER
    existing = os.environ.get(ENV)
    if existing:
        return existing
    SERVER = RedisServer().start()
    atexit.register(SERVER.cleanup)
    os.environ[ENV] = SERVER.url
    return SERVER.url
