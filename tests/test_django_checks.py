"""System checks: each settings error has its id; deploy checks inspect the real Redis."""

from __future__ import annotations

import time

import pytest
from django.core import checks
from django.test import override_settings

from django_redis_coord.checks import check_redis_for_deploy, check_settings
from django_redis_coord.server import free_port

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
        {"URL": dead, "DEFAULT_TIMEOUT": None, "FAIL_OPEN": True, "CONTENTION_STATUS": 423},
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
    assert deploy_ids(DJANGO_REDIS_COORD={"URL": url}, CACHES=other_db) == set()


def test_deploy_reports_an_unreachable_redis():
    dead = f"redis://127.0.0.1:{free_port()}/0"
    found = deploy_ids(DJANGO_REDIS_COORD={"URL": dead, "CLIENT_OPTIONS": {"socket_connect_timeout": 0.5}})
    assert found == {"django_redis_coord.W003"}


def test_deploy_check_stays_quiet_about_settings_errors():
    # The normal check reports the broken settings; the deploy check does not pile on.
    assert deploy_ids(DJANGO_REDIS_COORD={"URL": "http://nowhere"}) == set()
