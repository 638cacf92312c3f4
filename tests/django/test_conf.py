"""DJANGO_REDIS_COORD: the cached settings reader and the clients built from every source."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_redis_coord import lock, semaphore
from django_redis_coord.config.connection import describe_connection, get_async_client, get_client
from django_redis_coord.config.settings import coord_settings, prefixed, unprefixed
from django_redis_coord.config.shortcuts import alock
from django_redis_coord.testing.server import free_port
from tests.support.cluster import LocalCluster, LocalSentinel


def db_of(url: str, db: int) -> str:
    return url.rsplit("/", 1)[0] + f"/{db}"


def test_defaults_and_override_settings(redis_url):
    settings = coord_settings()
    assert settings.url == redis_url and settings.source == "url"
    assert settings.default_timeout == 60 and settings.contention_status == 409 and not settings.fail_open
    assert settings["KEY_PREFIX"] == "" and settings["UNAVAILABLE_STATUS"] == 503
    with override_settings(DJANGO_REDIS_COORD={"URL": redis_url, "KEY_PREFIX": "shop", "DEFAULT_TIMEOUT": 5}):
        assert coord_settings().key_prefix == "shop"
        assert prefixed("orders") == "shop:orders" and prefixed(b"orders") == b"shop:orders"
        assert unprefixed("shop:orders") == "orders" and unprefixed("other") == "other"
        assert lock("orders").timeout == 5
    assert coord_settings().key_prefix == "" and prefixed("orders") == "orders"
    with pytest.raises(KeyError):
        settings["NOPE"]


def test_settings_are_read_only(redis_url):
    settings = coord_settings()
    with pytest.raises(AttributeError):
        settings.key_prefix = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.client_options["socket_timeout"] = 1  # type: ignore[index]


def test_bad_settings_raise_improperly_configured_listing_every_problem():
    with override_settings(DJANGO_REDIS_COORD={"URL": "http://x", "DEFAULT_TIMEOUT": -1}):
        with pytest.raises(ImproperlyConfigured) as info:
            coord_settings()
    assert "django_redis_coord.E006" in str(info.value) and "django_redis_coord.E011" in str(info.value)


def test_settings_redis_py_would_refuse_raise_improperly_configured_before_any_client():
    """Not a ValueError or TypeError from deep inside redis-py at the first request."""
    from django_redis_coord.config.connection import reset_clients

    bad = [
        ({"URL": "redis://[::1/0"}, "django_redis_coord.E006"),
        ({"URL": "redis://127.0.0.1:6379/0?db=x"}, "django_redis_coord.E006"),
        ({"URL": "redis://127.0.0.1:6379/0", "CLIENT_OPTIONS": {"socket_timeot": 5}}, "django_redis_coord.E018"),
        ({"URL": "redis://127.0.0.1:6379/0", "DEFAULT_TIMEOUT": 1e12}, "django_redis_coord.E011"),
    ]
    for value, expected in bad:
        with override_settings(DJANGO_REDIS_COORD=value):
            reset_clients()
            with pytest.raises(ImproperlyConfigured, match=expected):
                coord_settings()
            with pytest.raises(ImproperlyConfigured, match=expected):
                lock("refused")


def test_url_client_is_pooled_and_follows_settings(redis_client, redis_url):
    client = get_client()
    assert client is get_client()
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 5.0
    other_db = db_of(redis_url, 5)
    with override_settings(DJANGO_REDIS_COORD={"URL": other_db, "CLIENT_OPTIONS": {"socket_timeout": 3}}):
        moved = get_client()
        assert moved is not client
        assert moved.connection_pool.connection_kwargs["db"] == 5
        assert moved.connection_pool.connection_kwargs["socket_timeout"] == 3
        with lock("where"):
            assert redis.Redis.from_url(other_db).exists("where")
    assert get_client() is not moved


def test_async_client_per_event_loop(redis_client):
    async def two_calls():
        first = get_async_client()
        assert first is get_async_client()
        assert await first.ping()
        return first

    assert asyncio.run(two_calls()) is not asyncio.run(two_calls())


def test_options_only_the_sync_library_has_are_left_out_of_the_asyncio_client(redis_server):
    async def ping():
        return await get_async_client().ping()

    # Client-side caching options: redis-py's sync client takes them, its asyncio one does not.
    with override_settings(DJANGO_REDIS_COORD={"URL": redis_server.url, "CLIENT_OPTIONS": {"cache_config": None}}):
        assert get_client().ping()
        assert asyncio.run(ping()) is True


def test_cluster_and_sentinel_options_reach_the_asyncio_clients():
    from django_redis_coord.config.redis_options import for_asyncio as _for_asyncio

    def remap(address):
        return address

    options = {"read_from_replicas": True, "address_remap": remap, "require_full_coverage": False,
               "min_other_sentinels": 1, "socket_timeout": 2, "cache_config": None}
    kept = _for_asyncio(options)
    assert kept == {key: value for key, value in options.items() if key != "cache_config"}


def test_clients_of_closed_event_loops_are_let_go(redis_servers):
    """A WSGI server runs each async view in an event loop of its own: the clients (and Redis
    connections) of the loops that ended must not pile up."""
    import gc

    from django_redis_coord.config import connection
    from django_redis_coord.decorator.locked import locked

    (server,) = redis_servers(1)  # its own server: only this test's connections are counted
    admin = server.client()

    @locked("loops:{n}", timeout=5)
    async def work(n):
        return await get_async_client().ping()

    def connected() -> int:
        gc.collect()
        return int(admin.info("clients")["connected_clients"])

    with override_settings(DJANGO_REDIS_COORD={"URL": server.url}):
        asyncio.run(work(n=-1))
        before = connected()
        for n in range(30):
            assert asyncio.run(work(n=n)) is True
        assert len(connection._async_clients) <= 1

        async def masters():
            clients = connection.get_async_redlock_masters()
            return [await client.ping() for client in clients]  # connected: they refer to the loop

        with override_settings(DJANGO_REDIS_COORD={"URL": server.url, "REDLOCK": {"MASTERS": [server.url]}}):
            assert all(asyncio.run(masters()) == [True] for _ in range(20))
            assert len(connection._async_redlock_masters) <= 1
        deadline = time.monotonic() + 10  # the server sees the closed connections go a moment later
        while connected() - before > 2:
            assert time.monotonic() < deadline, "the connections of closed event loops were kept open"
            time.sleep(0.05)


@pytest.mark.parametrize(
    "backend", ["django_redis.cache.RedisCache", "django.core.cache.backends.redis.RedisCache"]
)
def test_cache_alias_sources(redis_client, redis_url, backend):
    caches = {"default": {"BACKEND": backend, "LOCATION": db_of(redis_url, 6)}}
    in_db6 = redis.Redis.from_url(db_of(redis_url, 6))
    for coord in ({"CACHE_ALIAS": "default"}, {}):  # explicit, and the default cache as fallback
        with override_settings(CACHES=caches, DJANGO_REDIS_COORD=coord):
            assert coord_settings().source == "cache"
            assert describe_connection().startswith("cache 'default'")
            with lock("sync-in-cache-db"):
                assert in_db6.exists("sync-in-cache-db")
            assert get_client() is get_client()

            async def scenario():
                client = get_async_client()
                assert client.connection_pool.connection_kwargs["db"] == 6
                async with alock("async-in-cache-db"):
                    return bool(in_db6.exists("async-in-cache-db"))

            assert asyncio.run(scenario())


def test_password_is_masked_in_the_description():
    with override_settings(DJANGO_REDIS_COORD={"URL": "redis://user:secret@127.0.0.1:6379/0"}):
        assert describe_connection() == "redis://user:***@127.0.0.1:6379/0"
    with override_settings(DJANGO_REDIS_COORD={"URL": "redis://127.0.0.1:6379/0?password=secret&db=1"}):
        assert describe_connection() == "redis://127.0.0.1:6379/0?password=***&db=1"
    with override_settings(DJANGO_REDIS_COORD={"URL": "redis://:sec,ret@127.0.0.1:6379/0"}):
        assert describe_connection() == "redis://:***@127.0.0.1:6379/0"
    caches = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                          "LOCATION": "redis://:secret1@h1:6379/0,redis://:secret2@h2:6379/0"}}
    with override_settings(CACHES=caches, DJANGO_REDIS_COORD={"CACHE_ALIAS": "default"}):
        assert describe_connection() == "cache 'default' (redis://:***@h1:6379/0,redis://:***@h2:6379/0)"
    caches["default"]["LOCATION"] = ["unix:///run/redis.sock?password=secret3", "redis://:secret4@h3/0"]
    with override_settings(CACHES=caches, DJANGO_REDIS_COORD={"CACHE_ALIAS": "default"}):
        described = describe_connection()
        assert "secret" not in described and "unix:///run/redis.sock?password=***" in described


def test_django_setup_does_not_connect():
    """A project whose Redis is down still starts: ready() and imports never connect."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    code = (
        "import django, os;"
        "django.setup();"
        "from django_redis_coord import lock, locked, semaphore; from django_redis_coord.config import connection;"
        "from django.core import checks;"
        "assert checks.run_checks(tags=['django_redis_coord']) == [];"
        "assert connection._sync_client is None;"
        "print('ok')"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DCOORD_TEST_REDIS_URL": dead}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# -- Sentinel and Cluster ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sentinel_deployment():
    deployment = LocalSentinel(service="coord", replicas=0, sentinels=1).start()
    yield deployment
    deployment.stop()


def test_sentinels_get_the_client_timeouts_and_retry_policy():
    """Without SENTINEL_KWARGS, the sentinels are asked with the same timeouts (and retry policy)
    as the master: a sentinel that stops answering fails a request as quickly (nothing connects
    here: building a client never does)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from django_redis_coord.config.connection import reset_clients

    sentinel = {"SENTINELS": ["127.0.0.1:1"], "SERVICE_NAME": "coord"}
    retry = Retry(NoBackoff(), 1)
    options = {"socket_timeout": 0.5, "socket_connect_timeout": 0.25, "retry": retry}
    with override_settings(DJANGO_REDIS_COORD={"SENTINEL": sentinel, "CLIENT_OPTIONS": options}):
        reset_clients()
        kwargs = get_client().connection_pool.sentinel_manager.sentinel_kwargs
        assert kwargs["socket_timeout"] == 0.5 and kwargs["socket_connect_timeout"] == 0.25 and kwargs["retry"] is retry
    with override_settings(DJANGO_REDIS_COORD={"SENTINEL": {**sentinel, "SENTINEL_KWARGS": {"socket_timeout": 2}}}):
        reset_clients()
        kwargs = get_client().connection_pool.sentinel_manager.sentinel_kwargs
        assert kwargs["socket_timeout"] == 2 and kwargs["socket_connect_timeout"] == 2.0  # the default's

        async def async_kwargs():
            return get_async_client().connection_pool.sentinel_manager.sentinel_kwargs

        assert asyncio.run(async_kwargs())["socket_timeout"] == 2


def test_sentinel_source(sentinel_deployment):
    nodes = [f"{host}:{port}" for host, port in sentinel_deployment.sentinel_addresses]
    settings = {"SENTINEL": {"SENTINELS": nodes, "SERVICE_NAME": "coord", "DB": 2}, "KEY_PREFIX": "s"}
    primary = sentinel_deployment.primary.client(db=2)
    with override_settings(DJANGO_REDIS_COORD=settings):
        assert describe_connection().startswith("sentinel service 'coord'")
        with lock("via-sentinel") as held:
            assert held.fence and primary.exists("s:via-sentinel")

        async def scenario():
            async with alock("async-via-sentinel"):
                return bool(primary.exists("s:async-via-sentinel"))

        assert asyncio.run(scenario())


@pytest.fixture(scope="module")
def cluster_deployment():
    deployment = LocalCluster(primaries=3, replicas_per_primary=0).start()
    yield deployment
    deployment.stop()


def test_deploy_check_reads_the_eviction_policy_of_every_cluster_node(cluster_deployment):
    from django_redis_coord.checks import check_redis_for_deploy
    from django_redis_coord.config.connection import reset_clients

    nodes = [f"{host}:{port}" for host, port in cluster_deployment.startup_nodes]
    node = cluster_deployment.primary_nodes()[1].client()
    with override_settings(DJANGO_REDIS_COORD={"CLUSTER": {"STARTUP_NODES": nodes}}):
        reset_clients()
        assert "django_redis_coord.W001" not in [m.id for m in check_redis_for_deploy()]
        node.config_set("maxmemory-policy", "allkeys-lru")
        try:
            warned = [m for m in check_redis_for_deploy() if m.id == "django_redis_coord.W001"]
        finally:
            node.config_set("maxmemory-policy", "noeviction")
        assert len(warned) == 1 and "allkeys-lru" in warned[0].msg


def test_cluster_source(cluster_deployment):
    nodes = [f"{host}:{port}" for host, port in cluster_deployment.startup_nodes]
    seed = "redis://{}:{}/0".format(*cluster_deployment.startup_nodes[0])
    check = cluster_deployment.client()
    for settings in ({"CLUSTER": {"STARTUP_NODES": nodes}}, {"URL": seed, "CLUSTER": True}):
        with override_settings(DJANGO_REDIS_COORD=settings):
            assert coord_settings().source == "cluster"
            for name in ("{user:1}:orders", "report", "batch-7"):
                with lock(name) as held:
                    assert held.fence and check.exists(name)
            pool = semaphore("cluster-pool", 2, timeout=5)
            assert pool.acquire() and pool.release()

            async def scenario():
                async with alock("async-in-cluster"):
                    return bool(check.exists("async-in-cluster"))

            assert asyncio.run(scenario())
