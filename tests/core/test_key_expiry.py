"""Every key a primitive writes expires within a documented bound after its last use
(docs/operations.md, "What a name leaves in Redis"): names taken from requests cannot fill Redis."""

from __future__ import annotations

import threading

from django_redis_coord import Lock, Semaphore
from django_redis_coord.core.listing import HolderListing
from django_redis_coord.core.queue.rules import META_RETENTION_MS
from tests.support.expiry import keys_without_expiry, longest_ttl

#: The registry of a slot outlives its latest entry by one to two minutes.
REGISTRY_GRACE_MS = 120_000


def test_names_used_once_leave_only_keys_that_expire(redis_client):
    for index in range(300):
        lock = Lock(redis_client, f"lock:{index}", timeout=5)
        assert lock.acquire(blocking=False)
        lock.release()
        semaphore = Semaphore(redis_client, f"sem:{index}", limit=2, timeout=5)
        assert semaphore.acquire(blocking=False)
        semaphore.release()
    assert keys_without_expiry(redis_client) == []
    assert longest_ttl(redis_client) <= META_RETENTION_MS


def test_permits_never_released_expire_with_their_lease_and_their_metadata_after_it(redis_client):
    for index in range(50):  # leases longer than the loop takes on a loaded machine
        assert Semaphore(redis_client, f"dropped:{index}", limit=1, timeout=30).acquire(blocking=False)
    assert keys_without_expiry(redis_client) == []
    meta = redis_client.pttl(Semaphore(redis_client, "dropped:0").keys.meta)  # read first: see below
    permits = redis_client.pttl("dropped:0")
    assert 0 < permits <= 30_000  # the permits set goes when its last lease ends
    # The metadata stays META_RETENTION_MS after that lease's end, which is still ahead.
    assert META_RETENTION_MS <= meta <= 30_000 + META_RETENTION_MS


def test_every_semaphore_operation_keeps_the_keys_expiring(redis_client):
    semaphore = Semaphore(redis_client, "ops", limit=1, timeout=30)
    assert semaphore.acquire("a")
    assert semaphore.extend(10, identity="a") and semaphore.reacquire(identity="a")
    semaphore.set_max_size(2)
    assert semaphore.acquire("b")
    waiter = Semaphore(redis_client, "ops", timeout=30)
    assert not waiter.acquire("c", blocking=True, blocking_timeout=0.05)  # queued, then gave up
    fence = next(h.fence for h in semaphore.holders() if h.token == b"a")
    assert HolderListing(redis_client).force_release("ops", "sem", expected_fence=fence).released
    assert semaphore.release("b")
    assert keys_without_expiry(redis_client) == []
    assert longest_ttl(redis_client) <= META_RETENTION_MS


def test_holds_without_expiry_keep_their_keys_until_released(redis_client):
    lock = Lock(redis_client, "forever")
    assert lock.acquire(blocking=False)
    semaphore = Semaphore(redis_client, "forever-sem", limit=1)
    assert semaphore.acquire("x")
    assert redis_client.pttl("forever") == -1 and redis_client.pttl("forever-sem") == -1
    lock.release()
    assert semaphore.release("x")
    assert keys_without_expiry(redis_client) == []  # the registries too, once their last entry went


def test_a_registry_kept_for_a_hold_without_expiry_expires_once_that_hold_is_released(redis_client):
    forever, timed = Lock(redis_client, "{slot}forever"), Lock(redis_client, "{slot}timed", timeout=30)
    assert forever.acquire(blocking=False) and timed.acquire(blocking=False)
    registry = timed.keys.registry
    assert forever.keys.registry == registry and redis_client.pttl(registry) == -1
    forever.release()  # the entry without expiry went: the registry expires after the other one
    assert 30_000 < redis_client.pttl(registry) <= 30_000 + REGISTRY_GRACE_MS
    timed.release()
    assert redis_client.exists(registry) == 0 and keys_without_expiry(redis_client) == []


def test_a_registry_outlives_its_latest_entry_by_one_to_two_minutes(redis_client):
    lock = Lock(redis_client, "reg", timeout=2)
    assert lock.acquire(blocking=False)
    registry = lock.keys.registry
    assert 2000 + REGISTRY_GRACE_MS // 2 < redis_client.pttl(registry) <= 2000 + REGISTRY_GRACE_MS
    assert lock.extend(10)
    assert 10_000 < redis_client.pttl(registry) <= 12_000 + REGISTRY_GRACE_MS
    lock.release()
    assert redis_client.exists(registry) == 0  # its last entry went: the key with it


def test_waiters_leave_only_keys_that_expire(redis_client):
    holder = Lock(redis_client, "busy", timeout=5)
    assert holder.acquire(blocking=False)
    results = []
    threads = [threading.Thread(target=lambda: results.append(Lock(redis_client, "busy", timeout=5)
                                                              .acquire(blocking_timeout=0.2)))
               for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [False] * 5
    assert keys_without_expiry(redis_client) == []
    holder.release()
    assert keys_without_expiry(redis_client) == []
