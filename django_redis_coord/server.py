"""Private redis-server processes: moved to :mod:`django_redis_coord.testing` (this path keeps
working)."""

from __future__ import annotations

from .testing.server import (
    RedisServer,
    RedisServerNotFound,
    find_redis_cli,
    find_redis_server,
    free_port,
    server_version,
)

__all__ = ["RedisServer", "RedisServerNotFound", "find_redis_cli", "find_redis_server", "free_port", "server_version"]
