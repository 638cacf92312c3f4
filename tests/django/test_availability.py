"""@locked when Redis cannot be reached: fail closed (503) by default, fail open on request; logged."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from django.test import AsyncClient, Client, override_settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError

from django_redis_coord import locked
from django_redis_coord.decorator.locked import current_lock
from django_redis_coord.testing.server import free_port
from tests.django.test_decorators import entered, in_thread, wait_for


def dead_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def test_unreachable_redis_fails_closed_with_503_and_logs(redis_client, caplog):
    with override_settings(DJANGO_REDIS_COORD={"URL": dead_url()}), caplog.at_level(logging.WARNING):
        response = Client().get("/t/avail/a/")
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert b"unavailable" in response.content
    (record,) = [r for r in caplog.records if r.name == "django_redis_coord"]
    assert record.levelno == logging.ERROR and "fail closed" in record.getMessage()
    assert "avail:a" in record.getMessage()


def test_fail_open_setting_runs_the_view_without_the_lock_and_logs(redis_client, caplog):
    settings = {"URL": dead_url(), "FAIL_OPEN": True}
    with override_settings(DJANGO_REDIS_COORD=settings), caplog.at_level(logging.WARNING):
        response = Client().get("/t/avail/b/")
    assert response.status_code == 200 and response.content == b"ran locked=False"
    (record,) = [r for r in caplog.records if r.name == "django_redis_coord"]
    assert record.levelno == logging.WARNING and "fail open" in record.getMessage()


def test_fail_open_per_decorator_and_custom_status(redis_client, rf):
    with override_settings(DJANGO_REDIS_COORD={"URL": dead_url(), "UNAVAILABLE_STATUS": 502}):
        assert locked("x", fail_open=True)(lambda request: "ran")(rf.get("/")) == "ran"
        assert locked("x")(lambda request: "ran")(rf.get("/")).status_code == 502
    with override_settings(DJANGO_REDIS_COORD={"URL": dead_url(), "FAIL_OPEN": True}):
        assert locked("x", fail_open=False)(lambda request: "ran")(rf.get("/")).status_code == 503


def test_async_view_fails_closed_and_open(redis_client):
    async def get(path):
        return await AsyncClient().get(path)

    with override_settings(DJANGO_REDIS_COORD={"URL": dead_url()}):
        assert asyncio.run(get("/t/aavail/c/")).status_code == 503
    with override_settings(DJANGO_REDIS_COORD={"URL": dead_url(), "FAIL_OPEN": True}):
        response = asyncio.run(get("/t/aavail/c/"))
    assert response.status_code == 200 and response.content == b"ran locked=False"


def test_paused_server_fails_closed_within_the_socket_timeout(redis_servers, redis_client):
    (server,) = redis_servers(1)
    settings = {"URL": server.url, "CLIENT_OPTIONS": {"socket_timeout": 0.3, "socket_connect_timeout": 0.3}}
    with override_settings(DJANGO_REDIS_COORD=settings):
        assert Client().get("/t/avail/d/").content == b"ran locked=True"
        server.pause()
        try:
            started = time.monotonic()
            response = Client().get("/t/avail/d/")
            elapsed = time.monotonic() - started
        finally:
            server.resume()
        assert response.status_code == 503
        assert elapsed < 10  # the socket timeout (0.3 s) bounds it, with slack for a busy machine
        # The server runs the timed-out acquire once it resumes: that orphaned hold ends with its
        # TTL (409 meanwhile, never a second holder); other keys work at once.
        after = Client().get("/t/avail/d/")
        assert after.status_code == 200 or (after.status_code == 409 and int(after["Retry-After"]) <= 30)
        assert Client().get("/t/avail/d2/").status_code == 200


def test_plain_function_fails_closed_by_raising_and_open_by_running(redis_client):
    @locked("job")
    def job():
        return current_lock()

    with override_settings(DJANGO_REDIS_COORD={"URL": dead_url()}):
        with pytest.raises(RedisConnectionError):
            job()
        with pytest.raises(RedisConnectionError):
            with locked("job"):
                pass
    with override_settings(DJANGO_REDIS_COORD={"URL": dead_url(), "FAIL_OPEN": True}):
        assert job() is None
        with locked("job") as held:
            assert held is None


def test_redis_lost_while_holding_still_answers_and_logs(redis_servers, redis_client, caplog):
    (server,) = redis_servers(1)
    settings = {"URL": server.url, "CLIENT_OPTIONS": {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}}
    with override_settings(DJANGO_REDIS_COORD=settings), caplog.at_level(logging.WARNING):
        first = in_thread(lambda: Client().get("/t/avail/e/?hold=1"))
        wait_for(lambda: entered(redis_client, "e"))
        server.kill()
        redis_client.set("go:e", 1)
        response = first()
    assert response.status_code == 200 and response.content == b"ran locked=True"
    assert any("Could not release" in r.getMessage() for r in caplog.records if r.name == "django_redis_coord")


def test_a_server_out_of_memory_counts_as_unavailable(redis_servers, rf):
    """maxmemory reached with noeviction (the policy the deploy check asks for): the acquire
    script's writes are refused, which is "Redis cannot take writes": 503, or the view runs
    unlocked with fail_open, like an unreachable server."""
    (server,) = redis_servers(1)
    admin = server.client()
    admin.config_set("maxmemory-policy", "noeviction")
    used = int(admin.info("memory")["used_memory"])
    admin.config_set("maxmemory", used + 64 * 1024)
    filler = 0
    with pytest.raises(OutOfMemoryError):
        while True:
            admin.set(f"filler:{filler}", b"x" * 4096)
            filler += 1
    with override_settings(DJANGO_REDIS_COORD={"URL": server.url}):
        assert locked("full")(lambda request: "ran")(rf.get("/")).status_code == 503
        assert locked("full", fail_open=True)(lambda request: "ran")(rf.get("/")) == "ran"
        with override_settings(DJANGO_REDIS_COORD={"URL": server.url, "FAIL_OPEN": True}):
            with locked("full") as held:
                assert held is None
    admin.config_set("maxmemory", 0)


def test_only_errors_meaning_redis_cannot_take_writes_count_as_unavailable():
    """Programming and configuration errors are not "Redis unavailable": they must never make a
    view fail open silently."""
    from redis.exceptions import ClusterDownError, NoScriptError, RedisClusterException, ResponseError

    from django_redis_coord.decorator.unavailable import redis_unavailable

    in_script = "Error running script (call to f_0): @user_script:12: @user_script: 12: -{} refused."
    assert all(redis_unavailable(ResponseError(in_script.format(code)))
               for code in ("OOM command not allowed", "READONLY You can't write", "MISCONF Redis is configured"))
    assert redis_unavailable(ClusterDownError("CLUSTERDOWN The cluster is down"))
    assert not redis_unavailable(ResponseError("ERR user_script:3: nonexistent global variable 'READONLY'"))
    assert not redis_unavailable(ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
    assert not redis_unavailable(NoScriptError("No matching script"))
    assert not redis_unavailable(RedisClusterException("EVALSHA - all keys must map to the same key slot"))
