"""django_redis_coord.testing, used as a project's test suite would use it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from django_redis_coord import Lock, lock
from django_redis_coord.config.settings import coord_settings
from django_redis_coord.testing import RedisServer, find_redis_server, override_settings_for, settings_for


def test_a_private_server_serves_the_core_primitives_and_is_gone_afterwards():
    with RedisServer() as server:
        client = server.client()
        with Lock(client, "report", timeout=5) as held:
            assert held.fence >= 1
            assert client.exists("report")
        client.close()
        process = server.process
    assert process is not None and process.poll() is not None
    assert not os.path.exists(server.workdir)


def test_the_settings_helper_points_the_django_layer_at_the_server():
    with RedisServer() as server:
        assert settings_for(server, KEY_PREFIX="t") == {"URL": server.url, "KEY_PREFIX": "t"}
        with override_settings_for(server, KEY_PREFIX="t"):
            assert coord_settings().source == "url"
            with lock("report", timeout=5):
                assert server.client().exists("t:report")
        assert not server.client().exists("t:report")


def test_the_binary_comes_from_redis_server_when_set(monkeypatch):
    binary = find_redis_server()
    monkeypatch.setenv("REDIS_SERVER", "/nowhere/redis-server")
    assert find_redis_server() == "/nowhere/redis-server"
    monkeypatch.setenv("REDIS_SERVER", binary)
    assert RedisServer().binary == binary


USER_CONFTEST = """
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django_redis_coord"],
    # The project's own setting: the fixture replaces its Redis and keeps the rest.
    DJANGO_REDIS_COORD={"URL": "redis://10.0.0.9:6379/2", "KEY_PREFIX": "shop", "DEFAULT_TIMEOUT": 5,
                        "REDLOCK": {"MASTERS": ["redis://10.0.0.1:6379/0"]}},
)
django.setup()

pytest_plugins = ["django_redis_coord.testing.pytest"]
"""

USER_TESTS = """
from django_redis_coord import Lock, lock


def test_a_lock_on_the_private_server(coord_redis):
    with Lock(coord_redis, "report", timeout=5) as held:
        assert held.fence >= 1 and coord_redis.exists("report")


def test_each_test_starts_with_an_empty_redis(coord_redis):
    assert coord_redis.dbsize() == 0


def test_the_django_layer_uses_the_private_server(coord_django_settings, coord_redis):
    assert coord_django_settings["URL"].startswith("redis://127.0.0.1:") and "REDLOCK" not in coord_django_settings
    with lock("report"):
        assert 0 < coord_redis.pttl("shop:report") <= 5000  # the project's KEY_PREFIX and DEFAULT_TIMEOUT
"""


@pytest.mark.timeout(120)
def test_a_projects_suite_gets_the_fixtures_from_the_plugin(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(USER_CONFTEST))
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:django", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


PROJECT_SETTING = {
    "URL": "redis://10.0.0.9:6379/2",  # the project's own Redis: never reached in a test
    "KEY_PREFIX": "shop",
    "METRICS": ["history"],
    "CLIENT_OPTIONS": {"socket_timeout": 9},
    "REDLOCK": {"MASTERS": ["redis://10.0.0.1:6379/0", "redis://10.0.0.2:6379/0", "redis://10.0.0.3:6379/0"]},
}


def test_the_helpers_keep_the_rest_of_the_projects_setting_and_leave_the_caches():
    from django.conf import settings
    from django.test import override_settings

    with override_settings(DJANGO_REDIS_COORD=PROJECT_SETTING), RedisServer() as server:
        caches = settings.CACHES
        with override_settings_for(server, DEFAULT_TIMEOUT=5):
            assert settings.DJANGO_REDIS_COORD == {"KEY_PREFIX": "shop", "METRICS": ["history"],
                                                   "URL": server.url, "DEFAULT_TIMEOUT": 5}
            with lock("report"):
                assert 0 < server.client().pttl("shop:report") <= 5000  # the prefix, the timeout
            assert settings.CACHES == caches  # only DJANGO_REDIS_COORD changes (docs/testing.md)

