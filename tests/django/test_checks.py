"""System checks: each settings error has its id; deploy checks inspect the real Redis."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import redis
from django.core import checks
from django.test import override_settings

from django_redis_coord.checks import check_redis_for_deploy, check_settings
from django_redis_coord.testing.server import free_port

REDIS_CACHE = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:6379/1"}
LOCMEM = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
GOOD_URL = "redis://127.0.0.1:6379/0"


def ids(messages) -> set[str]:
    return {message.id for message in messages}


BAD_SETTINGS = [
    ("django_redis_coord.E001", "redis://127.0.0.1:6379/0"),
    ("django_redis_coord.E002", {"URL": GOOD_URL, "TIMEOUT": 5}),
    ("django_redis_coord.E003", {"URL": GOOD_URL, "CACHE_ALIAS": "default"}),
    ("django_redis_coord.E004", {"CACHE_ALIAS": "sessions"}),
    ("django_redis_coord.E005", {"CACHE_ALIAS": "local"}),
    ("django_redis_coord.E006", {"URL": "http://127.0.0.1:6379/0"}),
    ("django_redis_coord.E006", {"URL": "redis://127.0.0.1:port/0"}),
    ("django_redis_coord.E006", {"URL": "redis://127.0.0.1:6379/zero"}),
    ("django_redis_coord.E006", {"URL": ""}),
    ("django_redis_coord.E007", {"URL": GOOD_URL, "CLIENT_OPTIONS": "socket_timeout=5"}),
    ("django_redis_coord.E007", {"URL": GOOD_URL, "CLIENT_OPTIONS": {"decode_responses": True}}),
    ("django_redis_coord.E007", {"URL": GOOD_URL, "CLIENT_OPTIONS": {"socket_timeout": -1}}),
    ("django_redis_coord.E008", {"SENTINEL": {"SENTINELS": [], "SERVICE_NAME": ""}}),
    ("django_redis_coord.E008", {"SENTINEL": {"SENTINELS": ["sentinel-without-port"], "SERVICE_NAME": "m"}}),
    ("django_redis_coord.E009", {"CLUSTER": {"STARTUP_NODES": [("10.0.0.1", "7000")]}}),
    ("django_redis_coord.E009", {"CLUSTER": True, "CACHE_ALIAS": "default"}),
    ("django_redis_coord.E010", {"URL": GOOD_URL, "KEY_PREFIX": "{shop}"}),
    ("django_redis_coord.E011", {"URL": GOOD_URL, "DEFAULT_TIMEOUT": 0}),
    ("django_redis_coord.E011", {"URL": GOOD_URL, "DEFAULT_TIMEOUT": "30"}),
    ("django_redis_coord.E011", {"URL": GOOD_URL, "DEFAULT_TIMEOUT": None, "AUTO_RENEW": True}),
    ("django_redis_coord.E026", {"URL": GOOD_URL, "DEFAULT_TIMEOUT": "never", "AUTO_RENEW": True}),
    ("django_redis_coord.E012", {"URL": GOOD_URL, "CONTENTION_STATUS": 200}),
    ("django_redis_coord.E012", {"URL": GOOD_URL, "UNAVAILABLE_STATUS": "503"}),
    ("django_redis_coord.E013", {"URL": GOOD_URL, "FAIL_OPEN": "yes"}),
    ("django_redis_coord.E015", {"URL": GOOD_URL, "REDLOCK": {"MASTERS": []}}),
    ("django_redis_coord.E015", {"URL": GOOD_URL, "REDLOCK": {"MASTERS": ["redis://a:1/0", "tcp://b"]}}),
    ("django_redis_coord.E016", {"URL": GOOD_URL, "CONTENTION_HANDLER": "no.such.module.handler"}),
    ("django_redis_coord.E004", {"CACHE_ALIAS": 7}),
    ("django_redis_coord.E010", {"URL": GOOD_URL, "KEY_PREFIX": 5}),
    ("django_redis_coord.E016", {"URL": GOOD_URL, "CONTENTION_HANDLER": 42}),
    ("django_redis_coord.E016", {"URL": GOOD_URL, "CONTENTION_HANDLER": "django_redis_coord.conf.SETTING_NAME"}),
    # URLs redis-py cannot read, or refuses when it builds the connection.
    ("django_redis_coord.E006", {"URL": "redis://[::1/0"}),
    ("django_redis_coord.E006", {"URL": "redis://127.0.0.1:6379/0?db=x"}),
    ("django_redis_coord.E006", {"URL": "redis://127.0.0.1:6379/0?socket_timeout=soon"}),
    ("django_redis_coord.E006", {"URL": "redis://127.0.0.1:6379/0?socket_timeot=5"}),
    ("django_redis_coord.E006", {"URL": "redis://127.0.0.1:6379/0?protocol=7"}),
    ("django_redis_coord.E006", {"URL": "redis://[::1/0", "CLUSTER": True}),
    ("django_redis_coord.E015", {"URL": GOOD_URL, "REDLOCK": {"MASTERS": ["redis://[::1/0"]}}),
    ("django_redis_coord.E015", {"URL": GOOD_URL, "REDLOCK": {"MASTERS": ["redis://a:1/0?db=x"]}}),
    # Options redis-py does not know, and values it refuses for the connection made.
    ("django_redis_coord.E018", {"URL": GOOD_URL, "CLIENT_OPTIONS": {"socket_timeot": 5}}),
    ("django_redis_coord.E018", {"CLUSTER": {"STARTUP_NODES": ["10.0.0.1:7000"], "OPTIONS": {"read_from_replica": 1}}}),
    ("django_redis_coord.E018", {"SENTINEL": {"SENTINELS": ["10.0.0.1:26379"], "SERVICE_NAME": "m",
                                              "SENTINEL_KWARGS": {"socket_timout": 1}}}),
    ("django_redis_coord.E027", {"URL": GOOD_URL, "CLIENT_OPTIONS": {"max_connections": "x"}}),
    ("django_redis_coord.E027", {"URL": GOOD_URL, "CLIENT_OPTIONS": {"ssl_certfile": "/etc/redis/client.pem"}}),
    ("django_redis_coord.E018", {"URL": GOOD_URL, "CLIENT_OPTIONS": {"read_from_replicas": True}}),  # Cluster only
    ("django_redis_coord.E027", {"URL": "unix:///run/redis.sock", "CLIENT_OPTIONS": {"socket_keepalive": True}}),
    ("django_redis_coord.E027", {"CACHE_ALIAS": "default", "CLIENT_OPTIONS": {"max_connections": -1},
                                 "REDLOCK": {"MASTERS": ["redis://10.0.0.1:6379/0"]}}),
    # A DEFAULT_TIMEOUT every lock would refuse.
    ("django_redis_coord.E011", {"URL": GOOD_URL, "DEFAULT_TIMEOUT": 0.0001}),
    ("django_redis_coord.E011", {"URL": GOOD_URL, "DEFAULT_TIMEOUT": 1e12}),
]


@pytest.mark.parametrize("expected, value", BAD_SETTINGS)
def test_each_settings_error_has_its_id_and_a_hint(expected, value):
    with override_settings(DJANGO_REDIS_COORD=value, CACHES={"default": REDIS_CACHE, "local": LOCMEM}):
        messages = check_settings()
        assert expected in ids(messages)
        message = next(m for m in messages if m.id == expected)
        assert message.level == checks.ERROR and message.msg and message.hint
        # Registered with Django: `manage.py check` shows the same error.
        assert expected in ids(checks.run_checks(tags=["django_redis_coord"]))


def test_no_source_and_no_redis_default_cache_is_an_error():
    with override_settings(DJANGO_REDIS_COORD={}, CACHES={"default": LOCMEM}):
        assert ids(check_settings()) == {"django_redis_coord.E014"}
    with override_settings(DJANGO_REDIS_COORD={}, CACHES={"default": REDIS_CACHE}):
        assert check_settings() == []


def test_hints_name_the_fix():
    with override_settings(DJANGO_REDIS_COORD={"URL": GOOD_URL, "DEFAULT_TIMOUT": 5}):
        (message,) = check_settings()
        assert message.hint == "Did you mean 'DEFAULT_TIMEOUT'?"
    with override_settings(DJANGO_REDIS_COORD={"CACHE_ALIAS": "sessions"}, CACHES={"default": REDIS_CACHE}):
        (message,) = check_settings()
        assert "'default'" in message.hint


def test_valid_settings_pass_without_connecting():
    # Nothing listens on this port: a check that connected would fail or take its timeouts.
    dead = f"redis://127.0.0.1:{free_port()}/0"
    valid = [
        {"URL": dead, "KEY_PREFIX": "shop", "DEFAULT_TIMEOUT": 30, "CLIENT_OPTIONS": {"socket_timeout": 2}},
        {"CACHE_ALIAS": "default"},
        {"SENTINEL": {"SENTINELS": [("127.0.0.1", free_port())], "SERVICE_NAME": "mymaster", "DB": 2}},
        {"CLUSTER": {"STARTUP_NODES": ["127.0.0.1:7000", ("127.0.0.1", 7001)]}},
        {"URL": dead, "CLUSTER": True},
        {"URL": dead, "DEFAULT_TIMEOUT": "never", "FAIL_OPEN": True, "CONTENTION_STATUS": 423},
        {"URL": dead + "?socket_timeout=0.5&retry_on_timeout=yes&health_check_interval=5", "DEFAULT_TIMEOUT": 0.1},
        {"URL": "rediss://127.0.0.1:6380/0", "CLIENT_OPTIONS": {"ssl_certfile": "/etc/c.pem", "ssl_cert_reqs": "none"}},
        {"URL": "unix:///run/redis.sock?db=2", "CLIENT_OPTIONS": {"socket_timeout": 1, "max_connections": 10}},
        {"URL": dead, "CLUSTER": {"OPTIONS": {"read_from_replicas": 1}}, "CLIENT_OPTIONS": {"reinitialize_steps": 5}},
        {"URL": dead, "CLIENT_OPTIONS": {"single_connection_client": True}, "REDLOCK": {"MASTERS": [dead]}},
        {"SENTINEL": {"SENTINELS": ["127.0.0.1:1"], "SERVICE_NAME": "m", "SENTINEL_KWARGS": {"socket_timeout": 1}},
         "CLIENT_OPTIONS": {"min_other_sentinels": 1, "ssl": True}},
    ]
    started = time.monotonic()
    for value in valid:
        with override_settings(DJANGO_REDIS_COORD=value, CACHES={"default": REDIS_CACHE}):
            assert check_settings() == [], value
            assert checks.run_checks(tags=["django_redis_coord"]) == []
    assert time.monotonic() - started < 5


# -- deploy ----------------------------------------------------------------------------------------
def deploy_ids(**overrides):
    with override_settings(**overrides):
        return ids(check_redis_for_deploy())


def test_deploy_warns_when_redis_may_evict_locks(redis_servers):
    (evicting,) = redis_servers(1, args=["--maxmemory-policy", "allkeys-lru"])
    assert "django_redis_coord.W001" in deploy_ids(DJANGO_REDIS_COORD={"URL": evicting.url})
    evicting.client().config_set("maxmemory-policy", "noeviction")
    assert "django_redis_coord.W001" not in deploy_ids(DJANGO_REDIS_COORD={"URL": evicting.url})
    # And through `manage.py check --deploy`:
    with override_settings(DJANGO_REDIS_COORD={"URL": evicting.url}):
        evicting.client().config_set("maxmemory-policy", "volatile-ttl")
        found = checks.run_checks(tags=["django_redis_coord"], include_deployment_checks=True)
    assert "django_redis_coord.W001" in ids(found)


def test_deploy_warns_when_a_cache_shares_the_locks_database(redis_server):
    url = f"redis://127.0.0.1:{redis_server.port}/3"
    shared = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}}
    assert "django_redis_coord.W002" in deploy_ids(DJANGO_REDIS_COORD={"URL": url}, CACHES=shared)
    assert "django_redis_coord.W002" in deploy_ids(DJANGO_REDIS_COORD={"CACHE_ALIAS": "default"}, CACHES=shared)
    localhost = {"default": {**REDIS_CACHE, "LOCATION": f"redis://localhost:{redis_server.port}/3"}}
    assert "django_redis_coord.W002" in deploy_ids(DJANGO_REDIS_COORD={"URL": url}, CACHES=localhost)
    other_db = {"default": {**REDIS_CACHE, "LOCATION": f"redis://127.0.0.1:{redis_server.port}/4"}}
    # (The session's server has no persistence: only W004, about its fence counters.)
    assert deploy_ids(DJANGO_REDIS_COORD={"URL": url}, CACHES=other_db) == {"django_redis_coord.W004"}


def test_redis_location_reads_urls_as_redis_py_does():
    from django_redis_coord.checks import redis_location

    assert redis_location("redis://h:7000/2") == ("h", 7000, 2)
    assert redis_location("redis://h?db=3") == ("h", 6379, 3)
    assert redis_location("redis://h/0?db=3") == ("h", 6379, 3)  # the query wins over the path
    assert redis_location("redis://h", {"db": 3}) == ("h", 6379, 3)  # what the pool is given
    assert redis_location("redis://h/1", {"db": 3}) == ("h", 6379, 1)  # ... unless the URL says
    assert redis_location("rediss://:pw@[::1]:6380") == ("::1", 6380, 0)
    assert redis_location("unix:///run/redis.sock?db=5") == ("unix:/run/redis.sock", 0, 5)
    assert redis_location("redis://[::1/0") is None and redis_location("redis://h/0?db=x") is None


def test_deploy_compares_the_database_each_cache_really_uses(redis_server):
    """W002 appears exactly when the cache's own client talks to the locks' database: read from
    a ?db= query, from OPTIONS (Django's RedisCache) or CONNECTION_POOL_KWARGS (django-redis)."""
    from django.core.cache import caches

    base = f"redis://127.0.0.1:{redis_server.port}"
    django_cache = "django.core.cache.backends.redis.RedisCache"
    django_redis = "django_redis.cache.RedisCache"
    cases = [
        (base + "/3", {"BACKEND": django_redis, "LOCATION": base + "?db=3"}),
        (base + "/0", {"BACKEND": django_redis, "LOCATION": base + "?db=3"}),
        (base + "/3", {"BACKEND": django_redis, "LOCATION": base + "/0?db=3"}),
        (base + "/3", {"BACKEND": django_cache, "LOCATION": base, "OPTIONS": {"db": 3}}),
        (base + "/3", {"BACKEND": django_cache, "LOCATION": base + "/4", "OPTIONS": {"db": 3}}),
        (base + "/0", {"BACKEND": django_cache, "LOCATION": base, "OPTIONS": {"db": 3}}),
        (base + "/3", {"BACKEND": django_redis, "LOCATION": base, "OPTIONS": {"CONNECTION_POOL_KWARGS": {"db": 3}}}),
        (base + "/3", {"BACKEND": django_cache, "LOCATION": f"{base}/3;{base}/5"}),
        (base + "?db=3", {"BACKEND": django_cache, "LOCATION": base + "/3"}),
    ]
    warned = []
    for locks_url, cache in cases:
        with override_settings(DJANGO_REDIS_COORD={"URL": locks_url}, CACHES={"default": cache}):
            if cache["BACKEND"] == django_redis:
                from django_redis import get_redis_connection

                cache_db = get_redis_connection("default").connection_pool.connection_kwargs["db"]
            else:
                cache_db = caches["default"]._cache.get_client(write=True).connection_pool.connection_kwargs["db"]
            locks_db = redis.Redis.from_url(locks_url).connection_pool.connection_kwargs["db"]
            found = "django_redis_coord.W002" in ids(check_redis_for_deploy())
            assert found is (cache_db == locks_db), (locks_url, cache)
            warned.append(found)
    assert warned == [True, False, True, True, False, False, True, True, True]


def test_deploy_reports_an_unreachable_redis():
    dead = f"redis://127.0.0.1:{free_port()}/0"
    found = deploy_ids(DJANGO_REDIS_COORD={"URL": dead, "CLIENT_OPTIONS": {"socket_connect_timeout": 0.5}})
    assert found == {"django_redis_coord.W003"}


def test_deploy_check_stays_quiet_about_settings_errors():
    # The normal check reports the broken settings; the deploy check does not pile on.
    assert deploy_ids(DJANGO_REDIS_COORD={"URL": "http://nowhere"}) == set()


def test_a_url_python_cannot_split_is_an_error_not_a_crash():
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from django_redis_coord.config.settings import settings_problems

    (problem,) = settings_problems({"URL": "redis://[::1/0"}, {})
    assert problem.id == "django_redis_coord.E006" and "Invalid IPv6 URL" in problem.msg and problem.hint
    # `manage.py check` lists the error instead of dying with ValueError.
    with override_settings(DJANGO_REDIS_COORD={"URL": "redis://[::1/0"}):
        with pytest.raises(SystemCheckError, match="django_redis_coord.E006"):
            call_command("check", "--tag", "django_redis_coord")


def test_unknown_client_option_hint_names_the_close_matches():
    with override_settings(DJANGO_REDIS_COORD={"URL": GOOD_URL, "CLIENT_OPTIONS": {"socket_timeot": 5}}):
        (message,) = check_settings()
    assert message.id == "django_redis_coord.E018" and "'socket_timeot'" in message.msg
    assert message.hint.startswith("Did you mean 'socket_timeout'")
    with override_settings(DJANGO_REDIS_COORD={"URL": GOOD_URL, "CLIENT_OPTIONS": {"zzzz": 5}}):
        (message,) = check_settings()
    assert message.id == "django_redis_coord.E018" and "socket_timeout" in message.hint


#: Misspellings next to the arguments redis-py's connection classes take from its own pools
#: (``orig_socket_timeout``, ``maintenance_state``...), in the options and in a URL's query.
NEAR_INTERNALS = ["socket_timeot", "socket_conect_timeout", "host_adress", "maintenance", "command_packr"]


@pytest.mark.parametrize("typo", NEAR_INTERNALS)
def test_did_you_mean_never_offers_redis_py_internals(typo):
    """A hint names only the arguments of the constructors redis-py documents (``Redis``,
    ``ConnectionPool``, ``RedisCluster``, ``Sentinel``), never the ones its pools pass to their
    connections themselves; those are still accepted."""
    from redis.connection import AbstractConnection

    from django_redis_coord.config.redis_options import init_parameters, option_names
    from django_redis_coord.config.settings import settings_problems

    documented = init_parameters(redis.Redis) | init_parameters(redis.ConnectionPool)
    internals = init_parameters(AbstractConnection) - documented
    assert {"orig_socket_timeout", "orig_host_address"} <= internals <= option_names("client")  # still accepted
    settings = [
        {"URL": GOOD_URL, "CLIENT_OPTIONS": {typo: 5}},
        {"URL": GOOD_URL + f"?{typo}=5"},
        {"URL": GOOD_URL, "CLUSTER": True, "CLIENT_OPTIONS": {typo: 5}},
        {"SENTINEL": {"SENTINELS": [("127.0.0.1", 26379)], "SERVICE_NAME": "m"}, "CLIENT_OPTIONS": {typo: 5}},
    ]
    for value in settings:
        (problem,) = [p for p in settings_problems(value, {}) if typo in p.msg]
        offered = set(re.findall(r"'(\w+)'", problem.hint)) if problem.hint.startswith("Did you mean") else set()
        assert not offered & internals, (value, problem.hint)
        if typo == "socket_timeot":
            assert problem.hint.startswith("Did you mean 'socket_timeout' or 'socket_connect_timeout'"), problem.hint


def test_every_argument_of_redis_py_is_a_known_client_option():
    """The accepted names come from redis-py's own signatures, not from a list kept here."""
    import inspect

    from django_redis_coord.config.settings import settings_problems

    names = set()
    for function in (redis.Redis.__init__, redis.ConnectionPool.__init__, redis.connection.AbstractConnection.__init__,
                     redis.Connection.__init__, redis.SSLConnection.__init__,
                     redis.UnixDomainSocketConnection.__init__):
        names |= {p.name for p in inspect.signature(function).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"}
    assert len(names) > 40 and {"socket_timeout", "health_check_interval", "ssl_ca_certs"} <= names
    problems = settings_problems({"URL": GOOD_URL, "CLIENT_OPTIONS": dict.fromkeys(names)}, {})
    assert "django_redis_coord.E018" not in {p.id for p in problems}


REFUSED_URLS = ["?db=x", "?socket_timeot=5", "?protocol=7", "?max_connections=many"]


@pytest.mark.parametrize("query", REFUSED_URLS)
def test_urls_the_check_refuses_are_the_ones_redis_py_refuses(redis_url, query):
    url = redis_url + query
    with override_settings(DJANGO_REDIS_COORD={"URL": url}):
        assert "django_redis_coord.E006" in ids(check_settings())
    with pytest.raises((TypeError, ValueError, redis.exceptions.ConnectionError)):
        redis.Redis.from_url(url).ping()


REFUSED_OPTIONS = [
    ("django_redis_coord.E018", {"socket_timeot": 5}),
    ("django_redis_coord.E027", {"max_connections": "x"}),
    ("django_redis_coord.E027", {"ssl_certfile": "/etc/redis/client.pem"}),
    ("django_redis_coord.E027", {"retry_on_error": 5}),
]


@pytest.mark.parametrize("expected, options", REFUSED_OPTIONS)
def test_options_the_check_refuses_are_the_ones_redis_py_refuses(redis_url, expected, options):
    with override_settings(DJANGO_REDIS_COORD={"URL": redis_url, "CLIENT_OPTIONS": options}):
        assert expected in ids(check_settings())
    with pytest.raises((TypeError, ValueError)):
        redis.Redis.from_url(redis_url, **options).ping()


def test_urls_and_options_the_check_accepts_work(redis_client, redis_url):
    from django_redis_coord import lock

    base = redis_url.rsplit("/", 1)[0]
    accepted = [
        (4, {"URL": base + "/0?db=4&socket_timeout=2&retry_on_timeout=yes&health_check_interval=5"}),
        (0, {"URL": redis_url, "CLIENT_OPTIONS": {"health_check_interval": 30, "retry_on_timeout": True,
                                                  "max_connections": 20, "client_name": "coord",
                                                  "socket_keepalive": True}}),
        (0, {"URL": redis_url, "DEFAULT_TIMEOUT": 0.1}),
    ]
    for db, value in accepted:
        with override_settings(DJANGO_REDIS_COORD=value):
            assert check_settings() == [], value
            with lock("accepted") as held:
                assert held.owned() and redis.Redis.from_url(f"{base}/{db}").exists("accepted") == 1


def test_default_timeout_bounds_are_the_locks_own(redis_client):
    from django_redis_coord.core.arguments import MAX_SECONDS
    from django_redis_coord.core.exceptions import InvalidLockArgument
    from django_redis_coord.core.lock.sync import Lock

    for timeout, refused in ((0.0001, True), (0.0999, True), (0.1, False), (30, False), (MAX_SECONDS, False),
                             (MAX_SECONDS + 1, True), (1e12, True)):
        with override_settings(DJANGO_REDIS_COORD={"URL": GOOD_URL, "DEFAULT_TIMEOUT": timeout}):
            found = ids(check_settings())
        assert ("django_redis_coord.E011" in found) is refused, timeout
        if refused:
            with pytest.raises(InvalidLockArgument):
                Lock(redis_client, "bounds", timeout=timeout)
        else:
            Lock(redis_client, "bounds", timeout=timeout)



def test_a_default_timeout_of_none_needs_to_be_asked_for_by_name(redis_client, redis_url):
    from django_redis_coord import NO_EXPIRY, lock

    with override_settings(DJANGO_REDIS_COORD={"URL": redis_url, "DEFAULT_TIMEOUT": None}):
        [message] = [m for m in check_settings() if m.id == "django_redis_coord.E011"]
        assert "never expire" in message.msg and "NO_EXPIRY" in message.hint and '"never"' in message.hint
    for asked in (NO_EXPIRY, "never"):
        with override_settings(DJANGO_REDIS_COORD={"URL": redis_url, "DEFAULT_TIMEOUT": asked}):
            assert check_settings() == []
            with lock("forever") as held:
                assert held.timeout is None and redis_client.pttl("forever") == -1
    with override_settings(DJANGO_REDIS_COORD={"URL": redis_url, "DEFAULT_TIMEOUT": NO_EXPIRY, "AUTO_RENEW": True}):
        assert ids(check_settings()) == {"django_redis_coord.E026"}  # nothing to renew (not a bad timeout)


# -- fences across restarts ------------------------------------------------------------------------
def test_deploy_warns_when_a_restart_can_lose_the_fence_counters(redis_servers):
    volatile, snapshots, everysec, always = redis_servers(4)
    snapshots.client().config_set("save", "900 1")
    everysec.client().config_set("appendonly", "yes")
    everysec.client().config_set("appendfsync", "everysec")
    always.client().config_set("appendonly", "yes")
    always.client().config_set("appendfsync", "always")
    for server, words in ((volatile, "no persistence"), (snapshots, "RDB snapshots"), (everysec, "everysec")):
        with override_settings(DJANGO_REDIS_COORD={"URL": server.url}):
            found = checks.run_checks(tags=["django_redis_coord"], include_deployment_checks=True)
        [warning] = [m for m in found if m.id == "django_redis_coord.W004"]
        assert words in warning.msg and "appendfsync always" in warning.hint and "DurableLock" in warning.hint
    assert "django_redis_coord.W004" not in deploy_ids(DJANGO_REDIS_COORD={"URL": always.url})
    # Not part of the plain checks (they never connect).
    with override_settings(DJANGO_REDIS_COORD={"URL": volatile.url}):
        assert "django_redis_coord.W004" not in ids(checks.run_checks(tags=["django_redis_coord"]))


def test_deploy_says_so_when_config_is_refused(redis_servers):
    (locked_down,) = redis_servers(1, args=["--rename-command", "CONFIG", ""])
    found = deploy_ids(DJANGO_REDIS_COORD={"URL": locked_down.url})
    assert "django_redis_coord.I001" in found and "django_redis_coord.W004" not in found


# -- a misspelled setting name, an invalid setting at start-up ----------------------------------
@pytest.mark.parametrize("name", ["DJANGO_REDIS_CORD", "DJANGO_REDIS_COORDS", "REDIS_COORD", "DJANGO_COORD"])
def test_a_name_close_to_the_setting_without_the_setting_is_a_warning(settings, name):
    del settings.DJANGO_REDIS_COORD
    setattr(settings, name, {"URL": GOOD_URL, "KEY_PREFIX": "shop"})
    (warning,) = checks.run_checks(tags=["django_redis_coord"], include_deployment_checks=False)
    assert warning.id == "django_redis_coord.W005" and warning.level == checks.WARNING
    assert name in warning.msg and "DJANGO_REDIS_COORD" in warning.hint


@pytest.mark.parametrize("name", ["DJANGO_REDIS_CONNECTION_FACTORY", "DJANGO_REDIS_IGNORE_EXCEPTIONS", "REDIS_URL",
                                  "REDIS_CONFIG"])
def test_other_redis_settings_are_not_taken_for_a_misspelling(settings, name):
    del settings.DJANGO_REDIS_COORD
    setattr(settings, name, "x")
    assert not checks.run_checks(tags=["django_redis_coord"], include_deployment_checks=False)


def test_a_close_name_beside_the_setting_is_not_a_warning(settings):
    settings.DJANGO_REDIS_COORDS = {"URL": GOOD_URL}  # the real one is set too
    assert not checks.run_checks(tags=["django_redis_coord"], include_deployment_checks=False)


def manage_check(tmp_path, setting: str) -> subprocess.CompletedProcess:
    """``django-admin check`` in a new process whose settings add ``setting`` to the suite's."""
    (tmp_path / "typo_settings.py").write_text(f"from tests.settings import *  # noqa: F403\n{setting}\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "typo_settings", "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"}
    return subprocess.run([sys.executable, "-m", "django", "check"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=root)


def test_manage_check_shows_an_invalid_setting_as_its_error_alone(tmp_path):
    result = manage_check(tmp_path, 'DJANGO_REDIS_COORD = {"URL": REDIS_URL, "TIMEOUT": 5, "METRICS": ["prometheus"]}')
    assert result.returncode == 1
    assert "django_redis_coord.E002" in result.stderr and "DEFAULT_TIMEOUT" in result.stderr
    assert "Traceback" not in result.stderr and "Metrics" not in result.stderr, result.stderr


def test_manage_check_warns_about_a_misspelled_setting_name(tmp_path):
    result = manage_check(tmp_path, 'DJANGO_REDIS_CORD = DJANGO_REDIS_COORD\ndel DJANGO_REDIS_COORD')
    assert result.returncode == 0
    assert "django_redis_coord.W005" in result.stderr and "'DJANGO_REDIS_CORD'" in result.stderr, result.stderr
