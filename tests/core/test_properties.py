"""Property-based tests of bad and unusual input: names, timeouts, key prefixes.

Any name, timeout or prefix gets either a clear typed error with nothing written to Redis, or
correct behaviour - never an error raised inside a Lua script, and never two different names
sharing a key.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from redis.exceptions import LockError

from django_redis_coord import InvalidLockArgument, InvalidLockArgumentType, Lock, Semaphore, lock_holder
from django_redis_coord.config.settings import _apply_prefix, _strip_prefix
from django_redis_coord.core.exceptions import NameKindConflict
from django_redis_coord.core.keys import MARKER, MAX_NAME_BYTES, key_slot, keys_for

REDIS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PURE = settings(max_examples=300, deadline=None)

GLOB_AND_BRACES = "*?[]^-!\\{}:"

names = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.sampled_from(GLOB_AND_BRACES + "ab"), max_size=24),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=4),
    st.binary(max_size=40),
    # around the size limit, in one- and two-byte characters
    st.builds(lambda n: "x" * n, st.integers(MAX_NAME_BYTES - 16, MAX_NAME_BYTES + 16)),
    st.builds(lambda n: "é" * n, st.integers(MAX_NAME_BYTES // 2 - 8, MAX_NAME_BYTES // 2 + 8)),
    st.builds(lambda a, b: a + ":dcoord:" + b, st.text(max_size=5), st.text(max_size=5)),
)


def encoded(name) -> bytes:
    return name.encode("utf-8", "surrogatepass") if isinstance(name, str) else bytes(name)


def acceptable(raw: bytes) -> bool:
    return 0 < len(raw) <= MAX_NAME_BYTES and MARKER not in raw


def all_keys(client) -> list[bytes]:
    return list(client.scan_iter(count=1000))


# -- names against a real server ------------------------------------------------------------------
@REDIS
@given(name=names)
@example(name="{}")
@example(name="}{")
@example(name="{a}{b}")
@example(name="a}")
@example(name="*")
@example(name=b"\xff\xfe*?[")
@example(name="x" * MAX_NAME_BYTES)
def test_any_name_is_refused_cleanly_or_locks_correctly(redis_client, name):
    redis_client.flushall()
    raw = encoded(name)
    if not acceptable(raw):
        with pytest.raises(InvalidLockArgument) as info:
            Lock(redis_client, name, timeout=5).acquire()
        assert isinstance(info.value, LockError)
        assert redis_client.dbsize() == 0
        return
    lock = Lock(redis_client, name, timeout=5)
    assert lock.acquire(blocking=False)
    assert redis_client.get(raw) == lock.local.token  # the token lives at exactly the name
    assert {key_slot(key) for key in all_keys(redis_client)} == {key_slot(raw)}
    holder = lock_holder(redis_client, name)
    assert holder is not None and holder.fence == lock.fence
    assert Lock(redis_client, name, timeout=5).acquire(blocking=False) is False
    lock.release()
    assert redis_client.exists(raw) == 0
    assert lock_holder(redis_client, name) is None


@REDIS
@given(name=names)
def test_any_name_is_refused_cleanly_or_counts_permits_correctly(redis_client, name):
    redis_client.flushall()
    raw = encoded(name)
    if not acceptable(raw):
        with pytest.raises(InvalidLockArgument):
            Semaphore(redis_client, name, limit=2, timeout=5).acquire()
        assert redis_client.dbsize() == 0
        return
    semaphore = Semaphore(redis_client, name, limit=2, timeout=5)
    assert semaphore.acquire("a") and semaphore.acquire("b")
    assert semaphore.acquire("c") is False
    assert {key_slot(key) for key in all_keys(redis_client)} == {key_slot(raw)}
    assert semaphore.release("a") and semaphore.acquire("c")
    assert semaphore.get_current_size() == 2


@REDIS
@given(a=names, b=names)
@example(a="{T}", b="T")
@example(a="x{T}y", b="{T}")
@example(a="a*", b="ab")
@example(a="[ab]", b="a")
def test_locks_on_distinct_names_are_independent(redis_client, a, b):
    raw_a, raw_b = encoded(a), encoded(b)
    assume(raw_a != raw_b and acceptable(raw_a) and acceptable(raw_b))
    redis_client.flushall()
    first = Lock(redis_client, a, timeout=5)
    second = Lock(redis_client, b, timeout=5)
    assert first.acquire(blocking=False)
    assert second.acquire(blocking=False), "a lock on another name must not be busy"
    assert lock_holder(redis_client, a).token == first.local.token
    assert lock_holder(redis_client, b).token == second.local.token
    first.release()
    assert redis_client.get(raw_b) == second.local.token
    second.release()


# -- key layout (no server) -------------------------------------------------------------------------
valid_raw = names.map(encoded).filter(acceptable)
kinds = st.sampled_from([b"lock", b"sem"])


def side_keys(raw: bytes, kind: bytes) -> set[bytes]:
    keys = keys_for(raw, kind)
    return {keys.meta, keys.queue, keys.waiters}


@PURE
@given(a=valid_raw, b=valid_raw, kind_a=kinds, kind_b=kinds)
@example(a=b"T", b=b"{T}", kind_a=b"lock", kind_b=b"lock")
@example(a=b"a}b", b=b"1f3", kind_a=b"lock", kind_b=b"lock")
@example(a=b"x", b=b"x", kind_a=b"lock", kind_b=b"sem")
def test_distinct_names_never_share_a_key(a, b, kind_a, kind_b):
    assume((a, kind_a) != (b, kind_b))
    keys_a, keys_b = side_keys(a, kind_a), side_keys(b, kind_b)
    assert not keys_a & keys_b
    # A name is never one of another primitive's side keys (side keys carry the marker).
    assert a not in keys_b and b not in keys_a
    # Every key of a primitive hashes to the slot of its name, the registry included.
    for key in keys_a | {keys_for(a, kind_a).registry}:
        assert key_slot(key) == key_slot(a)



@pytest.mark.parametrize("blocking", [False, True])
def test_a_semaphore_on_a_locked_name_gets_a_typed_error_and_writes_nothing(redis_client, blocking):
    lock = Lock(redis_client, "shared-name", timeout=5)
    assert lock.acquire()
    before = {key: redis_client.dump(key) for key in all_keys(redis_client)}
    semaphore = Semaphore(redis_client, "shared-name", limit=1, timeout=5)
    with pytest.raises(NameKindConflict) as info:
        semaphore.acquire(blocking=blocking, blocking_timeout=1)
    assert isinstance(info.value, InvalidLockArgument)
    with pytest.raises(NameKindConflict):
        semaphore.set_max_size(3)
    assert {key: redis_client.dump(key) for key in all_keys(redis_client)} == before
    # A semaphore that was used before (its limit stored) is refused as well.
    lock.release()
    assert semaphore.acquire("peter") and semaphore.release("peter")
    assert lock.acquire()
    before = {key: redis_client.dump(key) for key in all_keys(redis_client)}
    with pytest.raises(NameKindConflict):
        semaphore.acquire(blocking=blocking, blocking_timeout=1)
    assert {key: redis_client.dump(key) for key in all_keys(redis_client)} == before
    assert lock.owned()
    lock.release()


@pytest.mark.parametrize("blocking", [False, True])
def test_a_lock_on_a_semaphore_name_gets_a_typed_error_and_writes_nothing(redis_client, blocking):
    semaphore = Semaphore(redis_client, "shared-name", limit=2, timeout=5)
    assert semaphore.acquire("peter")
    before = {key: redis_client.dump(key) for key in all_keys(redis_client)}
    lock = Lock(redis_client, "shared-name", timeout=5)
    with pytest.raises(NameKindConflict) as info:
        lock.acquire(blocking=blocking, blocking_timeout=1)
    assert isinstance(info.value, InvalidLockArgument)
    assert lock.local.token is None
    assert {key: redis_client.dump(key) for key in all_keys(redis_client)} == before
    assert semaphore.get_current_size() == 1
    assert semaphore.release("peter")


def test_async_primitives_refuse_a_name_held_by_the_other_kind(redis_url):
    import asyncio

    import redis.asyncio

    from django_redis_coord.core.lock.aio import Lock as AsyncLock
    from django_redis_coord.core.semaphore.aio import Semaphore as AsyncSemaphore

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await client.flushall()
            lock = AsyncLock(client, "shared-async", timeout=5)
            assert await lock.acquire()
            with pytest.raises(NameKindConflict):
                await AsyncSemaphore(client, "shared-async", limit=1, timeout=5).acquire(blocking=True)
            assert not await client.exists(b"{shared-async}:dcoord:sem:meta")
            await lock.release()
            semaphore = AsyncSemaphore(client, "shared-async", limit=1, timeout=5)
            assert await semaphore.acquire("peter")
            with pytest.raises(NameKindConflict):
                await AsyncLock(client, "shared-async", timeout=5).acquire(blocking_timeout=1)
            assert not await client.exists(b"{shared-async}:dcoord:lock:queue")
            assert await semaphore.release("peter")
        finally:
            await client.aclose()

    asyncio.run(scenario())


# -- timeouts ------------------------------------------------------------------------------------------
@REDIS
@given(timeout=st.floats(min_value=0.2, max_value=1e7), blocking_timeout=st.floats(min_value=0, max_value=0.05))
@example(timeout=0.2, blocking_timeout=0.0)
@example(timeout=1e7, blocking_timeout=0.05)
def test_timeouts_in_range_are_honoured(redis_client, timeout, blocking_timeout):
    redis_client.flushall()
    lock = Lock(redis_client, "timed", timeout=timeout)
    assert lock.acquire(blocking_timeout=blocking_timeout)
    pttl = redis_client.pttl("timed")
    assert 0 < pttl <= round(timeout * 1000) and pttl >= round(timeout * 1000) - 2000
    other = Lock(redis_client, "timed", timeout=timeout)
    assert other.acquire(blocking_timeout=blocking_timeout) is False
    lock.release()


bad_numbers = st.one_of(
    st.floats(max_value=0.0),  # zero, negative, -inf
    st.just(float("nan")),
    st.just(float("inf")),
)
bad_types = st.one_of(st.text(max_size=5), st.booleans(), st.lists(st.integers(), max_size=2), st.binary(max_size=3))


@REDIS
@given(argument=st.sampled_from(["timeout", "blocking_timeout", "waiter_lease"]),
       value=st.one_of(bad_numbers, bad_types))
def test_bad_timing_arguments_are_typed_errors_and_write_nothing(redis_client, argument, value):
    assume(not (argument == "blocking_timeout" and value == 0.0))  # zero is a valid blocking_timeout
    redis_client.flushall()
    expected = InvalidLockArgument if isinstance(value, float) else InvalidLockArgumentType
    with pytest.raises(expected):
        Lock(redis_client, "args", **{argument: value}).acquire()
    with pytest.raises(InvalidLockArgument):
        Semaphore(redis_client, "args", limit=1, **{argument: value}).acquire()
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize("kwargs", [dict(timeout=1e16), dict(timeout=1e300), dict(timeout=5, waiter_lease=1e16)])
def test_huge_durations_are_refused_before_reaching_redis(redis_client, kwargs):
    busy = Lock(redis_client, "huge", timeout=30)
    assert busy.acquire()  # so that a waiter queues (the waiter lease is used only then)
    before = set(all_keys(redis_client))
    with pytest.raises(InvalidLockArgument):
        Lock(redis_client, "huge" if "waiter_lease" in kwargs else "free", **kwargs).acquire(blocking_timeout=0.2)
    assert set(all_keys(redis_client)) == before


# -- key prefix -------------------------------------------------------------------------------------------
@PURE
@given(prefix=st.text(max_size=12), name=st.one_of(st.text(max_size=20), st.binary(max_size=20)))
def test_key_prefix_round_trips_and_keeps_names_apart(prefix, name):
    keyed = _apply_prefix(prefix, name)
    assert type(keyed) is type(name)
    assert _strip_prefix(prefix, keyed) == name
    if prefix:
        other = name + ("x" if isinstance(name, str) else b"x")
        assert _apply_prefix(prefix, other) != keyed
