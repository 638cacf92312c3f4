"""What a hostile request can make ``@locked`` do: a clear 4xx or a short key, never a 500."""

from __future__ import annotations

from django.test import Client

from django_redis_coord.key_values import MAX_KEY_BYTES

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
