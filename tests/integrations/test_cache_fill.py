"""Single-flight cache fills (``get_or_set``) against a real redis-server, with both Redis cache
backends (django-redis and Django's own RedisCache); the concurrency tests run callers as separate
OS processes (each with threads) and kill or pause the producer."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import warnings
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import InvalidCacheBackendError, caches
from django.core.cache.backends.base import CacheKeyWarning
from django.test import override_settings
from redis.crc import key_slot

from benchmarks.common import CommandMonitor
from django_redis_coord.core.exceptions import InvalidLockArgument, InvalidLockArgumentType, UnsupportedCacheBackend
from django_redis_coord.core.keys import keys_for
from django_redis_coord.integrations.cache_fill.rules import FILL_RETENTION_MS, fill_lock_name
from django_redis_coord.integrations.cache_fill.sync import get_or_set
from tests.support.procs import CTX, run_processes

BASE = settings.REDIS_URL.rsplit("/", 1)[0]
COUNTERS = BASE + "/0"  # producers count their runs here, beside the caches' databases
CACHES = {
    "default": settings.CACHES["default"],
    # django-redis with a JSON serializer and zlib: the fill must write what this client reads.
    "django-redis": {
        "BACKEND": "django_redis.cache.RedisCache", "LOCATION": BASE + "/3", "KEY_PREFIX": "pfx", "VERSION": 3,
        "OPTIONS": {"SERIALIZER": "django_redis.serializers.json.JSONSerializer",
                    "COMPRESSOR": "django_redis.compressors.zlib.ZlibCompressor"},
    },
    "django": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": BASE + "/4", "KEY_PREFIX": "pfx",
        "VERSION": 3,
    },
    # Django's RedisCache with a serializer of its own (OPTIONS["serializer"], a dotted path).
    "django-json": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": BASE + "/4",
                    "OPTIONS": {"serializer": "tests.integrations.test_cache_fill.JSONSerializer"}},
    "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "herd": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": BASE + "/5",
             "OPTIONS": {"CLIENT_CLASS": "django_redis.client.HerdClient"}},
}
DATABASES = {"django-redis": 3, "django": 4}
LOCK_TTL = 1.0
#: A lock_timeout no pause of a loaded machine outlasts, for a caller whose hold must not end.
NEVER_LOST = 120.0


class JSONSerializer:
    """A serializer for Django's RedisCache (``dumps`` / ``loads``)."""

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


@pytest.fixture(autouse=True)
def _caches(redis_client):
    """The caches above for every test, all databases flushed (by ``redis_client``)."""
    with override_settings(CACHES=CACHES):
        yield


@pytest.fixture(params=["django-redis", "django"])
def alias(request) -> str:
    return request.param


def db(alias: str) -> redis.Redis:
    return redis.Redis.from_url(f"{BASE}/{DATABASES[alias]}")


def counters() -> redis.Redis:
    return redis.Redis.from_url(COUNTERS)


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    stop_at = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < stop_at, "timed out"
        time.sleep(0.005)


def counting(key: str, delay: float = 0.0, value: Any = None):
    """A producer that counts its runs in Redis (``runs:<key>``), takes ``delay`` s and returns
    ``value`` or ``{"by": pid, "run": n, "at": monotonic start}``."""

    def producer():
        started = time.monotonic()
        run = counters().incr(f"runs:{key}")
        time.sleep(delay)
        return value if value is not None else {"by": os.getpid(), "run": run, "at": started}

    return producer


def callers(alias: str, key: str, threads: int, start_at: float, delay: float, options: Any = None) -> list:
    """In a child process: ``threads`` threads call get_or_set (with ``options``) at ``start_at``;
    their results (or ``("raised", repr)``)."""
    results: list = []

    def one():
        time.sleep(max(0.0, start_at - time.monotonic()))
        try:
            results.append(get_or_set(key, counting(key, delay), cache=alias, **(options or {})))
        except Exception as exc:
            results.append(("raised", repr(exc)))

    pool = [threading.Thread(target=one) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return results


# -- one producer for many processes ---------------------------------------------------------------
def test_a_cold_key_is_produced_once_for_many_processes_and_threads(alias):
    start_at = time.monotonic() + 1.0
    results = run_processes(callers, [(alias, "cold", 4, start_at, 0.3)] * 5)
    values = [value for each in results for value in each]
    assert len(values) == 20
    assert counters().get("runs:cold") == b"1"
    assert all(value == values[0] for value in values) and "by" in values[0]
    # What a plain cache.get() reads, under the cache's KEY_PREFIX and VERSION, with its serializer.
    assert caches[alias].get("cold") == values[0]
    assert db(alias).exists("pfx:3:cold")


def test_a_long_lock_timeout_hands_over_in_two_steps_and_still_produces_once(alias):
    """Past 10 s, a fill lock's waiter lease stops growing (5 s): a hand-off grants two leases and
    the waiter claims the rest of the TTL, as any lock's waiter does."""
    start_at = time.monotonic() + 0.5
    results = run_processes(callers, [(alias, "long", 2, start_at, 0.2, {"lock_timeout": 60})] * 3)
    values = [value for each in results for value in each]
    assert len(values) == 6 and all(value == values[0] for value in values)
    assert counters().get("runs:long") == b"1"


def test_each_caller_gets_its_own_copy_and_a_hit_runs_nothing(alias):
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(get_or_set("copy", counting("copy", 0.2), cache=alias)))
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counters().get("runs:copy") == b"1" and len(results) == 6
    assert all(value == results[0] for value in results)
    assert len({id(value) for value in results}) == 6  # followers decode the stored bytes each
    caches[alias].set("set-by-cache", {"from": "cache.set"})
    assert get_or_set("set-by-cache", counting("set-by-cache"), cache=alias) == {"from": "cache.set"}
    assert counters().get("runs:set-by-cache") is None


def test_a_hit_sends_one_get_as_the_caches_own_get_or_set(alias, redis_server):
    """What is fixed per cache alias is looked up once: a hit costs Redis one GET, nothing else."""
    cache = caches[alias]
    cache.set("hit", [1, 2])
    assert get_or_set("hit", counting("hit"), cache=alias) == [1, 2]  # connected
    with CommandMonitor(redis_server, wait=30) as ours:
        for _ in range(5):
            assert get_or_set("hit", counting("hit"), cache=alias) == [1, 2]
    with CommandMonitor(redis_server, wait=30) as theirs:
        for _ in range(5):
            assert cache.get_or_set("hit", lambda: "produced") == [1, 2]
    assert ours.counts == theirs.counts == {"GET": 5}
    assert counters().get("runs:hit") is None


# -- a producer that dies, one that is paused, one that raises -----------------------------------
def _hanging(alias: str, key: str) -> None:
    def producer():
        counters().set(f"hanging:{key}", os.getpid())
        time.sleep(3600)

    get_or_set(key, producer, cache=alias, lock_timeout=LOCK_TTL)


def test_a_killed_producer_is_replaced_within_the_lock_ttl(alias):
    victim = CTX.Process(target=_hanging, args=(alias, "crash"), daemon=True)
    victim.start()
    wait_for(lambda: counters().exists("hanging:crash"))
    time.sleep(LOCK_TTL)  # renewed meanwhile: the producer outlives a TTL while it lives
    assert victim.is_alive() and counters().get("runs:crash") is None
    killed = {}

    def kill_soon():
        time.sleep(0.3)  # the callers below are in line by then
        killed["at"] = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    results = run_processes(callers, [(alias, "crash", 2, 0.0, 0.0, {"lock_timeout": LOCK_TTL})] * 2)
    killer.join()
    victim.join(5)
    values = [value for each in results for value in each]
    assert counters().get("runs:crash") == b"1" and all(value == values[0] for value in values)
    took = values[0]["at"] - killed["at"]
    assert 0 < took <= LOCK_TTL + 0.5, took  # the hold ends with its TTL, renewed up to the kill
    assert caches[alias].get("crash") == values[0]


def _paused(alias: str, key: str, started: Any, go: Any, out: Any) -> None:
    def producer():
        started.set()
        go.get()
        return {"by": "paused producer"}

    out.put(get_or_set(key, producer, cache=alias, lock_timeout=LOCK_TTL))


def test_a_stale_producer_cannot_overwrite_a_newer_value(alias):
    """The producer is stopped (SIGSTOP: its renewals stop too) past its lock's TTL; a second
    caller produces and stores; the first resumes and writes: the cache keeps the newer value.

    Only the stale producer's hold may end here: the second caller's lock_timeout is long, so that
    a loaded machine pausing it past a short TTL (which rightly gets its own write refused, see
    the test below) cannot take the place of what is tested."""
    started, go, out = CTX.Event(), CTX.Queue(), CTX.Queue()  # (Event.set() would wait for the stopped process)
    stale = CTX.Process(target=_paused, args=(alias, "fenced", started, go, out), daemon=True)
    stale.start()
    assert started.wait(10)
    os.kill(stale.pid, signal.SIGSTOP)
    try:
        [[newer]] = run_processes(callers, [(alias, "fenced", 1, 0.0, 0.0, {"lock_timeout": NEVER_LOST})])
        assert newer["run"] == 1 and caches[alias].get("fenced") == newer
        go.put("go")
    finally:
        os.kill(stale.pid, signal.SIGCONT)
    # The resumed producer's write is refused: it gets the newer value, which the cache keeps.
    assert out.get(timeout=10) == newer
    stale.join(5)
    assert caches[alias].get("fenced") == newer


def test_a_producer_that_outlives_its_lock_alone_returns_its_value_unstored(alias, caplog):
    def slow():
        time.sleep(0.6)
        return "late"

    assert get_or_set("outlived", slow, cache=alias, lock_timeout=0.3, auto_renew=False) == "late"
    assert caches[alias].get("outlived") is None
    assert "was not stored" in caplog.text


def _fill_into(alias: str, key: str, delay: float, options: Any, out: Any) -> None:
    out.put(get_or_set(key, counting(key, delay), cache=alias, **options))


def test_the_waiting_processes_get_the_value_together_not_in_turn(alias):
    """A waiting process is stopped (SIGSTOP) in the queue, ahead of two others: the end of the
    write grants all of them their read at once, so the stopped one holds nobody up (were the
    value passed from process to process, the others would wait for its hold to expire)."""
    options = {"lock_timeout": 6.0}  # a stopped waiter's place in the queue lives 3 s (the waiter lease)
    out = CTX.Queue()
    producer = CTX.Process(target=_fill_into, args=(alias, "together", 2.0, options, out), daemon=True)
    producer.start()
    wait_for(lambda: counters().exists("runs:together"))
    stopped = CTX.Process(target=_fill_into, args=(alias, "together", 0.0, options, out), daemon=True)
    stopped.start()
    queue = keys_for(fill_lock_name(b"pfx:3:together"), b"rw").queue
    wait_for(lambda: db(alias).zcard(queue) == 1)
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        launched = time.monotonic()
        results = run_processes(callers, [(alias, "together", 1, 0.0, 0.0, options)] * 2)
        done = time.monotonic()
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    values = [value for each in results for value in each] + [out.get(timeout=10), out.get(timeout=10)]
    produced_at = values[0]["at"] + 2.0
    assert launched < produced_at - 0.5  # the two were in the queue, behind the stopped one
    assert all(value == values[0] for value in values) and counters().get("runs:together") == b"1"
    assert done - produced_at < 2.0, done - produced_at  # not the 6 s of the stopped one's hold
    producer.join(5)
    stopped.join(5)


def _raising(alias: str, key: str) -> str:
    def producer():
        counters().set(f"raising:{key}", 1)
        time.sleep(0.5)
        raise RuntimeError("producer failed")

    try:
        get_or_set(key, producer, cache=alias)
    except RuntimeError as exc:
        return f"raised {exc}"
    return "returned"


def test_a_raising_producer_fails_its_caller_and_the_next_in_line_produces(alias):
    failing = CTX.Pool(1)
    try:
        first = failing.apply_async(_raising, (alias, "flaky"))
        wait_for(lambda: counters().exists("raising:flaky"))
        results = run_processes(callers, [(alias, "flaky", 2, 0.0, 0.1)] * 3)
        assert first.get(10) == "raised producer failed"
    finally:
        failing.close()
        failing.join()
    values = [value for each in results for value in each]
    assert len(values) == 6 and all(value == values[0] for value in values)
    assert counters().get("runs:flaky") == b"1"  # one of the waiters produced, once
    assert caches[alias].get("flaky") == values[0]


def test_waiting_stops_at_wait_timeout(alias):
    results = run_processes(callers, [(alias, "slow", 2, time.monotonic() + 0.5, 1.0, {"wait_timeout": 0.2})] * 2)
    values = [value for each in results for value in each]
    assert counters().get("runs:slow") == b"1"
    produced = [value for value in values if isinstance(value, dict)]
    gave_up = [value for value in values if isinstance(value, tuple)]
    assert len(produced) == 1 and len(gave_up) == 3
    assert all("LockAcquireTimeout" in text for _, text in gave_up)


# -- what is written --------------------------------------------------------------------------------
def test_timeouts_versions_and_values_as_the_cache_itself_writes_them(alias):
    cache, raw = caches[alias], db(alias)
    assert get_or_set("ttl", lambda: "v", 100, cache=alias) == "v"
    assert 99_000 < raw.pttl("pfx:3:ttl") <= 100_000
    get_or_set("default-ttl", lambda: "v", cache=alias)
    assert 299_000 < raw.pttl("pfx:3:default-ttl") <= 300_000  # the cache's default timeout
    get_or_set("forever", lambda: "v", None, cache=alias)
    assert raw.pttl("pfx:3:forever") == -1
    assert get_or_set("versioned", lambda: [1, 2], version=7, cache=alias) == [1, 2]
    assert cache.get("versioned", version=7) == [1, 2] and cache.get("versioned") is None
    assert get_or_set("number", lambda: 41, cache=alias) == 41
    assert cache.incr("number") == 42  # stored as the cache stores integers
    assert get_or_set("none", lambda: None, cache=alias) is None and cache.has_key("none")
    for _ in range(2):  # a timeout of 0 stores nothing: each call produces
        assert get_or_set("zero", counting("zero", value="z"), 0, cache=alias) == "z"
    assert counters().get("runs:zero") == b"2" and not cache.has_key("zero")
    # ... but a value already cached is returned, as Django's get_or_set returns it
    cache.set("cached", "old", 100)
    assert cache.get_or_set("cached", lambda: "new", 0) == "old"
    assert get_or_set("cached", counting("cached", value="new"), 0, cache=alias) == "old"
    assert counters().get("runs:cached") is None and cache.get("cached") == "old"


def test_the_serializer_of_a_django_redis_cache_is_its_options_one():
    assert get_or_set("json", lambda: {"a": [1, 2]}, cache="django-json") == {"a": [1, 2]}
    assert db("django").get(":1:json") == b'{"a": [1, 2]}'
    assert caches["django-json"].get("json") == {"a": [1, 2]}


def test_what_a_fill_leaves_in_redis_expires(alias):
    get_or_set("tidy", lambda: "v", 60, cache=alias)
    raw = db(alias)
    lock = fill_lock_name(b"pfx:3:tidy")
    assert not raw.exists(lock)  # released
    # Only the lock's meta hash stays (its fence counter), for a minute rather than a lock's day.
    assert [key for key in raw.keys("*") if key != b"pfx:3:tidy"] == [keys_for(lock, b"rw").meta]
    assert 0 < raw.pttl(keys_for(lock, b"rw").meta) <= FILL_RETENTION_MS


def test_the_fill_lock_shares_the_slot_of_the_cache_key():
    long_keys = [b":1:" + b"k" * 70_000, b"{user:7}:1:" + b"k" * 2000, b"{" + b"t" * 40_000 + b"}:1:x", b"}" * 1025]
    for key in [b":1:plain", b"{user:7}:1:orders", b"a}b", b"{}x}", b"x{y", b"{a{b}c", "\u9396".encode(), *long_keys]:
        name = fill_lock_name(key)
        slots = {key_slot(each) for each in (key, name, keys_for(name, b"rw").meta, keys_for(name, b"rw").queue)}
        assert slots == {key_slot(key)}, key
        assert len(name) < 128 or key not in long_keys
    assert fill_lock_name(b":1:" + b"k" * 2000) != fill_lock_name(b":1:" + b"k" * 2001)


def test_a_key_as_long_as_djangos_get_or_set_takes_is_filled(alias):
    key = "k" * 40_000  # a fill lock's name holding it twice would pass the 64 KiB limit of names
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheKeyWarning)  # Django's warning for memcached's 250 characters
        assert caches[alias].get_or_set("own" + key, lambda: "theirs") == "theirs"
        assert get_or_set(key, counting("long", value="v"), cache=alias) == "v"
        assert get_or_set(key, counting("long", value="w"), cache=alias) == "v"
        assert caches[alias].get(key) == "v"
    assert counters().get("runs:long") == b"1"


# -- refusals ----------------------------------------------------------------------------------------
def test_unsupported_caches_and_bad_arguments_get_typed_errors(redis_client):
    with pytest.raises(UnsupportedCacheBackend, match="LocMemCache"):
        get_or_set("k", lambda: 1, cache="local")
    with pytest.raises(UnsupportedCacheBackend, match="HerdClient"):
        get_or_set("k", lambda: 1, cache="herd")
    assert issubclass(UnsupportedCacheBackend, TypeError)
    with pytest.raises(InvalidCacheBackendError):
        get_or_set("k", lambda: 1, cache="nope")
    bad = [
        ({"producer": "not callable"}, InvalidLockArgumentType),
        ({"key": 7}, InvalidLockArgumentType),
        ({"timeout": "300"}, InvalidLockArgumentType),
        ({"timeout": float("nan")}, InvalidLockArgument),
        ({"lock_timeout": 0}, InvalidLockArgument),
        ({"lock_timeout": None}, InvalidLockArgumentType),
        ({"wait_timeout": -1}, InvalidLockArgument),
        ({"auto_renew": "yes"}, InvalidLockArgumentType),
        ({"version": "2"}, InvalidLockArgumentType),
        ({"key": "a:dcoord:b"}, InvalidLockArgument),  # the library's reserved marker
    ]
    for change, error in bad:
        arguments = {"key": "k", "producer": lambda: 1, **change}
        with pytest.raises(error):
            get_or_set(arguments.pop("key"), arguments.pop("producer"), **arguments)

    async def coroutine():
        return 1

    with pytest.raises(InvalidLockArgumentType, match="aget_or_set"):
        get_or_set("k", coroutine)
    for alias in DATABASES:
        assert db(alias).dbsize() == 0
