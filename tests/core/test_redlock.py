"""Redlock over independent masters: quorum, validity, failures, fences, watchdog, several processes."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError, LockNotOwnedError

from django_redis_coord import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    Lock,
    LockAcquireTimeout,
    LockLostError,
    lock_holder,
)
from django_redis_coord import Redlock as LazyRedlock
from django_redis_coord.asyncio import Redlock as AsyncRedlock
from django_redis_coord.core.keys import keys_for
from django_redis_coord.core.redlock.sync import QuorumUnavailable, Redlock
from django_redis_coord.testing.server import RedisServer
from tests.support.procs import run_processes

# Each master gets tens to hundreds of milliseconds (node_timeout, the validity left of a sub-second
# TTL), as Redlock intends: beside three busy workers the masters were not asked in time, so these
# run alone (tests/README.md).
pytestmark = pytest.mark.serial

@pytest.fixture(autouse=True)
def patient_masters(monkeypatch):
    """The default time a master gets to answer (0.1 s, from a new connection too) is not what
    these tests are about, and a loaded CI machine can miss it: it is 1 s here.  The tests of the
    budget pass their own ``node_timeout``."""
    from django_redis_coord.core.redlock import rules as _redlock_base

    monkeypatch.setattr(_redlock_base, "DEFAULT_NODE_TIMEOUT", 1.0)


@pytest.fixture(scope="module")
def five():
    """Five independent masters shared by the tests that do not kill or pause them."""
    servers = [RedisServer().start() for _ in range(5)]
    yield servers
    for server in servers:
        server.cleanup()


@pytest.fixture
def masters(five):
    clients = [server.client(socket_timeout=2) for server in five]
    for client in clients:
        client.flushall()
    yield clients
    for client in clients:
        client.close()


def holders_of(clients, name):
    return [client.get(name) for client in clients]


def test_the_package_serves_redlock_lazily():
    assert LazyRedlock is Redlock


def test_acquire_release_on_three_masters(masters):
    three = masters[:3]
    lock = Redlock(three, "invoices", timeout=10)
    assert lock.quorum == 2
    assert lock.acquire(blocking=False)
    token = lock.local.token
    assert holders_of(three, "invoices") == [token] * 3
    assert masters[3].get("invoices") is None  # not one of this lock's masters
    assert lock.owned() and lock.locked() and lock.valid
    # Validity = TTL - elapsed - drift (1% of the TTL + 2 ms), from before the requests went out.
    assert 10 - 0.102 - 1.0 < lock.deadline - time.monotonic() < 10 - 0.102
    for client in three:
        assert 9000 < client.pttl("invoices") <= 10000
    lock.release()
    assert holders_of(three, "invoices") == [None] * 3
    assert not lock.locked() and not lock.owned()


def test_quorum_of_five_and_the_masters_agree_on_the_fence(masters):
    # A generous node timeout: this is about the quorum and the fences, not the latency of five
    # masters on a busy machine (the first exchange on each new connection also loads the scripts).
    lock = Redlock(masters, "five", timeout=5, node_timeout=1.0)
    assert lock.quorum == 3
    with lock:
        fences = [lock_holder(client, "five").fence for client in masters]
        # Every master that granted the hold records the Redlock's fence: the largest they issued.
        assert fences == [lock.fence] * 5
    assert holders_of(masters, "five") == [None] * 5


def test_a_busy_lock_refuses_and_a_partial_attempt_is_undone(masters):
    three = masters[:3]
    holder = Redlock(three[:2] + [masters[3]], "busy", timeout=10)  # holds masters 0 and 1
    assert holder.acquire()
    other = Redlock(three, "busy", timeout=10)
    assert other.acquire(blocking=False) is False
    # The attempt was granted on master 2 alone (not a quorum) and was given back there.
    assert three[2].get("busy") is None
    started = time.monotonic()
    assert other.acquire(blocking_timeout=0.3) is False
    assert 0.3 <= time.monotonic() - started < 1.5
    with pytest.raises(LockAcquireTimeout):
        with Redlock(three, "busy", timeout=10, blocking_timeout=0.05):
            pass
    holder.release()
    assert other.acquire(blocking=False)
    other.release()


def test_a_blocked_acquire_gets_the_lock_soon_after_the_release(masters):
    three = masters[:3]
    holder = Redlock(three, "handover", timeout=10)
    holder.acquire()
    waiter = Redlock(three, "handover", timeout=10, sleep=0.1)
    result = {}

    def wait() -> None:
        result["acquired"] = waiter.acquire(blocking_timeout=5)
        result["at"] = time.monotonic()
        result["fence"] = waiter.fence

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.3)
    released_at = time.monotonic()
    first_fence = holder.fence
    holder.release()
    thread.join(10)
    assert result["acquired"]
    # Random retry delay of at most `sleep` (0.1 s) plus one round: generous bound.
    assert result["at"] - released_at < 1.0
    assert result["fence"] > first_fence


def test_the_largest_fence_wins_and_every_granting_master_records_it(masters):
    three = masters[:3]
    meta = keys_for(b"ahead").meta
    # Master 2 issued far larger fences for this name before (a clock running ahead, say).
    ahead = int(three[2].time()[0]) * 1_000_000 + 10**12
    three[2].hset(meta, "fence", ahead)
    with Redlock(three, "ahead", timeout=5) as lock:
        assert lock.fence == ahead + 1
        assert [int(client.hget(meta, "fence")) for client in three] == [ahead + 1] * 3
    # The next holder gets a larger fence even from masters 0 and 1 alone (master 2 is busy).
    squatter = Lock(three[2], "ahead", timeout=5)
    squatter.acquire()
    with Redlock(three, "ahead", timeout=5) as lock:
        assert three[2].get("ahead") == squatter.local.token
        assert lock.fence > ahead + 1
    squatter.release()


def test_fences_grow_across_holders_and_clients(masters, five):
    three = masters[:3]
    fresh = [server.client() for server in five[:3]]  # other clients (and connections) of the same masters
    fences = []
    for index in range(12):
        with Redlock(three if index % 2 else fresh, "fenced", timeout=5) as lock:
            fences.append(lock.fence)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_extend_needs_a_quorum_and_repairs_a_master_that_lost_the_hold(masters):
    three = masters[:3]
    lock = Redlock(three, "ext", timeout=2)
    lock.acquire()
    fence = lock.fence
    before = lock.deadline
    three[0].delete("ext")  # as after a restart of master 0
    assert lock.extend(10)
    assert lock.deadline > before + 5
    # Master 0 was given the hold back; its fence counter is not behind the Redlock's fence.
    assert three[0].get("ext") == lock.local.token
    assert lock_holder(three[0], "ext").fence >= fence
    assert 9000 < three[1].pttl("ext") <= 12000
    assert lock.extend(1, replace_ttl=True)
    assert all(0 < client.pttl("ext") <= 1000 for client in three)
    assert lock.reacquire()
    assert all(1000 < client.pttl("ext") <= 2000 for client in three)
    three[0].delete("ext")
    three[1].delete("ext")
    with pytest.raises(LockNotOwnedError):
        lock.extend(1)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    with pytest.raises(LockError):
        lock.extend(1)  # no hold any more


def test_validity_runs_out_without_renewal(masters):
    lock = Redlock(masters[:3], "short", timeout=0.3)
    lock.acquire()
    assert lock.valid
    lock.ensure_valid()
    time.sleep(0.35)
    assert not lock.valid
    with pytest.raises(LockLostError):
        lock.ensure_valid()
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_clients_that_decode_responses(five, masters):
    clients = [server.client(decode_responses=True) for server in five[:3]]
    lock = Redlock(clients, "decoded", timeout=5, label="é")
    with lock:
        assert lock.owned() and lock.locked() and lock.fence > 0
        assert clients[0].get("decoded") == lock.local.token.decode()
        assert lock_holder(masters[0], "decoded").label == "é"
        assert lock.extend(1)
    assert not lock.locked()


def test_a_with_block_that_outlives_its_lease(masters, caplog):
    # Each master gets the longest node_timeout the TTL allows (a quarter): the acquire must not be
    # the part a loaded machine makes late (0.02 s, a tenth of a 0.2 s TTL, was).
    with pytest.raises(LockNotOwnedError):
        with Redlock(masters[:3], "outlived", timeout=1.2, node_timeout=0.3):
            time.sleep(1.5)
    with Redlock(masters[:3], "outlived", timeout=1.2, node_timeout=0.3, raise_on_release_error=False):
        time.sleep(1.5)
    assert "no longer owned" in caplog.text


def test_the_watchdog_renews_on_all_masters(masters):
    three = masters[:3]
    lost = []
    # Each renewal must hear from a quorum within node_timeout: the longest a TTL allows (a quarter).
    lock = Redlock(three, "renewed", timeout=1.2, node_timeout=0.3, auto_renew=True, on_lost=lost.append)
    lock.acquire()
    fence = lock.fence
    time.sleep(3.6)
    assert lock.valid and lock.owned() and not lost
    assert all(0 < client.pttl("renewed") <= 1200 for client in three)
    assert lock.fence == fence
    lock.release()
    assert holders_of(three, "renewed") == [None] * 3


def test_threads_sharing_an_instance_hold_separately(masters):
    lock = Redlock(masters[:3], "threads", timeout=5)
    lock.acquire()
    seen = {}

    def other() -> None:
        seen["token"] = lock.local.token
        seen["acquired"] = lock.acquire(blocking=False)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == {"token": None, "acquired": False}
    with pytest.raises(LockError):
        lock.acquire()  # this thread already holds it
    lock.release()


BAD = [
    (lambda m: ([], "x"), {}, InvalidLockArgument),
    (lambda m: ([m[0], m[0]], "x"), {}, InvalidLockArgument),
    (lambda m: ("redis://localhost", "x"), {}, InvalidLockArgumentType),
    (lambda m: ([object()], "x"), {}, InvalidLockArgumentType),
    (lambda m: (m[:3], ""), {}, InvalidLockArgument),
    (lambda m: (m[:3], "a:dcoord:b"), {}, InvalidLockArgument),
    (lambda m: (m[:3], "x"), {"timeout": None}, InvalidLockArgumentType),
    (lambda m: (m[:3], "x"), {"timeout": 0}, InvalidLockArgument),
    (lambda m: (m[:3], "x"), {"timeout": 1, "node_timeout": 0.5}, InvalidLockArgument),
    (lambda m: (m[:3], "x"), {"node_timeout": -1}, InvalidLockArgument),
    (lambda m: (m[:3], "x"), {"blocking_timeout": "soon"}, InvalidLockArgumentType),
]


@pytest.mark.parametrize("positional,kwargs,error", BAD)
def test_bad_arguments_are_typed_errors_and_write_nothing(masters, positional, kwargs, error):
    with pytest.raises(error) as info:
        Redlock(*positional(masters), **kwargs).acquire()
    assert isinstance(info.value, LockError)
    assert all(client.dbsize() == 0 for client in masters)


# -- failures -------------------------------------------------------------------------------------
def test_one_of_three_masters_down_still_acquires(redis_servers):
    servers = redis_servers(3)
    clients = [server.client() for server in servers]
    servers[0].kill()
    lock = Redlock(clients, "degraded", timeout=5, node_timeout=0.2)
    started = time.monotonic()
    assert lock.acquire(blocking=False)
    assert time.monotonic() - started < 1.0  # a refused connection costs nothing like redis-py's back-off
    assert holders_of(clients[1:], "degraded") == [lock.local.token] * 2
    lock.release()
    assert holders_of(clients[1:], "degraded") == [None] * 2


def test_two_of_three_down_fails_within_the_per_master_budget(redis_servers):
    servers = redis_servers(3)
    clients = [server.client() for server in servers]
    servers[0].kill()
    servers[1].pause()  # accepts connections, never answers
    lock = Redlock(clients, "unreachable", timeout=5, node_timeout=0.2)
    for blocking in (False, True):
        started = time.monotonic()
        with pytest.raises(QuorumUnavailable) as info:
            lock.acquire(blocking=blocking, blocking_timeout=10)
        elapsed = time.monotonic() - started
        # One round plus the undo round, each bounded by node_timeout (generous slack).
        assert elapsed < 2 * 0.2 + 0.8, elapsed
        error = info.value
        assert isinstance(error, LockError) and isinstance(error, RedisConnectionError)
        assert set(error.failures) == {f"127.0.0.1:{servers[0].port}", f"127.0.0.1:{servers[1].port}"}, str(error)
        assert "only 1 of 3 masters answered" in str(error)
    # Nothing is left on the master that answered: the attempt was undone.
    assert clients[2].get("unreachable") is None
    servers[1].resume()


def test_requests_go_to_all_masters_at_once(redis_servers):
    servers = redis_servers(5)
    clients = [server.client() for server in servers]
    node_timeout = 1.0
    lock = Redlock(clients, "parallel", timeout=10, node_timeout=node_timeout)
    lock.acquire()
    lock.release()
    servers[0].pause()
    servers[1].pause()
    started = time.monotonic()
    assert lock.acquire(blocking=False)
    elapsed = time.monotonic() - started
    # Two silent masters cost one node_timeout together; one after the other, two.
    assert node_timeout <= elapsed < 2 * node_timeout, elapsed
    lock.release()
    servers[0].resume()
    servers[1].resume()


def test_a_master_restarted_mid_hold(redis_servers):
    servers = redis_servers(3)
    clients = [server.client() for server in servers]
    holder = Redlock(clients, "restart", timeout=10, node_timeout=0.2)
    holder.acquire()
    first_fence = holder.fence
    servers[0].restart()  # SIGKILL, no persistence: master 0 forgot the hold
    assert clients[0].get("restart") is None
    rival = Redlock(clients, "restart", timeout=10, node_timeout=0.2)
    assert rival.acquire(blocking=False) is False  # master 0 alone is no quorum
    assert clients[0].get("restart") is None  # and the rival gave it back
    assert holder.owned() and holder.valid
    assert holder.extend(5)  # renewed on the quorum; master 0 takes the hold again
    assert clients[0].get("restart") == holder.local.token
    assert lock_holder(clients[0], "restart").fence >= first_fence
    holder.release()
    assert holders_of(clients, "restart") == [None] * 3
    assert rival.acquire(blocking=False)
    assert rival.fence > first_fence
    rival.release()


def test_loss_is_signalled_when_the_quorum_cannot_be_renewed(redis_servers):
    servers = redis_servers(3)
    clients = [server.client() for server in servers]
    lost = threading.Event()
    lock = Redlock(clients, "losing", timeout=0.6, node_timeout=0.05, auto_renew=True,
                   on_lost=lambda _lock: lost.set())
    lock.acquire()
    servers[0].pause()
    servers[1].pause()
    assert lost.wait(3)
    assert not lock.valid
    with pytest.raises(LockLostError):
        lock.ensure_valid()
    servers[0].resume()
    servers[1].resume()


@pytest.fixture
def silent_master():
    """A master that accepts TCP connections (the kernel does) and never answers anything."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    clients = []

    def make(async_client: bool = False):
        module = redis.asyncio if async_client else redis
        client = module.Redis(host="127.0.0.1", port=listener.getsockname()[1])
        clients.append(client)
        return client

    yield make
    listener.close()


def test_a_master_that_never_answers_counts_as_failed_within_node_timeout(redis_servers, silent_master):
    servers = redis_servers(2)
    live = [server.client() for server in servers]
    silent = silent_master()
    lock = Redlock([silent, *live], "silent", timeout=5, node_timeout=0.2)
    started = time.monotonic()
    assert lock.acquire(blocking=False)  # the two live masters are a quorum
    assert time.monotonic() - started < 0.2 + 0.5
    assert holders_of(live, "silent") == [lock.local.token] * 2
    lock.release()
    lonely = Redlock([silent_master(), silent_master(), live[0]], "silent", timeout=5, node_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(QuorumUnavailable) as info:
        lonely.acquire(blocking=False)
    assert time.monotonic() - started < 2 * 0.2 + 0.5  # the attempt and its undo
    assert "only 1 of 3 masters answered" in str(info.value)
    assert live[0].get("silent") is None  # undone


def test_scripts_flushed_on_the_masters_are_loaded_again(masters):
    three = masters[:3]
    lock = Redlock(three, "flushed", timeout=10)
    assert lock.acquire(blocking=False)
    for client in three:
        client.script_flush()
    assert lock.extend(5)  # NOSCRIPT everywhere: loaded, then run, in one more round
    assert lock.owned()
    lock.release()
    assert holders_of(three, "flushed") == [None] * 3
    three[1].script_flush()
    assert lock.acquire(blocking=False)  # one master without the scripts
    assert holders_of(three, "flushed") == [lock.local.token] * 3
    lock.release()


def _use_inherited(lock: Redlock) -> tuple[bool, bool]:
    """In a forked child: the parent's Redlock instance, clients and connections."""
    acquired = lock.acquire(blocking_timeout=5)
    owned = lock.owned()
    lock.release()
    return acquired, owned


def test_a_forked_child_uses_the_parents_redlock(masters):
    three = masters[:3]
    lock = Redlock(three, "forked", timeout=10, node_timeout=0.5)
    with lock:  # the parent's connections and threads exist before the fork
        pass
    assert run_processes(_use_inherited, [(lock,)] * 2, timeout=60) == [(True, True)] * 2
    with lock:  # and the parent goes on with its own
        assert holders_of(three, "forked") == [lock.local.token] * 3
    assert holders_of(three, "forked") == [None] * 3


# -- several processes --------------------------------------------------------------------------
def _contend(urls: list[str], counter_url: str, rounds: int) -> list[tuple[int, int, int]]:
    clients = [redis.Redis.from_url(url) for url in urls]
    counter = redis.Redis.from_url(counter_url)
    spans = []
    for _ in range(rounds):
        lock = Redlock(clients, "shared", timeout=10, sleep=0.02, node_timeout=0.5)
        assert lock.acquire(blocking_timeout=30)
        start = time.monotonic_ns()
        value = int(counter.get("counter") or 0)  # unprotected read-modify-write
        time.sleep(0.001)
        counter.set("counter", value + 1)
        end = time.monotonic_ns()
        spans.append((start, end, lock.fence))
        lock.release()
    return spans


def test_mutual_exclusion_and_fence_order_across_processes(masters, five):
    urls = [server.url for server in five[:3]]
    results = run_processes(_contend, [(urls, five[4].url, 15)] * 3, timeout=120)
    spans = sorted(span for result in results for span in result)
    assert len(spans) == 45
    for earlier, later in zip(spans, spans[1:]):
        assert earlier[1] <= later[0], "two processes held the Redlock at the same time"
        assert earlier[2] < later[2], "fences must grow in grant order"
    assert int(masters[4].get("counter")) == 45


# -- asyncio ------------------------------------------------------------------------------------------
def test_asyncio_twin(five):
    async def main() -> None:
        clients = [server.async_client() for server in five[:3]]
        for client in clients:
            await client.flushall()
        lock = AsyncRedlock(clients, "aio", timeout=5)
        async with lock:
            token = lock.local.token
            assert [await client.get("aio") for client in clients] == [token] * 3
            assert await lock.owned() and await lock.locked()
            assert lock.valid and lock.fence > 0
            other = AsyncRedlock(clients, "aio", timeout=5)
            assert await other.acquire(blocking=False) is False
            assert await other.acquire(blocking_timeout=0.2) is False
            assert await lock.extend(5)
            assert all(5000 < pttl <= 10000 for pttl in [await client.pttl("aio") for client in clients])
        assert [await client.get("aio") for client in clients] == [None] * 3
        # Every acquire and renewal must hear from a quorum within node_timeout (a tenth of the TTL
        # by default: 40 ms for 0.4 s, which a loaded machine misses); the longest node_timeout a
        # TTL allows (a quarter of it), and three TTLs slept through.
        renewed = AsyncRedlock(clients, "aio-renewed", timeout=1.2, node_timeout=0.3, auto_renew=True)
        await renewed.acquire()
        await asyncio.sleep(3.6)
        assert renewed.valid and await renewed.owned()
        await renewed.release()
        for client in clients:
            await client.aclose()

    asyncio.run(main())


def test_asyncio_tasks_hold_separately_and_cancellation_leaves_nothing(five):
    async def main() -> None:
        clients = [server.async_client() for server in five[:3]]
        for client in clients:
            await client.flushall()
        lock = AsyncRedlock(clients, "tasks", timeout=5, sleep=0.05)
        await lock.acquire()

        async def other_task() -> bool:
            assert lock.local.token is None
            return await lock.acquire(blocking=False)

        assert await asyncio.create_task(other_task()) is False
        waiter = AsyncRedlock(clients, "tasks", timeout=5, sleep=0.05)
        task = asyncio.create_task(waiter.acquire())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await lock.release()
        assert [await client.get("tasks") for client in clients] == [None] * 3
        for client in clients:
            await client.aclose()

    asyncio.run(main())


def test_asyncio_failures(redis_servers):
    servers = redis_servers(3)

    async def main() -> None:
        clients = [server.async_client() for server in servers]
        servers[0].kill()
        lock = AsyncRedlock(clients, "aio-down", timeout=5, node_timeout=0.2)
        assert await lock.acquire(blocking=False)
        await lock.release()
        servers[1].pause()
        started = time.monotonic()
        with pytest.raises(QuorumUnavailable):
            await lock.acquire()
        assert time.monotonic() - started < 2 * 0.2 + 0.8
        servers[1].resume()
        for client in clients:
            await client.aclose()

    asyncio.run(main())


def test_asyncio_masters_that_never_answer_and_flushed_scripts(redis_servers, silent_master):
    servers = redis_servers(2)

    async def main() -> None:
        live = [server.async_client() for server in servers]
        lock = AsyncRedlock([silent_master(async_client=True), *live], "aio-silent", timeout=5, node_timeout=0.2)
        started = time.monotonic()
        assert await lock.acquire(blocking=False)
        assert time.monotonic() - started < 0.2 + 0.5
        for client in live:
            await client.script_flush()
        assert await lock.extend(5)  # NOSCRIPT: loaded again, then run
        assert [await client.get("aio-silent") for client in live] == [lock.local.hold.token] * 2
        await lock.release()
        lonely = AsyncRedlock([silent_master(async_client=True), silent_master(async_client=True), live[0]],
                              "aio-silent", timeout=5, node_timeout=0.2)
        started = time.monotonic()
        with pytest.raises(QuorumUnavailable):
            await lonely.acquire(blocking=False)
        assert time.monotonic() - started < 2 * 0.2 + 0.5
        assert await live[0].get("aio-silent") is None
        for client in live:
            await client.aclose()

    asyncio.run(main())


def test_the_benchmark_module_runs_with_tiny_sizes(redis_servers, tmp_path):
    from benchmarks import bench_redlock
    from benchmarks.common import Context

    (server,) = redis_servers(1)
    ctx = Context(server, quick=True, results_dir=tmp_path, verbose=False)
    try:
        section = bench_redlock.run(ctx, sizes=bench_redlock.Sizes(pair_seconds=0.1, rounds=1, failure_trials=1))
    finally:
        ctx.close()
    for lib in bench_redlock.LIBS:
        assert section.figures[f"pairs_per_s.{lib}"] > 0
    assert section.figures["fail_ms.p50"] > 0
    assert {check.label for check in section.checks} == {
        "ours >= 2x pottery (same 3 masters)",
        "2 of 3 down fails within 2 x node_timeout + 50 ms (p50)",
    }


def test_masters_from_settings(five, masters, settings):
    from django.core.exceptions import ImproperlyConfigured

    from django_redis_coord.config.connection import get_async_redlock_masters, get_redlock_masters

    settings.DJANGO_REDIS_COORD = {"URL": settings.REDIS_URL}
    with pytest.raises(ImproperlyConfigured):
        get_redlock_masters()
    settings.DJANGO_REDIS_COORD = {"URL": settings.REDIS_URL, "REDLOCK": {"MASTERS": [s.url for s in five[:3]]}}
    clients = get_redlock_masters()
    assert clients is get_redlock_masters()  # built once per process
    assert [c.connection_pool.connection_kwargs["port"] for c in clients] == [s.port for s in five[:3]]
    # What is checked is the clients the settings give; a master's first answer includes its
    # connection and script load, which a loaded machine can stretch past the default 0.5 s.
    with Redlock(clients, "configured", timeout=20, node_timeout=2) as lock:
        assert holders_of(masters[:3], "configured") == [lock.local.token] * 3

    async def main() -> None:
        async_clients = get_async_redlock_masters()
        async with AsyncRedlock(async_clients, "configured-aio", timeout=20, node_timeout=2) as held:
            assert holders_of(masters[:3], "configured-aio") == [held.local.token] * 3
        for client in async_clients:
            await client.aclose()

    asyncio.run(main())
