"""pytest fixtures over a private redis-server.  Load them in your top-level ``conftest.py``::

    pytest_plugins = ["django_redis_coord.testing.pytest"]

* ``coord_redis_server``: one :class:`~django_redis_coord.testing.RedisServer` for the session.
* ``coord_redis``: a client of it (``redis.Redis``), every database flushed before the test.
* ``coord_django_settings``: ``DJANGO_REDIS_COORD`` points at the server during the test, the rest
  of the project's setting kept (``KEY_PREFIX``, ``METRICS``...; Django settings must be
  configured, as pytest-django does); the fixture's value is the setting.  ``CACHES`` stay as
  the settings say.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from . import RedisServer, override_settings_for, project_settings_for

__all__ = ["coord_django_settings", "coord_redis", "coord_redis_server"]


@pytest.fixture(scope="session")
def coord_redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def coord_redis(coord_redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = coord_redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def coord_django_settings(coord_redis_server: RedisServer, coord_redis: redis.Redis) -> Iterator[dict[str, Any]]:
    with override_settings_for(coord_redis_server):
        yield project_settings_for(coord_redis_server)
