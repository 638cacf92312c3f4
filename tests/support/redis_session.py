"""The test session's redis-server, started on first use by whoever needs it first.

tests.settings (imported by pytest-django before any conftest hook runs) and the fixtures share
it.  Its URL goes into ``DCOORD_TEST_REDIS_URL`` so child processes reuse it instead of starting
their own.

Under pytest-xdist (``-n N``) every worker is a child of the controlling process and inherits its
environment, the controller's URL included; but the fixtures flush the server before each test,
so each worker needs a server of its own.  ``DCOORD_TEST_REDIS_OWNER`` says which worker
(``PYTEST_XDIST_WORKER``, empty outside xdist) the URL belongs to: a process reuses the URL only
when it belongs to its own worker (its children inherit both variables, so they reuse it).
"""

from __future__ import annotations

import atexit
import os

from django_redis_coord.testing.server import RedisServer

ENV = "DCOORD_TEST_REDIS_URL"
OWNER = "DCOORD_TEST_REDIS_OWNER"
SERVER: RedisServer | None = None


def url() -> str:
    global SERVER
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    existing = os.environ.get(ENV)
    if existing and os.environ.get(OWNER, "") == worker:
        return existing
    SERVER = RedisServer().start()
    atexit.register(SERVER.cleanup)
    os.environ[ENV] = SERVER.url
    os.environ[OWNER] = worker
    return SERVER.url
