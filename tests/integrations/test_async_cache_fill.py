"""``aget_or_set``, the asyncio twin of ``get_or_set`` (tests/integrations/test_cache_fill.py), against a real
redis-server with both Redis cache backends: concurrent tasks, processes running tasks, a raising
producer, a producer outlived by its lock, waiting limits."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from django.core.cache import caches

from django_redis_coord.core.exceptions import LockAcquireTimeout
from django_redis_coord.integrations.cache_fill.aio import aget_or_set
from django_redis_coord.integrations.cache_fill.rules import FILL_RETENTION_MS
from django_redis_coord.integrations.cache_fill.sync import get_or_set
from tests.integrations.test_cache_fill import _caches, counters, db  # noqa: F401 - _caches: the caches, for every test here
from tests.support.procs import run_processes


@pytest.fixture(params=["django-redis", "django"])
def alias(request) -> str:
    return request.param


def async_counting(key: str, delay: float = 0.0):
    """An ``async def`` producer counting its runs in Redis (``runs:<key>``)."""

    async def producer():
        run = counters().incr(f"runs:{key}")
        await asyncio.sleep(delay)
        return {"by": os.getpid(), "run": run}

    return producer


def tasks_in_a_process(alias: str, key: str, count: int, start_at: float) -> list:
    async def main():
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        return await asyncio.gather(*(aget_or_set(key, async_counting(key, 0.3), cache=alias) for _ in range(count)))

    return asyncio.run(main())


def test_concurrent_tasks_run_the_producer_once(alias):
    async def main():
        return await asyncio.gather(*(aget_or_set("cold", async_counting("cold", 0.2), cache=alias)
                                      for _ in range(30)))

    values = asyncio.run(main())
    assert counters().get("runs:cold") == b"1"
    assert all(value == values[0] for value in values) and len({id(value) for value in values}) == 30
    assert caches[alias].get("cold") == values[0]


def test_tasks_of_several_processes_run_the_producer_once(alias):
    results = run_processes(tasks_in_a_process, [(alias, "shared", 10, time.monotonic() + 1.0)] * 3)
    values = [value for each in results for value in each]
    assert len(values) == 30 and all(value == values[0] for value in values)
    assert counters().get("runs:shared") == b"1"
    assert caches[alias].get("shared") == values[0]


def test_a_raising_producer_fails_its_task_and_another_task_produces(alias):
    async def failing():
        await asyncio.sleep(0.2)
        raise RuntimeError("producer failed")

    async def main():
        first = asyncio.ensure_future(aget_or_set("flaky", failing, cache=alias))
        await asyncio.sleep(0.05)  # the others find the first one's fill under way
        others = [aget_or_set("flaky", async_counting("flaky"), cache=alias) for _ in range(5)]
        return await asyncio.gather(first, *others, return_exceptions=True)

    first, *values = asyncio.run(main())
    assert isinstance(first, RuntimeError)
    assert counters().get("runs:flaky") == b"1" and all(value == values[0] for value in values)
    assert caches[alias].get("flaky") == values[0]


def test_a_producer_outlived_by_its_lock_cannot_overwrite_a_later_value(alias):
    """The task's lock ends (no renewal) while it produces; a caller of another thread takes the
    lock and stores its value; the task's late write is refused and it returns the newer value."""
    late: dict = {}

    def later_caller():
        time.sleep(0.1)
        late["value"] = get_or_set("fenced", lambda: "newer", cache=alias, lock_timeout=0.3)

    async def slow():
        await asyncio.sleep(1.0)
        return "stale"

    thread = threading.Thread(target=later_caller)
    thread.start()
    returned = asyncio.run(aget_or_set("fenced", slow, cache=alias, lock_timeout=0.3, auto_renew=False))
    thread.join()
    assert late["value"] == "newer" and returned == "newer"
    assert caches[alias].get("fenced") == "newer"


def test_plain_callables_waiting_limits_and_timeout_zero(alias):
    async def main():
        assert await aget_or_set("plain", lambda: [1, 2], 60, cache=alias) == [1, 2]
        producing = asyncio.ensure_future(aget_or_set("slow", async_counting("slow", 0.5), cache=alias))
        await asyncio.sleep(0.05)
        with pytest.raises(LockAcquireTimeout):  # a task of this loop waiting for the producing one
            await aget_or_set("slow", async_counting("slow"), cache=alias, wait_timeout=0.1)
        await producing
        for _ in range(2):  # nothing stored: each call produces
            await aget_or_set("zero", async_counting("zero"), 0, cache=alias)
        caches[alias].set("cached", "old", 100)  # ... but a cached value is returned, as in Django
        assert await aget_or_set("cached", async_counting("cached"), 0, cache=alias) == "old"

    asyncio.run(main())
    assert caches[alias].get("plain") == [1, 2]
    metas = [key for key in db(alias).keys("*") if b":dcoord:rw:meta:" in key]
    assert metas and all(0 < db(alias).pttl(key) <= FILL_RETENTION_MS for key in metas)
    assert counters().get("runs:slow") == b"1" and counters().get("runs:zero") == b"2"
    assert not caches[alias].has_key("zero") and counters().get("runs:cached") is None

