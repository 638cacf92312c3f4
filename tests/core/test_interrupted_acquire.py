"""An acquire stopped by an exception while its call's reply is in flight leaves nothing behind.

A signal handler that raises (a task's soft time limit, an alarm, KeyboardInterrupt) can stop an
acquire after its script ran in Redis and before its reply was read: the script may have granted
the hold (a free name) or queued the caller (a taken one).  Whatever the exception, the acquire
undoes both in one script before the exception reaches the caller: the name is free for the
next acquirer at once, and the next release hands the hold to a waiter that is still there.

The sync tests run the acquirer in a process of its own, through a TCP proxy that holds the
replies back (tests/safety/proxy.py): the test sees the script's effect in Redis, then sends the
process ``SIGALRM``, whose handler raises an ordinary ``Exception`` subclass while the process
reads the held reply.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_redis_coord import Lock, Semaphore
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.asyncio import Semaphore as AsyncSemaphore
from django_redis_coord.core.holders import lock_holder
from django_redis_coord.core.rwlock.aio import ReadWriteLock as AsyncReadWriteLock
from django_redis_coord.core.rwlock.sync import ReadWriteLock
from tests.safety.proxy import Proxy
from tests.support.procs import CTX

WAIT = 30  # seconds: far more than any step takes; a stranded hold would outlive every check


class Interrupted(Exception):
    """An ordinary exception, as a signal handler raises it (Celery's SoftTimeLimitExceeded is one)."""


# -- the primitives, by kind ----------------------------------------------------------------------
def _make(kind: str, client: Any, name: str) -> Any:
    if kind == "lock":
        return Lock(client, name, timeout=WAIT)
    if kind == "semaphore":
        return Semaphore(client, name, limit=1, timeout=WAIT)
    return ReadWriteLock(client, name, timeout=WAIT)


def _acquire(kind: str, primitive: Any, blocking_timeout: float = WAIT) -> bool:
    if kind == "rwlock":
        return primitive.write.acquire(blocking=True, blocking_timeout=blocking_timeout)
    return primitive.acquire(blocking=True, blocking_timeout=blocking_timeout)


def _release(kind: str, primitive: Any) -> None:
    if kind == "rwlock":
        primitive.write.release()
    else:
        primitive.release()


def _holder_pids(kind: str, client: Any, primitive: Any) -> list[int]:
    if kind == "lock":
        holder = lock_holder(client, primitive.name)
        return [] if holder is None else [holder.pid]
    return [holder.pid for holder in primitive.holders()]


def _held(kind: str, client: Any, primitive: Any) -> bool:
    """Whether anybody holds the name, read in Redis."""
    return client.exists(primitive.keys.name) == 1


# -- the processes ----------------------------------------------------------------------------------
def _interrupted_acquirer(kind: str, proxy_url: str, name: str, contended: bool, told: int, control: Any,
                          then: type[BaseException] = Interrupted) -> None:
    """Acquire ``name`` through the proxy; ``SIGALRM`` raises :class:`Interrupted`, and ``then``
    when it comes again (after writing a byte to ``told``).  Reports "ready" once warmed up, then
    the acquire's outcome."""
    alarms = []

    def on_alarm(signum: int, frame: Any) -> None:
        os.write(told, b"!")
        alarms.append(signum)
        raise (Interrupted if len(alarms) == 1 else then)("the alarm went off")

    signal.signal(signal.SIGALRM, on_alarm)
    client = redis.Redis.from_url(proxy_url)
    primitive = _make(kind, client, name)
    warm = _make(kind, client, name + ":warm")
    assert _acquire(kind, warm)  # the scripts are loaded: the interrupted call runs at once
    _release(kind, warm)
    if contended:
        # Found taken: the waiting connection is subscribed, and the next acquire queues in its
        # first call (the one interrupted), with no try before it.
        assert not _acquire(kind, primitive, blocking_timeout=0.2)
    control.send("ready")
    control.recv()
    try:
        outcome = "acquired" if _acquire(kind, primitive) else "refused"
    except Interrupted:
        outcome = "interrupted"
    except KeyboardInterrupt:
        outcome = "stopped"
    control.send(outcome)
    control.recv()  # stays alive (its waiting connection too) until the test has looked


def _waiter(kind: str, url: str, name: str, control: Any) -> None:
    """A live waiter behind the interrupted one: reports whether it got the hold."""
    client = redis.Redis.from_url(url)
    primitive = _make(kind, client, name)
    control.send("acquired" if _acquire(kind, primitive) else "refused")
    control.recv()


def _until(check: Callable[[], Any], what: str, seconds: float = WAIT) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)


def _receive(control: Any, seconds: float = WAIT) -> Any:
    if not control.poll(seconds):
        raise AssertionError("a child process did not answer")
    return control.recv()


def _interrupt_in_flight(kind: str, redis_server: Any, redis_client: Any, name: str, contended: bool,
                         ran: Callable[[], bool], before_signal: Callable[[], None] = lambda: None,
                         again: bool = False, then: type[BaseException] = Interrupted) -> Any:
    """Run :func:`_interrupted_acquirer`, hold the replies of its acquire, wait until ``ran()``
    (the script's effect is in Redis), call ``before_signal``, then send ``SIGALRM``; with
    ``again``, once more while the undo's first call waits for its reply (also held back).
    ``then``: what the second alarm raises.  Returns the control end of the acquirer, once it
    reported "interrupted" ("stopped": a ``KeyboardInterrupt`` ended it)."""
    proxy = Proxy("127.0.0.1", redis_server.port).start()
    told_read, told_write = os.pipe()
    ours, theirs = CTX.Pipe()
    child = CTX.Process(target=_interrupted_acquirer,
                        args=(kind, f"redis://127.0.0.1:{proxy.port}/0", name, contended, told_write, theirs, then))
    child.start()
    try:
        assert _receive(ours) == "ready"
        proxy.hold_replies()
        ours.send("go")
        _until(ran, "the acquire script ran")
        before_signal()
        opened = proxy.connections
        os.kill(child.pid, signal.SIGALRM)
        assert select.select([told_read], [], [], WAIT)[0], "the signal handler did not run"
        os.read(told_read, 1)
        if again:
            _until(lambda: proxy.connections > opened, "the undo opened a connection")
            os.kill(child.pid, signal.SIGALRM)
            assert select.select([told_read], [], [], WAIT)[0], "the signal handler did not run again"
        proxy.release_replies()  # the undo goes through the proxy too
        # A KeyboardInterrupt that came during the undo still stops the caller, once it is over.
        assert _receive(ours) == ("stopped" if then is KeyboardInterrupt else "interrupted")
        return ours, child
    except BaseException:
        child.kill()
        raise
    finally:
        os.close(told_read)
        os.close(told_write)
        proxy.release_replies()
        _stop_later.append(proxy)


_stop_later: list[Proxy] = []


@pytest.fixture(autouse=True)
def _proxies():
    yield
    while _stop_later:
        _stop_later.pop().stop()


def _end(control: Any, process: Any) -> None:
    control.send("end")
    process.join(WAIT)


KINDS = ["lock", "semaphore", "rwlock"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_exception_while_a_first_try_reply_is_in_flight_leaves_the_name_free(kind, redis_server, redis_client):
    """(a) A free name: the script granted it, its reply never arrived.  The grant is given back
    before the exception reaches the caller: the next acquirer gets the name at once."""
    name = f"interrupted-first-{kind}"
    primitive = _make(kind, redis_client, name)
    control, child = _interrupt_in_flight(kind, redis_server, redis_client, name, contended=False,
                                          ran=lambda: _held(kind, redis_client, primitive))
    try:
        assert not _held(kind, redis_client, primitive), "the interrupted grant was left in Redis"
        assert _acquire(kind, _make(kind, redis_client, name), blocking_timeout=0)
    finally:
        _end(control, child)


@pytest.mark.parametrize(("kind", "then"), [("lock", Interrupted), ("semaphore", Interrupted),
                                            ("lock", KeyboardInterrupt)])
def test_a_second_signal_during_the_undo_does_not_leave_the_grant(kind, then, redis_server, redis_client):
    """The signal comes again while the undo's call waits for its reply: the undo is tried again
    (it is one script, safe to run twice), and the grant is not left behind.  A KeyboardInterrupt
    raised then reaches the caller once the undo is over."""
    name = f"interrupted-twice-{kind}-{then.__name__}"
    primitive = _make(kind, redis_client, name)
    control, child = _interrupt_in_flight(kind, redis_server, redis_client, name, contended=False,
                                          ran=lambda: _held(kind, redis_client, primitive), again=True, then=then)
    try:
        assert not _held(kind, redis_client, primitive), "the interrupted grant was left in Redis"
        assert _acquire(kind, _make(kind, redis_client, name), blocking_timeout=0)
    finally:
        _end(control, child)


@pytest.mark.parametrize("kind", KINDS)
def test_an_exception_while_the_queueing_call_is_in_flight_leaves_the_queue(kind, redis_server, redis_client):
    """(b) A taken name: the script queued the caller, its reply never arrived.  The caller leaves
    the queue before the exception reaches it: the next release hands the hold to the live waiter
    behind it, not to the one that left (which would stall it for two waiter leases)."""
    name = f"interrupted-queued-{kind}"
    holder = _make(kind, redis_client, name)
    assert _acquire(kind, holder, blocking_timeout=0)
    queue = holder.keys.queue
    ours, theirs = CTX.Pipe()
    waiter = CTX.Process(target=_waiter, args=(kind, redis_server.url, name, theirs))

    def live_waiter_behind() -> None:
        waiter.start()
        _until(lambda: redis_client.zcard(queue) == 2, "the live waiter queued")

    control, child = _interrupt_in_flight(kind, redis_server, redis_client, name, contended=True,
                                          ran=lambda: redis_client.zcard(queue) == 1,
                                          before_signal=live_waiter_behind)
    try:
        assert redis_client.zcard(queue) == 1, "the interrupted waiter was left in the queue"
        _release(kind, holder)  # hands the hold over in this very call
        assert _holder_pids(kind, redis_client, holder) == [waiter.pid]
        assert _receive(ours) == "acquired"
    finally:
        _end(control, child)
        if waiter.is_alive():
            _end(ours, waiter)


# -- asyncio -----------------------------------------------------------------------------------------
def _make_async(kind: str, client: Any, name: str) -> Any:
    if kind == "lock":
        return AsyncLock(client, name, timeout=WAIT)
    if kind == "semaphore":
        return AsyncSemaphore(client, name, limit=1, timeout=WAIT)
    return AsyncReadWriteLock(client, name, timeout=WAIT)


async def _acquire_async(kind: str, primitive: Any, blocking_timeout: float = WAIT) -> bool:
    if kind == "rwlock":
        return await primitive.write.acquire(blocking=True, blocking_timeout=blocking_timeout)
    return await primitive.acquire(blocking=True, blocking_timeout=blocking_timeout)


async def _release_async(kind: str, primitive: Any) -> None:
    if kind == "rwlock":
        await primitive.write.release()
    else:
        await primitive.release()


async def _until_async(check: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.005)


class _RaisingReplies(redis.asyncio.Connection):
    """Raises :class:`Interrupted` once armed, as the reply of a script call arrives (it is read
    first, so the connection stays usable): what any exception raised at that await does."""

    armed = False
    script_sent = False

    async def send_command(self, *args: Any, **kwargs: Any) -> None:
        self.script_sent = str(args[0]).upper() == "EVALSHA"
        await super().send_command(*args, **kwargs)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        reply = await super().read_response(*args, **kwargs)
        if _RaisingReplies.armed and self.script_sent:
            _RaisingReplies.armed = False
            raise Interrupted("raised while the reply was read")
        return reply


def _async_scenario(kind: str, redis_server: Any, contended: bool, how: str) -> None:
    """An asyncio acquire stopped once its script ran: cancelled while the proxy holds its reply
    back (``how`` "cancel"), or an exception raised as its reply arrives ("raise").  Then nothing
    of it is left: no grant, no place in the queue."""
    name = f"async-{how}-{'queued' if contended else 'first'}-{kind}"

    async def scenario() -> None:
        observer = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        await observer.delete(name)
        proxy = Proxy("127.0.0.1", redis_server.port).start()
        try:
            if how == "cancel":
                client = redis.asyncio.Redis.from_url(proxy.url)
            else:
                client = redis.asyncio.Redis.from_url(redis_server.url, connection_class=_RaisingReplies)
            primitive = _make_async(kind, client, name)
            warm = _make_async(kind, client, name + ":warm")
            assert await _acquire_async(kind, warm)  # the scripts are loaded
            await _release_async(kind, warm)
            holder = _make_async(kind, observer, name)
            queue = holder.keys.queue
            if contended:
                assert await _acquire_async(kind, holder, blocking_timeout=0)
                assert not await _acquire_async(kind, primitive, blocking_timeout=0.2)  # queues in one call next

                async def ran() -> bool:
                    return await observer.zcard(queue) == 1
            else:
                async def ran() -> bool:
                    return await observer.exists(holder.keys.name) == 1
            if how == "cancel":
                proxy.hold_replies()
                task = asyncio.ensure_future(_acquire_async(kind, primitive))
                await _until_async(ran, "the acquire script ran")
                task.cancel()
                proxy.release_replies()  # the undo goes through the proxy too
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                _RaisingReplies.armed = True
                with pytest.raises(Interrupted):
                    await _acquire_async(kind, primitive)
            # The undo ran to its end before the error reached the caller.
            if contended:
                assert await observer.zcard(queue) == 0, "the waiter that left was kept in the queue"
                await _release_async(kind, holder)
                assert await observer.exists(holder.keys.name) == 0, "the release handed the hold to a waiter that left"
            else:
                assert await observer.exists(holder.keys.name) == 0, "the grant was left in Redis"
            await client.aclose()
        finally:
            _RaisingReplies.armed = False
            proxy.stop()
            await observer.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("how", ["cancel", "raise"])
@pytest.mark.parametrize("contended", [False, True], ids=["first-try", "queueing-call"])
@pytest.mark.parametrize("kind", KINDS)
def test_an_asyncio_acquire_stopped_while_its_reply_is_in_flight_leaves_nothing(kind, contended, how, redis_server):
    _async_scenario(kind, redis_server, contended, how)
