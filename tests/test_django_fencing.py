"""Fenced writes: a holder paused past its TTL cannot overwrite what the newer holder wrote."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.test import Client

from django_redis_coord import fenced_update, lock
from django_redis_coord.exceptions import InvalidLockArgument, InvalidLockArgumentType
from django_redis_coord.fencing import afenced_get, afenced_set, afenced_update, fenced_get, fenced_set
from tests.procs import run_processes
from tests.testapp.models import Account


def stale_and_fresh(name: str) -> tuple[int, int]:
    """A holder whose lock expired while it was paused, and the holder that got in after it."""
    first = lock(name, timeout=0.2)
    assert first.acquire(blocking=False)
    stale = first.fence
    time.sleep(0.35)  # "paused" past the TTL
    second = lock(name, timeout=10)
    assert second.acquire(blocking=False), "the expired hold must not block the next holder"
    assert second.fence > stale
    return stale, second.fence


@pytest.mark.django_db
def test_stale_holder_cannot_overwrite_the_newer_holders_row(redis_client):
    account = Account.objects.create(name="a", balance=0)
    rows = Account.objects.filter(pk=account.pk)
    stale, fresh = stale_and_fresh("account:a")
    assert fenced_update(rows, fresh, balance=200) is True
    assert fenced_update(rows, stale, balance=100) is False
    account.refresh_from_db()
    assert (account.balance, account.fence) == (200, fresh)
    # The same holder may write again under its fence; a newer one still wins afterwards.
    assert fenced_update(rows, fresh, balance=250) is True
    assert Account.objects.get(pk=account.pk).balance == 250


@pytest.mark.django_db(transaction=True)
def test_fenced_update_async_and_custom_field(redis_client):
    account = Account.objects.create(name="b", balance=0)
    rows = Account.objects.filter(pk=account.pk)
    stale, fresh = stale_and_fresh("account:b")

    async def writes():
        return (
            await afenced_update(rows, fresh, field="version", balance=7),
            await afenced_update(rows, stale, field="version", balance=8),
        )

    assert asyncio.run(writes()) == (True, False)
    account.refresh_from_db()
    assert (account.balance, account.version, account.fence) == (7, fresh, 0)


@pytest.mark.django_db
def test_view_writes_with_its_lock_fence_and_the_paused_holder_is_refused(redis_client):
    Account.objects.create(name="v", balance=0)
    paused = lock("fenced:v", timeout=0.2)
    assert paused.acquire(blocking=False)
    time.sleep(0.35)  # paused past its TTL: the next request gets the lock
    assert Client().get("/t/fenced/v/", {"balance": 5}).content == b"applied"
    assert not fenced_update(Account.objects.filter(name="v"), paused.fence, balance=-1)
    row = Account.objects.get(name="v")
    assert row.balance == 5 and row.fence > paused.fence


def test_bad_fences_are_refused_before_any_write(redis_client):
    rows = Account.objects.none()
    cases = [
        (None, InvalidLockArgumentType),
        ("5", InvalidLockArgumentType),
        (True, InvalidLockArgumentType),
        (-1, InvalidLockArgument),
        (2**53, InvalidLockArgument),
    ]
    for fence, error in cases:
        with pytest.raises(error):
            fenced_update(rows, fence, balance=1)
        with pytest.raises(error):
            fenced_set("value", "x", fence, client=redis_client)
    with pytest.raises(InvalidLockArgument, match="version"):
        fenced_update(rows, 5, field="version", version=3)
    assert redis_client.dbsize() == 0


# -- the Redis-side fenced value -----------------------------------------------------------------
def test_fenced_set_refuses_a_stale_holder(redis_client):
    stale, fresh = stale_and_fresh("report")
    assert fenced_set("report:value", "fresh", fresh, client=redis_client)
    assert not fenced_set("report:value", "stale", stale, client=redis_client)
    assert fenced_get("report:value", client=redis_client) == (b"fresh", fresh)


def test_fenced_set_with_the_configured_client_and_prefix(redis_client, settings, redis_url):
    settings.DJANGO_REDIS_COORD = {"URL": redis_url, "KEY_PREFIX": "shop"}
    assert fenced_set("cart", "1", 10, ttl=30)
    assert not fenced_set("cart", "0", 9)
    assert fenced_get("cart") == (b"1", 10)
    assert redis_client.hget("shop:cart", "value") == b"1"
    assert 0 < redis_client.pttl("shop:cart") <= 30000

    async def scenario():
        return await afenced_set("cart", "2", 11), await afenced_set("cart", "x", 3), await afenced_get("cart")

    assert asyncio.run(scenario()) == (True, False, (b"2", 11))


def _paused_writer(name: str, pause: float):
    """Take the lock, compute, stall past the TTL, then try to write."""
    holder = lock(name, timeout=0.3)
    assert holder.acquire(blocking=True, blocking_timeout=10)
    fence = holder.fence
    time.sleep(pause)
    return fence, fenced_set(f"{name}:value", f"written by {fence}", fence)


def test_paused_process_is_fenced_out_by_the_next_process(redis_client):
    # The first process stalls for 1 s with a 0.3 s lock; the second starts 0.5 s later, finds
    # the lock expired, and writes at once.  The first one's late write must be refused.
    def staggered(name, pause, delay):
        time.sleep(delay)
        return _paused_writer(name, pause)

    results = run_processes(staggered, [("job", 1.0, 0.0), ("job", 0.0, 0.5)])
    (early_fence, early_ok), (late_fence, late_ok) = sorted(results, key=lambda r: r[0])
    assert early_fence < late_fence
    assert late_ok is True and early_ok is False
    assert fenced_get("job:value", client=redis_client) == (f"written by {late_fence}".encode(), late_fence)


def test_a_fenced_read_shuts_out_older_holders(redis_client):
    from django_redis_coord import StaleFenceError

    assert fenced_set("rmw", "v1", 10, client=redis_client)
    assert fenced_get("rmw", 12, client=redis_client) == (b"v1", 12)  # the newer holder reads
    # An older holder can neither read nor write any more, although the newer one has not written.
    assert not fenced_set("rmw", "stale", 11, client=redis_client)
    with pytest.raises(StaleFenceError) as info:
        fenced_get("rmw", 11, client=redis_client)
    assert (info.value.fence, info.value.highest) == (11, 12)
    assert fenced_set("rmw", "v2", 12, client=redis_client)
    assert fenced_get("rmw", client=redis_client) == (b"v2", 12)


def test_a_fenced_read_of_a_missing_key_leaves_a_record_that_expires(redis_client):
    assert fenced_get("rmw:new", 5, client=redis_client) == (None, 5)
    assert 0 < redis_client.pttl("rmw:new") <= 24 * 3600 * 1000  # not kept for ever if never written
    assert not fenced_set("rmw:new", "stale", 4, client=redis_client)  # still shuts out older holders
    assert fenced_set("rmw:new", "v", 5, client=redis_client)
    assert redis_client.pttl("rmw:new") == -1  # the write's own expiry (none) applies
    assert fenced_get("rmw:new", 6, client=redis_client) == (b"v", 6)
    assert redis_client.pttl("rmw:new") == -1  # a read of a stored value changes no expiry
