"""What a hostile request can make ``@locked`` do (a clear 4xx or a short key, never a 500), and
what a holder of a view tells operators about it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from contextlib import contextmanager

from django.http import HttpResponse
from django.test import Client, RequestFactory

from django_redis_coord import locked
from django_redis_coord.key_templates.values import MAX_KEY_BYTES

#: Two 8 KB headers of 0xFF bytes: each character is "%C3%BF" once percent-encoded (96 KB in all).
HUGE = "\xff" * 8192


def key_of(response) -> bytes:
    assert response.status_code == 200, response.content[:200]
    return response.content.split(b" fence=")[0]


def test_long_header_values_are_hashed_into_a_short_key(redis_client):
    first = key_of(Client().get("/t/two-headers/", headers={"X-A": HUGE, "X-B": HUGE}))
    assert len(first) < 200
    assert first.startswith(b"pair:%sha256-")
    # The same values give the same key (so they contend), other values another one.
    assert key_of(Client().get("/t/two-headers/", headers={"X-A": HUGE, "X-B": HUGE})) == first
    assert key_of(Client().get("/t/two-headers/", headers={"X-A": HUGE, "X-B": HUGE[:-1] + "x"})) != first
    # Short values stay readable.
    assert key_of(Client().get("/t/two-headers/", headers={"X-A": "a", "X-B": "b"})) == b"pair:a:b"


def test_a_key_callable_giving_a_name_over_the_limit_is_a_bad_request(redis_client):
    for size in (70_000, MAX_KEY_BYTES + 1):  # over a lock name's 64 KiB limit; just over the key's
        response = Client().get("/t/callable-header/", headers={"X-Key": "k" * size})
        assert response.status_code == 400
    assert redis_client.dbsize() == 0
    assert key_of(Client().get("/t/callable-header/", headers={"X-Key": "k"})) == b"k"


# -- who holds it: the view ------------------------------------------------------------------------
def holders_seen_inside(request_path: str = "/"):
    """A view that reports the live holders of its own key, as the listing reads them."""
    from django_redis_coord.config.connection import get_client
    from django_redis_coord.core.listing import HolderListing
    from django_redis_coord.decorator.locked import current_lock

    held = current_lock()
    kind = "sem" if getattr(held, "limit", None) else "lock"
    return HolderListing(get_client()).holder(held.name, kind)


@locked("viewed:lock", timeout=30)
def lock_view(request):
    return HttpResponse(json.dumps([h.as_dict()["owner"]["view"] for h in holders_seen_inside()]))


@locked("viewed:sem", timeout=30, limit=2)
def semaphore_view(request):
    return HttpResponse(json.dumps([h.as_dict()["owner"]["view"] for h in holders_seen_inside()]))


@locked("viewed:async", timeout=30)
async def async_view(request):
    from asgiref.sync import sync_to_async

    holders = await sync_to_async(holders_seen_inside)()
    return HttpResponse(json.dumps([h.view for h in holders]))


@locked("viewed:task", timeout=30)
def plain_task():
    return [h.view for h in holders_seen_inside()]


def test_the_holder_info_names_the_locked_view(redis_client):
    request = RequestFactory().get("/")
    here = __name__
    assert json.loads(lock_view(request).content) == [f"{here}.lock_view"]
    assert json.loads(semaphore_view(request).content) == [f"{here}.semaphore_view"]
    assert json.loads(asyncio.run(async_view(request)).content) == [f"{here}.async_view"]
    # A plain function is not a view.
    assert plain_task() == [None]


# -- Retry-After -----------------------------------------------------------------------------------
@contextmanager
def held_by_a_request(redis_client, name: str):
    """A request to the holding view ``/t/hold/<name>/`` (timeout=30) is inside while this runs."""
    first = threading.Thread(target=lambda: Client().get(f"/t/hold/{name}/"))
    first.start()
    try:
        deadline = time.monotonic() + 10
        while not redis_client.exists(f"entered:{name}"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield
    finally:
        redis_client.set(f"go:{name}", 1)
        first.join(10)


def test_retry_after_comes_from_recent_hold_times_with_the_ttl_as_upper_bound(redis_client):
    redis_client.set("go:quick", 1)
    for _ in range(3):  # holds of a few milliseconds, released when the response is closed
        assert Client().get("/t/hold/quick/").status_code == 200
    redis_client.delete("go:quick", "entered:quick")
    with held_by_a_request(redis_client, "quick"):
        second = Client().get("/t/hold/quick/")
    assert second.status_code == 409
    # The typical hold of this key lasts milliseconds: come back in a second, not in 30.
    assert second["Retry-After"] == "1"


def test_retry_after_without_history_is_the_remaining_ttl(redis_client):
    # No hold of this key has ended here yet: the holder's remaining TTL (timeout=30).
    with held_by_a_request(redis_client, "fresh-key"):
        assert 25 <= int(Client().get("/t/hold/fresh-key/")["Retry-After"]) <= 30
