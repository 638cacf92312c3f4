"""A hold used in a forked child is refused there: it stays with the process that took it."""

from __future__ import annotations

import os

import pytest

from django_redis_coord import Lock, LockForkedError, ReadWriteLock
from tests.support.procs import CTX


def _in_child(lock: Lock, calls: list[str], queue) -> None:
    """Try each call on the parent's hold; put (call, error class, message) for each."""
    for call in calls:
        try:
            getattr(lock, call)(*((5,) if call == "extend" else ()))
            queue.put((call, None, ""))
        except Exception as exc:  # the class and message are what the parent checks
            queue.put((call, type(exc).__name__, str(exc)))


def run_in_fork(lock: Lock, calls: list[str]) -> list[tuple]:
    queue = CTX.Queue()
    child = CTX.Process(target=_in_child, args=(lock, calls, queue))
    child.start()
    results = [queue.get(timeout=30) for _ in calls]
    child.join(30)
    return results


@pytest.mark.parametrize("auto_renew", [False, True])
def test_a_forked_child_cannot_end_or_renew_the_parents_hold(redis_client, auto_renew):
    lock = Lock(redis_client, "fork-held", timeout=5, auto_renew=auto_renew)
    assert lock.acquire(blocking=False)
    fence = lock.fence
    results = run_in_fork(lock, ["release", "extend", "reacquire"])
    for call, error, message in results:
        assert error == "LockForkedError", (call, error, message)
        assert "'fork-held'" in message and f"process {os.getpid()}" in message and "fork" in message
    # The parent still holds, with the same fence, and its release is the one that ends the hold.
    assert lock.owned() and lock.valid and lock.fence == fence
    assert redis_client.pttl("fork-held") > 4000  # neither released nor extended by the child
    lock.release()
    assert not lock.locked()


@pytest.mark.parametrize("mode", ["read", "write"])
def test_a_forked_child_cannot_end_or_renew_the_parents_read_write_hold(redis_client, mode):
    lock = ReadWriteLock(redis_client, "fork-rw", timeout=5)
    hold = getattr(lock, mode)
    assert hold.acquire(blocking=False)
    fence = hold.fence
    results = run_in_fork(hold, ["release", "extend", "reacquire"])
    for call, error, message in results:
        assert error == "LockForkedError", (call, error, message)
        assert "'fork-rw'" in message and f"process {os.getpid()}" in message
    assert hold.owned() and hold.fence == fence
    hold.release()
    assert not hold.locked()


def test_a_forked_child_takes_holds_of_its_own_with_the_parents_lock_object(redis_client):
    lock = Lock(redis_client, "fork-own", timeout=5)
    results = run_in_fork(lock, ["acquire", "extend", "release"])
    assert [error for _, error, _ in results] == [None, None, None], results
    assert not lock.locked()


def test_a_with_block_carried_into_a_fork_raises_in_the_child_and_leaves_the_hold(redis_client):
    lock = Lock(redis_client, "fork-with", timeout=5)
    queue = CTX.Queue()

    def child() -> None:
        try:
            lock.__exit__(None, None, None)  # the end of the parent's with block, run by the child
            queue.put(None)
        except LockForkedError as exc:
            queue.put(exc.lock_name)

    with lock:
        process = CTX.Process(target=child)
        process.start()
        assert queue.get(timeout=30) == "fork-with"
        process.join(30)
        assert lock.owned()
    assert not lock.locked()


def _async_in_child(lock, calls: list[str], queue) -> None:
    """As :func:`_in_child`, for an asyncio lock: each call awaited in an event loop of the child."""
    import asyncio

    for call in calls:
        try:
            asyncio.run(getattr(lock, call)(*((5,) if call == "extend" else ())))
            queue.put((call, None, ""))
        except Exception as exc:
            queue.put((call, type(exc).__name__, str(exc)))


def test_a_forked_child_cannot_end_or_renew_the_parents_asyncio_hold(redis_server, redis_client):
    import asyncio

    from django_redis_coord.asyncio import Lock as AsyncLock

    client = redis_server.async_client()
    lock = AsyncLock(client, "fork-async", timeout=5, thread_local=False)  # the hold outlives the task
    assert asyncio.run(lock.acquire(blocking=False))
    queue = CTX.Queue()
    child = CTX.Process(target=_async_in_child, args=(lock, ["release", "extend", "reacquire"], queue))
    child.start()
    results = [queue.get(timeout=30) for _ in range(3)]
    child.join(30)
    for call, error, message in results:
        assert error == "LockForkedError", (call, error, message)
        assert "'fork-async'" in message and f"process {os.getpid()}" in message
    assert redis_client.pttl("fork-async") > 4000  # neither released nor extended by the child
    assert lock.fence is not None


# -- re-entry: a child's acquire never joins the parent's hold ------------------------------------


def _acquire_in_child(hold, released, queue) -> None:
    """In a forked child: acquire ``hold`` (the parent's object, re-entrant) while the parent holds,
    then again once the parent says it released; put what each acquire gave (result, fence)."""
    try:
        got = hold.acquire(blocking_timeout=0.5)
        queue.put(("while held", got, hold.fence, hold.valid or hold.owned()))
        if got:
            return
        assert released.wait(30)
        got = hold.acquire(blocking_timeout=30)
        queue.put(("after release", got, hold.fence, hold.valid))
        if got:
            hold.release()
        queue.put(("released", True, None, None))
    except Exception as exc:  # reported to the parent
        queue.put(("error", type(exc).__name__, str(exc), None))


def _check_child_waits_then_gets_its_own_hold(hold) -> None:
    assert hold.acquire(blocking=False)
    parent_fence = hold.fence
    queue, released = CTX.Queue(), CTX.Event()
    child = CTX.Process(target=_acquire_in_child, args=(hold, released, queue), daemon=True)
    child.start()
    try:
        step, got, fence, valid = queue.get(timeout=30)
        # The parent holds: the child's acquire waits in line and times out, with no hold (and no fence).
        assert (step, got, fence, valid) == ("while held", False, None, False)
        assert hold.valid and hold.fence == parent_fence and hold.owned()
        hold.release()
        released.set()
        step, got, fence, valid = queue.get(timeout=30)
        assert (step, got, valid) == ("after release", True, True)
        assert fence > parent_fence  # a hold of its own, with a new fence
        assert queue.get(timeout=30)[:2] == ("released", True)
    finally:
        released.set()
        child.join(30)
    assert child.exitcode == 0
    assert not hold.locked()


def test_a_forked_child_does_not_reenter_the_parents_reentrant_lock(redis_client):
    lock = Lock(redis_client, "fork-reentrant", timeout=60, reentrant=True)
    _check_child_waits_then_gets_its_own_hold(lock)


@pytest.mark.parametrize("mode", ["read", "write"])
def test_a_forked_child_does_not_reenter_the_parents_read_write_hold(redis_client, mode):
    lock = ReadWriteLock(redis_client, "fork-rw-reentrant", timeout=60)
    if mode == "read":
        # A read beside the parent's read is granted at once: the child's own read must have a
        # fence of its own, never the parent's.  Here the child asks for a write while the parent reads.
        assert lock.read.acquire(blocking=False)
        parent_fence = lock.read.fence
        queue, released = CTX.Queue(), CTX.Event()
        child = CTX.Process(target=_acquire_in_child, args=(lock.write, released, queue), daemon=True)
        child.start()
        try:
            step, got, fence, valid = queue.get(timeout=30)
            assert (step, got, fence, valid) == ("while held", False, None, False)
            lock.read.release()
            released.set()
            step, got, fence, valid = queue.get(timeout=30)
            assert (step, got, valid) == ("after release", True, True) and fence > parent_fence
            assert queue.get(timeout=30)[:2] == ("released", True)
        finally:
            released.set()
            child.join(30)
        assert child.exitcode == 0
        assert not lock.read.locked() and not lock.write.locked()
    else:
        _check_child_waits_then_gets_its_own_hold(lock.write)


def test_a_forked_child_takes_its_own_hold_of_the_parents_shared_read_write_lock(redis_client):
    # thread_local=False: one hold state, claimed by the parent's hold; the child's acquire waits
    # for a hold of its own instead of finding the state taken.
    lock = ReadWriteLock(redis_client, "fork-rw-shared", timeout=60, thread_local=False)
    _check_child_waits_then_gets_its_own_hold(lock.write)


def _read_in_child(lock, queue) -> None:
    try:
        got = lock.read.acquire(blocking=False)
        queue.put((got, lock.read.fence))
        lock.read.release()
    except Exception as exc:  # reported to the parent
        queue.put((type(exc).__name__, str(exc)))


def test_a_forked_childs_read_beside_the_parents_read_is_a_hold_of_its_own(redis_client):
    lock = ReadWriteLock(redis_client, "fork-rw-reads", timeout=60)
    assert lock.read.acquire(blocking=False)
    parent_fence = lock.read.fence
    queue = CTX.Queue()
    child = CTX.Process(target=_read_in_child, args=(lock, queue), daemon=True)
    child.start()
    got, fence = queue.get(timeout=30)
    child.join(30)
    assert got is True and fence > parent_fence, (got, fence)
    # The child released its own read; the parent's is still held, alone.
    holders = lock.holders()
    assert [h.fence for h in holders] == [parent_fence]
    lock.read.release()
    assert not lock.locked()
