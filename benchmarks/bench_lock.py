"""Lock: uncontended speed, contention, many waiters in one process, crash-expiry and handoff, beside the peers.

Libraries compared (each on its own key of the one private redis-server, measured in the same run:
the targets are ratios to the best peer of that run, as this shared machine's speed varies):

* ``raw`` — the floor: ``SET name token NX PX`` and a Lua compare-and-delete by EVALSHA; under
  contention it polls every 0.5 ms;
* ``redis-py`` — ``redis.lock.Lock`` (polls every ``sleep`` = 0.1 s; ``redis-py 1ms`` polls every 1 ms;
  ``redis-py asyncio`` is ``redis.asyncio.lock.Lock``, sleep 0.1 s);
* ``python-redis-lock`` — ``redis_lock.Lock`` (SET NX EX; a waiter blocks in BLPOP, on a connection
  of its own, on a signal list pushed on release);
* ``pottery`` — ``pottery.Redlock`` with one master (retries after a random 0–0.2 s);
* ``ours`` — ``django_redis_coord.Lock`` (``ours asyncio``: ``django_redis_coord.asyncio.Lock``): a FIFO
  queue in Redis, and the release script hands the lock to the queue head and PUBLISHes the grant
  to the channel of the waiter's process, where one subscribed connection per connection pool
  (the process's wait hub) wakes that waiter alone;
* ``ours base`` (contention only, when ``BENCH_LOCK_BASE`` names a checkout of an earlier version,
  e.g. ``git archive fcd75c0 | tar -x -C /tmp/base``) — that version's ``django_redis_coord.Lock``,
  imported in the contending processes in place of ours: a before/after in the same run;
* ``ceiling`` (contention only) — not a lock: one token passed around through one Redis list, ``BLPOP``
  to take it and ``RPUSH`` to give it back, over raw sockets with no client library.  No expiry,
  fence, holder record or queue state: the most held time any Redis-based lock can reach on the
  machine the benchmark runs on.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import statistics
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from benchmarks.common import (
    FORK,
    PAIR_BLOCK,
    PAIR_SLICE,
    CommandMonitor,
    Context,
    Section,
    commands_delta,
    commandstats,
    connection_counts,
    counting_client,
    held_fraction,
    interleaved_pairs,
    overlaps,
    percentile,
    placement_round_trips,
    run_workers,
    sent_commands,
    sleep_until_ns,
)

ALL = ("raw", "redis-py", "python-redis-lock", "pottery", "ours")
CONTENDERS = ("raw", "redis-py", "redis-py 1ms", "python-redis-lock", "pottery", "ours", "ceiling")
#: A checkout of an earlier version of the library, whose Lock contends as ``ours base``.
BASE_PATH = os.environ.get("BENCH_LOCK_BASE", "")
BASE = "ours base"
#: Contention references, not libraries: no uncontended, expiry or handoff runs.
REFERENCES = ("ceiling",)
#: The peers: the contention targets are ratios to the best of them in the same run (``raw`` and
#: ``ceiling`` are references, shown beside them).
PEERS = ("redis-py", "redis-py 1ms", "python-redis-lock", "pottery")
#: Many waiters in one process: threads for the sync libraries, asyncio tasks for ``ASYNC_LIBS``.
MANY_LIBS = ("redis-py", "redis-py 1ms", "python-redis-lock", "ours", "redis-py asyncio", "ours asyncio")
ASYNC_LIBS = ("redis-py asyncio", "ours asyncio")
#: The lock's TTL in the many-waiters runs (s): each waiter's hold, and the holder's on top of the
#: run's time limit (a thousand threads polling every 1 ms can take over 10 s to all be waiting).
MANY_TTL = 10.0
DESCRIPTIONS = {
    "raw": "SET NX PX + Lua compare-and-delete (polls 0.5 ms when contended)",
    "redis-py": "redis.lock.Lock, sleep=0.1 (default)",
    "redis-py 1ms": "redis.lock.Lock, sleep=0.001",
    "redis-py asyncio": "redis.asyncio.lock.Lock, sleep=0.1 (default)",
    "python-redis-lock": "redis_lock.Lock (BLPOP on a release signal)",
    "pottery": "pottery.Redlock, one master",
    "ours": "django_redis_coord.Lock",
    "ours asyncio": "django_redis_coord.asyncio.Lock",
    BASE: f"django_redis_coord.Lock of {BASE_PATH or 'an earlier checkout'}",
    "ceiling": "one token in a Redis list, BLPOP / RPUSH over raw sockets (not a lock)",
}

# Targets.  Uncontended: ours >= 0.9x the raw floor.  Contention (at every process count), against
# the best peer of the same run: held fraction >= 0.95x the highest peer's (aim 1.0x), redis-server
# CPU per acquisition <= python-redis-lock's, wait p99 <= 0.5x the
# lowest peer's; fairness >= 0.95, <= 4 commands sent per acquisition (counted by MONITOR, scripted
# calls left out), no overlapping hold.  Many waiters in one process: ours serves every waiter
# with no error and gives at most 4 connections over to waiting.  Crash-expiry handoff <= 50 ms.
TARGET_RATIO = 0.9
TARGET_HELD_VS_PEER = 0.95
#: redis-server CPU per acquisition of ours at most that of python-redis-lock (same run).
TARGET_SERVER_CPU_VS_PRL = 1.0
TARGET_P99_VS_PEER = 0.5
TARGET_FAIRNESS = 0.95
TARGET_COMMANDS = 4.0
TARGET_WAITING_CONNECTIONS = 4
TARGET_EXPIRY_MS = 50.0


@dataclass(frozen=True)
class Sizes:
    """How long and how often each part runs."""

    pair_seconds: float = 1.5          # per library per round
    pair_rounds: int = 5               # interleaved rounds; medians are reported
    contention_seconds: float = 4.0
    contention_procs: tuple[int, ...] = (4, 16)
    contention_rounds: int = 3         # rounds at every process count (median + spread)
    contenders: tuple[str, ...] = CONTENDERS + ((BASE,) if BASE_PATH else ())
    hold_s: float = 0.001
    think_s: float = 0.001
    monitor_seconds: float = 1.0       # the run counted by MONITOR, per contender (first process count)
    many_libs: tuple[str, ...] = MANY_LIBS
    many_counts: tuple[int, ...] = (1, 10, 100, 1000)
    many_timeout: float = 60.0         # per library and N: waiters not served by then count as errors
    many_settle: float = 0.5           # how long all waiters wait (CLIENT LIST sampled) before the release
    expiry_libs: tuple[str, ...] = ALL
    expiry_trials: int = 3
    expiry_ttl: float = 1.0
    handoff_libs: tuple[str, ...] = tuple(lib for lib in CONTENDERS if lib not in REFERENCES)
    handoff_trials: int = 40
    plots: bool = True


FULL = Sizes()
QUICK = Sizes(pair_seconds=0.2, pair_rounds=1, contention_seconds=0.6, contention_procs=(4,), contention_rounds=1,
              monitor_seconds=0.3, many_counts=(1, 10, 100), many_timeout=30.0, many_settle=0.2,
              expiry_libs=("redis-py", "ours"), expiry_trials=1, handoff_trials=5)


# -- the libraries ---------------------------------------------------------------------------------
class RawLock:
    """The floor: one SET NX PX per attempt, one EVALSHA compare-and-delete per release."""

    CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"

    def __init__(self, client: Any, name: str, ttl: float, poll: float = 0.0005) -> None:
        self.client, self.name, self.poll = client, name, poll
        self.px = int(ttl * 1000)
        self.cad = client.register_script(self.CAD)
        self.token = b""

    def acquire(self, blocking: bool = True) -> bool:
        token = secrets.token_hex(16).encode()
        while not self.client.set(self.name, token, nx=True, px=self.px):
            if not blocking:
                return False
            time.sleep(self.poll)
        self.token = token
        return True

    def release(self) -> None:
        if not self.cad(keys=[self.name], args=[self.token]):
            raise RuntimeError("raw lock was not held at release")


class TokenRing:
    """The ceiling of the contention figures: one token in a Redis list, taken with ``BLPOP`` and
    given back with ``RPUSH``, over a raw socket (no client library on either side of the handoff).
    The list must hold exactly one token before the contenders start (:func:`reset_ring`)."""

    def __init__(self, client: Any, name: str) -> None:
        import socket

        from benchmarks.common import record_request

        kwargs = client.connection_pool.connection_kwargs
        self.sock = socket.create_connection((kwargs["host"], kwargs["port"]))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = name.encode()
        self.take = b"*3\r\n$5\r\nBLPOP\r\n$%d\r\n%b\r\n$1\r\n0\r\n" % (len(key), key)
        self.give = b"*3\r\n$5\r\nRPUSH\r\n$%d\r\n%b\r\n$1\r\nt\r\n" % (len(key), key)
        self.count = record_request

    def _call(self, request: bytes, lines: int) -> bytes:
        self.sock.sendall(request)
        self.count(request)
        reply = b""
        while reply.count(b"\r\n") < lines:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("redis-server closed the connection")
            reply += chunk
        if reply.startswith(b"-"):
            raise RuntimeError(reply.decode(errors="replace"))
        return reply

    def acquire(self, blocking: bool = True) -> bool:
        self._call(self.take, 5)  # *2, $len, key, $1, t
        return True

    def release(self) -> None:
        self._call(self.give, 1)


def reset_ring(client: Any, name: str) -> None:
    """Leave exactly one token in the ring ``name``."""
    pipe = client.pipeline(transaction=True)
    pipe.delete(name)
    pipe.rpush(name, "t")
    pipe.execute()


def make_lock(lib: str, client: Any, name: str, ttl: float) -> Any:
    """A lock object of library ``lib`` on ``name`` with a ``ttl``-second expiry."""
    if lib == "raw":
        return RawLock(client, name, ttl)
    if lib in ("redis-py", "redis-py 1ms"):
        from redis.lock import Lock as RedisPyLock

        return RedisPyLock(client, name, timeout=ttl, sleep=0.1 if lib == "redis-py" else 0.001)
    if lib == "python-redis-lock":
        import redis_lock

        return redis_lock.Lock(client, name, expire=max(1, math.ceil(ttl)))
    if lib == "pottery":
        from pottery import Redlock

        return Redlock(key=name, masters={client}, auto_release_time=ttl)
    if lib == "ours":
        from django_redis_coord import Lock

        return Lock(client, name, timeout=ttl)
    if lib == BASE:
        return base_lock_class()(client, name, timeout=ttl)
    if lib == "ceiling":
        return TokenRing(client, name)
    raise ValueError(f"unknown library {lib!r}")


def base_lock_class() -> Any:
    """``Lock`` of the checkout at ``BENCH_LOCK_BASE``, imported in place of ours: only ever called
    in a contending process of its own (forked), which then uses no other version."""
    import importlib
    import sys

    for module in [m for m in sys.modules if m == "django_redis_coord" or m.startswith("django_redis_coord.")]:
        del sys.modules[module]
    sys.path.insert(0, BASE_PATH)
    package = importlib.import_module("django_redis_coord")
    if not package.__file__ or not package.__file__.startswith(BASE_PATH):
        raise RuntimeError(f"{BASE} imported {package.__file__}, not the checkout at {BASE_PATH}")
    return package.Lock


def lock_key(lib: str, name: str) -> str:
    """The Redis key holding the token for ``lib``'s lock ``name``."""
    if lib == "python-redis-lock":
        return "lock:" + name
    if lib == "pottery":
        return "redlock:" + name
    return name


def key_name(lib: str) -> str:
    return "bench:" + lib.replace(" ", "-")


def warm_up(ctx: Context, libs: Sequence[str]) -> None:
    """Load every library's scripts into the server (so no measured call pays a NOSCRIPT)."""
    client = ctx.client()
    for lib in libs:
        lock = make_lock(lib, client, key_name(lib) + ":warm", 10.0)
        for _ in range(3):
            # Not blocking: ours would start its process's waiting connection on this client's pool,
            # and closing the client under it makes it reconnect (with a warning) until it idles out.
            assert lock.acquire(blocking=False)
            lock.release()
    client.close()


# -- 1. uncontended pairs --------------------------------------------------------------------------
def measure_pairs(ctx: Context, sizes: Sizes) -> dict[str, Any]:
    """Acquire+release pairs per second for each library (see :func:`interleaved_pairs`)."""
    client = ctx.client()
    locks = {lib: make_lock(lib, client, key_name(lib), 10.0) for lib in ALL}

    def pair_of(lib: str, lock: Any) -> Any:
        def pair() -> None:
            if not lock.acquire():
                raise RuntimeError(f"an uncontended {lib} acquire failed")
            lock.release()
        return pair

    # Not closed afterwards: ours' blocking acquire started the process's waiting connection on
    # this client's pool, which closes itself after 10 s idle (closed under it, it reconnects).
    return interleaved_pairs(ctx, {lib: pair_of(lib, lock) for lib, lock in locks.items()},
                             sizes.pair_seconds, sizes.pair_rounds)


# -- 2. contention -------------------------------------------------------------------------------------
class Window:
    """The span of one contention run, shared by its contending processes (made before they are
    forked): it opens once every one of them is connected and ready, not at an instant fixed before
    they started, which a loaded machine may let pass before they are."""

    #: From the last contender's arrival to the opening (ns): every contender is sleeping till then.
    LEAD_NS = 20_000_000

    def __init__(self, procs: int, seconds: float) -> None:
        self.length_ns = int(seconds * 1e9)
        self._start = FORK.Value("q", 0, lock=False)
        self._barrier = FORK.Barrier(procs, action=self._open)

    def _open(self) -> None:
        self._start.value = time.monotonic_ns() + self.LEAD_NS

    def enter(self, timeout: float = 120.0) -> tuple[int, int]:
        """In a contender: wait for the others, then the window's ``(start_ns, end_ns)``."""
        self._barrier.wait(timeout)
        return self.bounds

    @property
    def bounds(self) -> tuple[int, int]:
        """``(start_ns, end_ns)`` (once opened)."""
        start = int(self._start.value)
        return start, start + self.length_ns


def contend(lib: str, host: str, port: int, name: str, window: Window, hold_s: float,
            think_s: float) -> dict[str, Any]:
    """One contending process: acquire, hold, release, think, from the opening of ``window``
    until its end, and at least once (a contender the machine kept from running till the window
    ended still acquires once: a run's per-acquisition figures always have acquisitions)."""
    sent_commands(reset=True)
    client = counting_client(host, port)
    lock = make_lock(lib, client, name, 10.0)
    client.ping()
    pid = os.getpid()
    waits: list[int] = []
    holds: list[tuple[int, int]] = []
    releases: list[int] = []
    start_ns, end_ns = window.enter()
    sleep_until_ns(start_ns)
    cpu_started = time.process_time()
    while not holds or time.monotonic_ns() < end_ns:
        asked = time.monotonic_ns()
        if not lock.acquire():
            raise RuntimeError("a blocking acquire returned False")
        got = time.monotonic_ns()
        time.sleep(hold_s)
        left = time.monotonic_ns()
        lock.release()
        releases.append(time.monotonic_ns() - left)
        waits.append(got - asked)
        holds.append((got, left))
        time.sleep(think_s)
    return {"pid": pid, "waits": waits, "holds": holds, "releases": releases, "sent": sent_commands(),
            "cpu": time.process_time() - cpu_started}


def server_cpu(client: Any) -> float:
    """CPU seconds the redis-server has used (user + system, main thread and all)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure_contention(ctx: Context, lib: str, procs: int, sizes: Sizes) -> dict[str, Any]:
    name = key_name(lib) + f":c{procs}"
    admin = ctx.client()
    if lib == "ceiling":
        reset_ring(admin, name)
    before = commandstats(admin)
    cpu_before = server_cpu(admin)
    results, (start_ns, end_ns) = contenders_run(ctx, lib, procs, name, sizes.contention_seconds, sizes)
    after = commandstats(admin)
    cpu_after = server_cpu(admin)
    admin.close()
    window = (end_ns - start_ns) / 1e9
    all_holds = [(a, b, r["pid"]) for r in results for a, b in r["holds"]]
    in_window = [sum(1 for a, _ in r["holds"] if start_ns <= a < end_ns) for r in results]
    waits_ms = [w / 1e6 for r in results for (a, _), w in zip(r["holds"], r["waits"]) if start_ns <= a < end_ns]
    total = sum(len(r["holds"]) for r in results)
    ordered = sorted(all_holds)
    # Gap between one hold's end and the next hold's start: the handoff as the contenders live it.
    gaps_ms = [(b[0] - a[1]) / 1e6 for a, b in zip(ordered, ordered[1:]) if start_ns <= b[0] < end_ns]
    sent_by_name: dict[str, int] = {}
    for r in results:
        for command, calls in r["sent"].items():
            sent_by_name[command] = sent_by_name.get(command, 0) + calls
    sent = sum(sum(r["sent"].values()) for r in results)
    return {
        "lib": lib,
        "procs": procs,
        "acq_per_s": sum(in_window) / window,
        "held": held_fraction([(a, b) for a, b, _ in all_holds], start_ns, end_ns),
        "p50": percentile(waits_ms, 50),
        "p99": percentile(waits_ms, 99),
        "max": max(waits_ms) if waits_ms else float("nan"),
        "fairness": (min(in_window) / max(in_window)) if max(in_window) else 0.0,
        "server_cmds": commands_delta(before, after) / total if total else float("nan"),
        "sent_cmds": sent / total if total else float("nan"),
        "overlaps": overlaps(all_holds),
        "gap_p50": percentile(gaps_ms, 50),
        "release_p50": percentile([x / 1e6 for r in results for x in r["releases"]], 50),
        "sent_by_name": {command: calls / total for command, calls in sorted(sent_by_name.items())} if total else {},
        "acquisitions": total,
        "client_cpu_us": sum(r["cpu"] for r in results) / total * 1e6 if total else float("nan"),
        "server_cpu_us": (cpu_after - cpu_before) / total * 1e6 if total else float("nan"),
        "waits_ms": waits_ms,
    }


# -- 3. many waiters in one process ----------------------------------------------------------------
class ManyRecord:
    """What the waiters of one process did (threads or asyncio tasks): when each owned the lock and
    released it, and what failed."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.entered = 0
        self.holds: list[tuple[int, int, int]] = []  # (owned, release called, release returned), ns
        self.errors: Counter[str] = Counter()

    def enter(self) -> None:
        with self.guard:
            self.entered += 1

    def held(self, owned: int, called: int, returned: int) -> None:
        with self.guard:
            self.holds.append((owned, called, returned))

    def failed(self, what: str) -> None:
        with self.guard:
            self.errors[what] += 1


def make_async_lock(lib: str, client: Any, name: str, ttl: float) -> Any:
    """An asyncio lock of library ``lib`` (``redis-py asyncio`` or ``ours asyncio``) on ``name``."""
    if lib == "redis-py asyncio":
        from redis.asyncio.lock import Lock as AsyncRedisPyLock

        return AsyncRedisPyLock(client, name, timeout=ttl, sleep=0.1)
    if lib == "ours asyncio":
        from django_redis_coord.asyncio import Lock as AsyncLock

        return AsyncLock(client, name, timeout=ttl)
    raise ValueError(f"unknown asyncio library {lib!r}")


def wait_one(lib: str, client: Any, name: str, record: ManyRecord, deadline: float) -> None:
    """One waiting thread: block until granted (or ``deadline``), then release at once."""
    record.enter()
    try:
        lock = make_lock(lib, client, name, MANY_TTL)
        if lib == "python-redis-lock":  # its timeout may not exceed expire: it blocks in BLPOP, expire s a time
            acquired = lock.acquire()
        else:
            acquired = lock.acquire(blocking_timeout=max(0.0, deadline - time.monotonic()))
        if not acquired:
            record.failed("timed out")
            return
        owned = time.monotonic_ns()
        lock.release()
        record.held(owned, owned, time.monotonic_ns())
    except Exception as exc:
        record.failed(type(exc).__name__)


async def wait_one_task(lib: str, client: Any, name: str, record: ManyRecord, deadline: float) -> None:
    """One waiting asyncio task: as :func:`wait_one`."""
    record.enter()
    try:
        lock = make_async_lock(lib, client, name, MANY_TTL)
        if not await lock.acquire(blocking_timeout=max(0.0, deadline - time.monotonic())):
            record.failed("timed out")
            return
        owned = time.monotonic_ns()
        await lock.release()
        record.held(owned, owned, time.monotonic_ns())
    except Exception as exc:
        record.failed(type(exc).__name__)


def wait_blocked(record: ManyRecord, count: int, holder: Any, admin: Any, client_name: str, settle: float,
                 deadline: float) -> list[tuple[int, int, int]]:
    """Wait until all ``count`` waiters called acquire (and, for ours, are in the queue), then for
    ``settle`` seconds more; returns the :func:`connection_counts` sampled meanwhile."""
    queue = getattr(getattr(holder, "keys", None), "queue", None)  # ours: its queue in Redis
    while record.entered < count or (
            queue is not None and admin.zcard(queue) < count - sum(record.errors.values())):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {count} waiters were not all waiting in time")
        time.sleep(0.01)
    samples = []
    for _ in range(5):
        time.sleep(settle / 5)
        samples.append(connection_counts(admin, client_name))
    return samples


def many_client_name(lib: str, count: int) -> str:
    """The name the waiters' connections carry in ``CLIENT LIST`` (no space allowed)."""
    return f"bench-many-{lib.replace(' ', '-')}-{count}"


def many_threads(ctx: Context, lib: str, count: int, sizes: Sizes) -> dict[str, Any]:
    """``count`` threads of this process wait on one lock of ``lib``; its holder then releases."""
    name = key_name(lib) + f":many{count}"
    holder_client = ctx.client()
    holder = make_lock(lib, holder_client, name, MANY_TTL + sizes.many_timeout)
    if not holder.acquire(blocking=False):
        raise RuntimeError("the holder did not get the lock")
    admin = ctx.client()
    client_name = many_client_name(lib, count)
    client = ctx.client(client_name=client_name)  # the waiters' client: redis-py's default pool (100 at most)
    record = ManyRecord()
    deadline = time.monotonic() + sizes.many_timeout
    threads = [threading.Thread(target=wait_one, args=(lib, client, name, record, deadline), daemon=True)
               for _ in range(count)]
    for thread in threads:
        thread.start()
    samples = wait_blocked(record, count, holder, admin, client_name, sizes.many_settle, deadline)
    released = time.monotonic_ns()
    holder.release()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    unserved = sum(thread.is_alive() for thread in threads)
    samples.append(connection_counts(admin, client_name))  # a pool keeps what it opened while serving
    result = many_figures(record, released, samples, unserved)
    holder_client.close()
    admin.close()
    if lib != "ours":  # ours: its waiting connection closes itself after 10 s idle (closing the pool
        client.close()  # under it makes it reconnect, with a warning)
    return result


def many_tasks(ctx: Context, lib: str, count: int, sizes: Sizes) -> dict[str, Any]:
    """``count`` asyncio tasks of one event loop wait on one lock of ``lib``; its holder then releases."""
    name = key_name(lib) + f":many{count}"

    async def main() -> dict[str, Any]:
        holder_client = ctx.server.async_client()
        holder = make_async_lock(lib, holder_client, name, MANY_TTL + sizes.many_timeout)
        if not await holder.acquire(blocking=False):
            raise RuntimeError("the holder did not get the lock")
        admin = ctx.client()  # sync: used from a worker thread while the tasks wait
        client_name = many_client_name(lib, count)
        client = ctx.server.async_client(client_name=client_name)  # redis-py's default pool (100 at most)
        record = ManyRecord()
        deadline = time.monotonic() + sizes.many_timeout
        tasks = [asyncio.create_task(wait_one_task(lib, client, name, record, deadline)) for _ in range(count)]
        samples = await asyncio.to_thread(wait_blocked, record, count, holder, admin, client_name,
                                          sizes.many_settle, deadline)
        released = time.monotonic_ns()
        await holder.release()
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
        for task in pending:
            task.cancel()
        samples.append(await asyncio.to_thread(connection_counts, admin, client_name))
        result = many_figures(record, released, samples, len(pending))
        await holder_client.aclose()
        admin.close()
        if lib != "ours asyncio":  # ours: its waiting task ends with the event loop
            await client.aclose()
        return result

    return asyncio.run(main())


def many_figures(record: ManyRecord, released: int, samples: list[tuple[int, int, int]],
                 unserved: int) -> dict[str, Any]:
    """Hand-off latencies (ms): from each release call to the next waiter owning the lock, the
    holder's release first; the connections at their peak; errors by kind."""
    holds = sorted(record.holds)
    latencies = []
    previous = released
    for owned, called, _ in holds:
        latencies.append((owned - previous) / 1e6)
        previous = called
    errors = Counter(record.errors)
    if unserved:
        errors["not served in time"] += unserved
    return {
        "served": len(holds),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "connections": max(total for total, _, _ in samples),
        "blocked": max(blocked for _, blocked, _ in samples),
        "subscribed": max(subscribed for _, _, subscribed in samples),
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "total_s": (holds[-1][2] - released) / 1e9 if holds else float("nan"),
        "overlaps": sum(1 for latency in latencies if latency < 0),
    }


def measure_many(ctx: Context, lib: str, count: int, sizes: Sizes) -> dict[str, Any]:
    if lib in ASYNC_LIBS:
        return many_tasks(ctx, lib, count, sizes)
    return many_threads(ctx, lib, count, sizes)


def contenders_run(ctx: Context, lib: str, procs: int, name: str, seconds: float,
                   sizes: Sizes) -> tuple[list[dict[str, Any]], tuple[int, int]]:
    """What each of ``procs`` contending processes did in a window of ``seconds`` (see
    :func:`contend`), and the window's ``(start_ns, end_ns)``."""
    window = Window(procs, seconds)
    args = [(lib, ctx.server.host, ctx.server.port, name, window, sizes.hold_s, sizes.think_s)
            for _ in range(procs)]
    results = run_workers(contend, args, timeout=seconds + 240)
    return results, window.bounds


def measure_monitored(ctx: Context, lib: str, procs: int, sizes: Sizes) -> dict[str, Any]:
    """Commands sent per acquisition as MONITOR sees them, in a short contention run of its own
    (MONITOR slows the server: the speed figures come from runs without it)."""
    name = key_name(lib) + f":m{procs}"
    if lib == "ceiling":
        admin = ctx.client()
        reset_ring(admin, name)
        admin.close()
    with CommandMonitor(ctx.server) as monitor:
        results, _ = contenders_run(ctx, lib, procs, name, sizes.monitor_seconds, sizes)
    total = sum(len(r["holds"]) for r in results)
    return {
        "monitor_cmds": sum(monitor.counts.values()) / total if total else float("nan"),
        "monitor_by_name": {command: calls / total for command, calls in sorted(monitor.counts.items())},
        "acquisitions": total,
    }


# -- 4. crash-expiry handoff -------------------------------------------------------------------------
def crash_holder(lib: str, host: str, port: int, name: str, ttl: float, queue: Any) -> None:
    """Acquire with a ``ttl``-second expiry, report, then wait to be SIGKILLed (never releasing)."""
    import redis

    lock = make_lock(lib, redis.Redis(host=host, port=port), name, ttl)
    assert lock.acquire()
    queue.put("held")
    time.sleep(120)


def expiry_waiter(lib: str, host: str, port: int, name: str, ttl: float, queue: Any) -> None:
    """Block on the lock; once it is ours, report the server's TIME (ms)."""
    import redis

    client = redis.Redis(host=host, port=port)
    lock = make_lock(lib, client, name, ttl)
    queue.put("waiting")
    assert lock.acquire()
    sec, usec = client.time()
    queue.put(sec * 1000.0 + usec / 1000.0)
    lock.release()


def measure_expiry(ctx: Context, lib: str, ttl: float, trial: int) -> float:
    """Milliseconds from the crashed holder's TTL end (server clock) to the waiter owning the lock."""
    name = key_name(lib) + f":x{trial}"
    key = lock_key(lib, name)
    host, port = ctx.server.host, ctx.server.port
    queue = FORK.Queue()
    holder = FORK.Process(target=crash_holder, args=(lib, host, port, name, ttl, queue), daemon=True)
    holder.start()
    waiter = None
    try:
        if queue.get(timeout=30) != "held":
            raise RuntimeError("holder did not report")
        admin = ctx.client()
        pipe = admin.pipeline(transaction=True)
        pipe.time()
        pipe.pttl(key)
        (sec, usec), pttl = pipe.execute()
        if pttl < 0:
            raise RuntimeError(f"{lib}: key {key!r} has no TTL ({pttl})")
        expires_ms = sec * 1000.0 + usec / 1000.0 + pttl
        # The waiter arrives half-way through the hold (so a waiter's own timeouts do not happen to
        # line up with the expiry), then the holder crashes: nobody will ever release.
        time.sleep(pttl / 2000.0)
        waiter = FORK.Process(target=expiry_waiter, args=(lib, host, port, name, ttl, queue), daemon=True)
        waiter.start()
        if queue.get(timeout=30) != "waiting":
            raise RuntimeError("waiter did not start")
        time.sleep(min(0.05, ttl / 10))
        holder.kill()  # SIGKILL: it never releases
        owned_ms = float(queue.get(timeout=ttl + 30))
        admin.close()
        return owned_ms - expires_ms
    finally:
        for proc in (holder, waiter):
            if proc is not None:
                if proc.is_alive():
                    proc.kill()
                proc.join(5)


# -- 5. handoff latency --------------------------------------------------------------------------------
def handoff_side(role: str, lib: str, host: str, port: int, name: str, trials: int,
                 barrier: Any) -> list[tuple[int, int]]:
    """Ping-pong between two processes; A releases while B is blocked.

    Returns, per trial, A's (release called, release returned) or B's (owned, owned) instants (ns).
    """
    import redis

    lock = make_lock(lib, redis.Redis(host=host, port=port), name, 10.0)
    instants = []
    for _ in range(trials):
        if role == "A":
            assert lock.acquire()
            barrier.wait()
            time.sleep(0.02)  # B is blocked in acquire by now
            called = time.monotonic_ns()
            lock.release()
            instants.append((called, time.monotonic_ns()))
            barrier.wait()
        else:
            barrier.wait()
            assert lock.acquire()
            now = time.monotonic_ns()
            instants.append((now, now))
            lock.release()
            barrier.wait()
    return instants


def measure_handoff(ctx: Context, lib: str, trials: int) -> dict[str, list[float]]:
    """Handoff latencies (ms) from A's release call (``from_call``) and from its return (``from_return``)."""
    name = key_name(lib) + ":h"
    barrier = FORK.Barrier(2)
    host, port = ctx.server.host, ctx.server.port
    released, owned = run_workers(handoff_side, [("A", lib, host, port, name, trials, barrier),
                                                 ("B", lib, host, port, name, trials, barrier)],
                                  timeout=trials * 1.0 + 60)
    return {
        "from_call": [(b[0] - a[0]) / 1e6 for a, b in zip(released, owned)],
        "from_return": [(b[0] - a[1]) / 1e6 for a, b in zip(released, owned)],
    }


# -- the report ---------------------------------------------------------------------------------------
def by_name(result: dict[str, Any]) -> str:
    return ", ".join(f"{name} {per:.2f}" for name, per in result["sent_by_name"].items())


def spread(values: Sequence[float]) -> str:
    if len(values) < 2:
        return "–"
    return f"{min(values):.0f}–{max(values):.0f}"


def run(ctx: Context, sizes: Optional[Sizes] = None) -> Section:
    sizes = sizes or (QUICK if ctx.quick else FULL)
    section = Section("lock", "Lock benchmark: django_redis_coord.Lock next to redis-py, python-redis-lock, pottery")
    section.text(__doc__.split("\n\n", 1)[1])
    warm_up(ctx, sorted(set(ALL) | set(sizes.contenders) - {"ceiling", BASE}))  # no scripts; another version
    ctx.flush()

    # 1. uncontended
    ctx.log("uncontended acquire+release pairs")
    pairs = measure_pairs(ctx, sizes)
    section.heading("Uncontended acquire + release")
    section.text(f"One client; the libraries take turns in {PAIR_SLICE * 1000:g} ms slices, {sizes.pair_seconds:g} s "
                 f"each per round, {sizes.pair_rounds} rounds. *pairs/s* is the median of the rounds' throughput "
                 "and *x floor* the median of each round's ratio to the floor in that round; *typical* is the "
                 f"rate from the median time of a pair (timed in blocks of {PAIR_BLOCK}), which bursts of other "
                 "processes on a shared machine disturb least: the target is checked on it.")
    rows = []
    for lib in ALL:
        rate = statistics.median(pairs["rates"][lib])
        ratio = statistics.median(pairs["ratios"][lib])
        typical, typical_ratio = pairs["typical"][lib], pairs["typical_ratio"][lib]
        section.figure(f"pairs_per_s.{lib}", rate)
        section.figure(f"pairs_ratio.{lib}", ratio)
        section.figure(f"pairs_typical_per_s.{lib}", typical)
        section.figure(f"pairs_typical_ratio.{lib}", typical_ratio)
        rows.append([lib, rate, spread(pairs["rates"][lib]), f"{ratio:.2f}x",
                     f"{min(pairs['ratios'][lib]):.2f}–{max(pairs['ratios'][lib]):.2f}", typical,
                     f"{1e6 / typical:.0f}", f"{typical_ratio:.2f}x"])
    section.table(["library", "pairs/s", "pairs/s range", "x floor", "x floor range", "typical pairs/s",
                   "typical µs/pair", "typical x floor"], rows)
    section.check(f"uncontended ours >= {TARGET_RATIO}x floor (typical)", pairs["typical_ratio"]["ours"], ">=",
                  TARGET_RATIO)

    # 2. contention
    section.heading("Contention")
    section.text(f"N processes loop on one lock: acquire (blocking), hold {sizes.hold_s * 1000:g} ms, release, "
                 f"think {sizes.think_s * 1000:g} ms, for {sizes.contention_seconds:g} s. *held* is the union of "
                 "the hold intervals (time.monotonic_ns in each process, from acquire's return to release's call) "
                 "over the wall time; *fairness* is the fewest / most acquisitions of any process; *cmds/acq* "
                 "counts what the clients sent (one EVALSHA = 1) and *server cmds/acq* is the INFO commandstats "
                 "delta, which also counts every command run inside a Lua script (the peers' published figures "
                 "use this count); *gap* is the time from one hold's end to the next hold's start (the handoff "
                 "as the contenders see it) and *release* the duration of the release call; *CPU µs/acq* is the "
                 "CPU time of all contending processes (process_time) and of redis-server (INFO cpu) per "
                 "acquisition: on a 2-core machine it bounds the rate.")
    contention: dict[tuple[str, int], list[dict[str, Any]]] = {}
    runs: list[tuple[str, int]] = []
    for procs in sizes.contention_procs:
        rounds = sizes.contention_rounds
        for round_no in range(rounds):
            # Each round starts at another library (and odd rounds run backwards), so that a slow
            # phase of a shared machine does not fall on the same library in every round.
            order = list(sizes.contenders)
            shift = round_no * len(order) // rounds
            order = order[shift:] + order[:shift]
            if round_no % 2:
                order.reverse()
            for lib in order:
                runs.append((lib, procs))
    for lib, procs in runs:
        ctx.log(f"contention: {lib}, {procs} processes")
        result = measure_contention(ctx, lib, procs, sizes)
        contention.setdefault((lib, procs), []).append(result)
        ctx.log(f"  {result['acq_per_s']:.0f} acq/s held {result['held']:.2f} p99 {result['p99']:.1f} ms "
                f"fair {result['fairness']:.2f} cmds {result['sent_cmds']:.1f} overlaps {result['overlaps']}")
    medians: dict[tuple[str, int], dict[str, Any]] = {}
    for procs in sizes.contention_procs:
        rows = []
        for lib in sizes.contenders:
            results = contention[(lib, procs)]
            med = {key: statistics.median(r[key] for r in results)
                   for key in ("acq_per_s", "held", "p50", "p99", "max", "fairness", "server_cmds", "sent_cmds",
                                "gap_p50", "release_p50", "client_cpu_us", "server_cpu_us")}
            med["overlaps"] = max(r["overlaps"] for r in results)
            med["waits_ms"] = [w for r in results for w in r["waits_ms"]]
            medians[(lib, procs)] = med
            med["sent_by_name"] = results[0]["sent_by_name"]
            for key in ("acq_per_s", "held", "p50", "p99", "max", "fairness", "sent_cmds", "server_cmds", "overlaps",
                        "gap_p50", "release_p50", "client_cpu_us", "server_cpu_us"):
                section.figure(f"contention{procs}.{lib}.{key}", med[key])
            held_range = spread([r["held"] * 100 for r in results]) if len(results) > 1 else "–"
            rows.append([lib, med["acq_per_s"], med["held"], held_range, med["p50"], med["p99"], med["max"],
                         med["fairness"], med["sent_cmds"], med["server_cmds"], med["overlaps"], med["gap_p50"],
                         med["release_p50"], med["client_cpu_us"], med["server_cpu_us"]])
        rounds_note = f" (median of {sizes.contention_rounds} rounds)" if sizes.contention_rounds > 1 else ""
        section.heading(f"{procs} processes{rounds_note}", level=3)
        section.table(["library", "acq/s", "held", "held % range", "wait p50 ms", "wait p99 ms", "wait max ms",
                       "fairness", "cmds/acq", "server cmds/acq", "overlaps", "gap p50 ms", "release p50 ms",
                       "client CPU µs/acq", "server CPU µs/acq"], rows)
        section.text("Commands sent per acquisition, by command: "
                     + "; ".join(f"**{lib}** {by_name(medians[(lib, procs)])}" for lib in sizes.contenders) + ".")
    for procs in sizes.contention_procs:
        for lib in sizes.contenders:
            section.check(f"{procs} processes: {lib} overlapping holds", medians[(lib, procs)]["overlaps"], "==", 0)

    # Ours against the best peer of this run
    peers = [lib for lib in PEERS if lib in sizes.contenders]
    if peers:
        section.heading("Ours against the best peer of this run", level=3)
        section.text("The targets compare ours with the best peer measured in this run (the machine's speed "
                     "varies from run to run): the peer with the highest held fraction, the one with the lowest "
                     "wait p99, the one with the least redis-server CPU per acquisition.")
        rows = []
        for procs in sizes.contention_procs:
            ours = medians[("ours", procs)]

            def best(key: str, highest: bool) -> str:
                pick = max if highest else min
                return pick(peers, key=lambda lib: medians[(lib, procs)][key])  # noqa: B023 - used at once

            held_peer, p99_peer, cpu_peer = best("held", True), best("p99", False), best("server_cpu_us", False)
            held_ratio = ours["held"] / medians[(held_peer, procs)]["held"]
            p99_ratio = ours["p99"] / medians[(p99_peer, procs)]["p99"]
            cpu_ratio = ours["server_cpu_us"] / medians[(cpu_peer, procs)]["server_cpu_us"]
            section.figure(f"contention{procs}.ours.held_vs_best_peer", held_ratio, held_peer)
            section.figure(f"contention{procs}.ours.p99_vs_best_peer", p99_ratio, p99_peer)
            section.figure(f"contention{procs}.ours.server_cpu_vs_best_peer", cpu_ratio, cpu_peer)
            rows.append([str(procs), ours["held"], f"{held_peer} {medians[(held_peer, procs)]['held']:.3f}",
                         f"{held_ratio:.2f}x", ours["p99"], f"{p99_peer} {medians[(p99_peer, procs)]['p99']:.2f}",
                         f"{p99_ratio:.2f}x", ours["fairness"], ours["server_cpu_us"],
                         f"{cpu_peer} {medians[(cpu_peer, procs)]['server_cpu_us']:.0f}", f"{cpu_ratio:.2f}x"])
            section.check(f"{procs} processes: ours held fraction / best peer's ({held_peer})", held_ratio, ">=",
                          TARGET_HELD_VS_PEER)
            section.check(f"{procs} processes: ours wait p99 / best peer's ({p99_peer})", p99_ratio, "<=",
                          TARGET_P99_VS_PEER)
        section.table(["processes", "ours held", "best peer held", "x best peer", "ours wait p99 ms",
                       "best peer p99 ms", "x best peer", "ours fairness", "ours server CPU µs/acq",
                       "best peer server CPU µs/acq", "x best peer"], rows)
    if "python-redis-lock" in sizes.contenders:
        for procs in sizes.contention_procs:
            ratio = medians[("ours", procs)]["server_cpu_us"] / medians[("python-redis-lock", procs)]["server_cpu_us"]
            section.figure(f"contention{procs}.ours.server_cpu_vs_python_redis_lock", ratio)
            section.check(f"{procs} processes: ours redis-server CPU per acquisition / python-redis-lock's", ratio,
                          "<=", TARGET_SERVER_CPU_VS_PRL)
    if BASE in sizes.contenders:
        section.heading("Ours against the earlier version (same run)", level=3)
        section.text(f"*{BASE}* is the `Lock` of the checkout at `{BASE_PATH}`, contending in the same rounds "
                     "as ours; *x base* is ours / base.")
        rows = []
        for procs in sizes.contention_procs:
            ours, base = medians[("ours", procs)], medians[(BASE, procs)]
            for key in ("held", "p99", "gap_p50", "client_cpu_us", "server_cpu_us"):
                section.figure(f"contention{procs}.ours.{key}_vs_base", ours[key] / base[key])
            rows.append([str(procs), ours["held"], base["held"], f"{ours['held'] / base['held']:.2f}x", ours["p99"],
                         base["p99"], ours["gap_p50"], base["gap_p50"], ours["client_cpu_us"], base["client_cpu_us"],
                         ours["server_cpu_us"], base["server_cpu_us"]])
        section.table(["processes", "ours held", "base held", "x base", "ours wait p99 ms", "base wait p99 ms",
                       "ours gap p50 ms", "base gap p50 ms", "ours client CPU µs/acq", "base client CPU µs/acq",
                       "ours server CPU µs/acq", "base server CPU µs/acq"], rows)
    for procs in sizes.contention_procs:
        section.check(f"{procs} processes: ours fairness", medians[("ours", procs)]["fairness"], ">=", TARGET_FAIRNESS)

    # Commands sent, counted by MONITOR
    first = sizes.contention_procs[0]
    if sizes.monitor_seconds:
        section.heading(f"Commands sent per acquisition, counted by MONITOR ({first} processes)", level=3)
        section.text(f"A contention run of its own per library ({first} processes, {sizes.monitor_seconds:g} s, "
                     "same loop) with `MONITOR` on a separate connection: every command a client sent is "
                     "counted, those a Lua script ran (`[0 lua]`) are not, nor connection set-up (HELLO, "
                     "CLIENT, PING, SELECT) and the benchmark's own admin traffic.  *sent (client count)* is the "
                     "client-side count of the measured runs above, for comparison.  The target is checked "
                     "on the MONITOR count.")
        rows = []
        for lib in sizes.contenders:
            ctx.log(f"commands by MONITOR: {lib}, {first} processes")
            monitored = measure_monitored(ctx, lib, first, sizes)
            section.figure(f"contention{first}.{lib}.monitor_cmds", monitored["monitor_cmds"])
            by_command = ", ".join(f"{command} {per:.2f}" for command, per in monitored["monitor_by_name"].items())
            rows.append([lib, medians[(lib, first)]["sent_cmds"], monitored["monitor_cmds"],
                         medians[(lib, first)]["server_cmds"], by_command])
            if lib == "ours":
                section.check(f"{first} processes: ours commands sent per acquisition (MONITOR, scripted calls "
                              "left out)", monitored["monitor_cmds"], "<=", TARGET_COMMANDS)
        section.table(["library", "sent (client count)", "sent (MONITOR)", "server cmds/acq (scripted included)",
                       "MONITOR count by command"], rows)

    # 3. many waiters in one process
    if sizes.many_libs and sizes.many_counts:
        section.heading("Many waiters in one process")
        section.text(f"N waiters in one process (threads; asyncio tasks for the *asyncio* libraries) block on "
                     f"one lock while a holder (its own client) holds it for {sizes.many_settle:g} s after the "
                     "last of them called acquire; then the holder releases and each waiter, once it owns the "
                     "lock, releases at once: a chain of N hand-offs.  The waiters share one fresh client with "
                     "redis-py's default connection pool (at most 100 connections; one more raises "
                     "MaxConnectionsError).  *connections* is the peak number of that client's connections in "
                     "`CLIENT LIST` while they waited (and once more after the last release: a pool keeps "
                     "what it opened), *blocked* those blocked in a command (flag b), *subscribed* those "
                     "subscribed to a channel; *hand-off* runs from one release call to the next waiter "
                     "owning the lock (time.monotonic_ns in the process), and *total* from the holder's "
                     "release call to the last waiter's release returning.  *errors* counts the waiters that "
                     f"failed, or were not served within {sizes.many_timeout:g} s: a result, not a crash.")
        rows = []
        many: dict[tuple[str, int], dict[str, Any]] = {}
        for lib in sizes.many_libs:
            for count in sizes.many_counts:
                ctx.log(f"many waiters: {lib}, {count}")
                result = many[(lib, count)] = measure_many(ctx, lib, count, sizes)
                ctx.log(f"  served {result['served']} errors {result['error_kinds'] or 0} connections "
                        f"{result['connections']} hand-off p50 {result['p50']:.2f} ms total {result['total_s']:.2f} s")
                for key in ("served", "errors", "connections", "blocked", "subscribed", "p50", "p99", "total_s",
                            "overlaps"):
                    section.figure(f"many.{lib}.{count}.{key}", result[key])
                kinds = ", ".join(f"{kind} {calls}" for kind, calls in sorted(result["error_kinds"].items()))
                errors = f"{result['errors']}" + (f" ({kinds})" if kinds else "")
                rows.append([lib, str(count), result["served"], errors,
                             result["connections"], result["blocked"], result["subscribed"], result["p50"],
                             result["p99"], result["total_s"]])
        section.table(["library", "N", "served", "errors", "connections", "blocked", "subscribed",
                       "hand-off p50 ms", "hand-off p99 ms", "total s"], rows)
        for lib in ("ours", "ours asyncio"):
            if lib in sizes.many_libs:
                results = [many[(lib, count)] for count in sizes.many_counts]
                section.check(f"many waiters: {lib}, errors and overlaps (all N)",
                              sum(r["errors"] + r["overlaps"] for r in results), "==", 0)
                section.check(f"many waiters: {lib}, connections given over to waiting (blocked + subscribed, "
                              "peak of all N)", max(r["blocked"] + r["subscribed"] for r in results), "<=",
                              TARGET_WAITING_CONNECTIONS)

    # 4. crash-expiry
    expiry: dict[str, list[float]] = {}
    if sizes.expiry_libs:
        section.heading("Crash-expiry handoff")
        section.text(f"A holder acquires with a {sizes.expiry_ttl:g} s TTL; a waiter arrives half-way through "
                     "the hold and blocks; the holder is SIGKILLed (it never releases). The delay runs from the "
                     "TTL's end (server TIME + PTTL read right after the grant) to the waiter owning the lock "
                     "(server TIME read right after its acquire returned).")
        for lib in sizes.expiry_libs:
            for trial in range(sizes.expiry_trials):
                ctx.log(f"crash-expiry: {lib}, trial {trial + 1}")
                expiry.setdefault(lib, []).append(measure_expiry(ctx, lib, sizes.expiry_ttl, trial))
        rows = []
        for lib in sizes.expiry_libs:
            values = expiry[lib]
            section.figure(f"expiry_ms.{lib}", statistics.median(values))
            section.figure(f"expiry_ms_max.{lib}", max(values))
            rows.append([lib, statistics.median(values), max(values), ", ".join(f"{v:.1f}" for v in values)])
        section.table(["library", "delay ms (median)", "delay ms (max)", "trials ms"], rows)
        if "ours" in expiry:
            section.check("crash-expiry handoff, ours, worst trial (ms)", max(expiry["ours"]), "<=", TARGET_EXPIRY_MS)

    # 5. handoff latency
    handoff: dict[str, list[float]] = {}
    if sizes.handoff_libs and sizes.handoff_trials:
        section.heading("Handoff latency")
        section.text(f"Two processes, {sizes.handoff_trials} handoffs each: A holds, B is blocked in acquire "
                     "(20 ms later), A calls release; latency from that call to B's acquire returning. The last "
                     "column counts from release's return instead: negative when the waiter owned the lock before "
                     "the releaser got its reply (a server-side grant).")
        rows = []
        for lib in sizes.handoff_libs:
            ctx.log(f"handoff latency: {lib}")
            measured = measure_handoff(ctx, lib, sizes.handoff_trials)
            values = handoff[lib] = measured["from_call"]
            section.figure(f"handoff_p50_ms.{lib}", percentile(values, 50))
            section.figure(f"handoff_after_return_p50_ms.{lib}", percentile(measured["from_return"], 50))
            rows.append([lib, percentile(values, 50), percentile(values, 90), max(values),
                         percentile(measured["from_return"], 50)])
        section.table(["library", "p50 ms", "p90 ms", "max ms", "p50 ms after release returned"], rows)

    # 6. the machine
    placements = placement_round_trips(ctx.server, ctx.size(400, 100))
    if placements:
        section.heading("The machine: one round trip, by where the processes run")
        section.text("A `PING` over a raw socket from the benchmark process, with redis-server and the client "
                     "pinned to CPUs for the measurement only (median µs; every other figure here runs "
                     "unpinned).  A handoff is two such hops, releaser to Redis and Redis to the waiter, "
                     "whatever the lock: when processes wake each other across CPUs, those hops bound the "
                     "held fraction of every library, the *ceiling* included.")
        rows = []
        for label, figures in placements.items():
            for kind, value in figures.items():
                section.figure(f"placement_rt_us.{label}.{kind}", value)
            rows.append([label, figures["back to back"], figures["after 1 ms idle"]])
        section.table(["redis-server and client", "back to back µs", "after 1 ms idle µs"], rows)

    if sizes.plots:
        plot_contention(section, sizes, medians, pairs, handoff)
    return section


def plot_contention(section: Section, sizes: Sizes, medians: dict[tuple[str, int], dict[str, Any]],
                    pairs: dict[str, Any], handoff: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = sizes.contention_procs[0]
    fig, (ax_cdf, ax_held, ax_pairs) = plt.subplots(1, 3, figsize=(17, 4.8))
    for lib in sizes.contenders:
        waits = sorted(max(w, 1e-3) for w in medians[(lib, first)]["waits_ms"])
        if waits:
            ys = [(i + 1) / len(waits) for i in range(len(waits))]
            ax_cdf.step(waits, ys, where="post", label=lib, linewidth=2.2 if lib == "ours" else 1.2)
    peers = [lib for lib in PEERS if lib in sizes.contenders]
    if peers:  # the targets: ours' p99 at most half the best peer's, its held fraction at least the best peer's
        best_p99 = min(medians[(lib, first)]["p99"] for lib in peers)
        ax_cdf.axvline(TARGET_P99_VS_PEER * best_p99, color="grey", linestyle=":", linewidth=1)
    ax_cdf.set_xscale("log")
    ax_cdf.set_xlabel("wait for the lock (ms, log)")
    ax_cdf.set_ylabel("fraction of acquisitions")
    ax_cdf.set_title(f"Wait time CDF, {first} processes, hold 1 ms / think 1 ms")
    ax_cdf.legend(fontsize=8, loc="lower right")
    ax_cdf.grid(alpha=0.3)

    width = 0.8 / len(sizes.contention_procs)
    xs = range(len(sizes.contenders))
    for index, procs in enumerate(sizes.contention_procs):
        values = [medians[(lib, procs)]["held"] for lib in sizes.contenders]
        ax_held.bar([x + index * width for x in xs], values, width, label=f"{procs} processes")
    if peers:
        best_held = max(medians[(lib, first)]["held"] for lib in peers)
        ax_held.axhline(TARGET_HELD_VS_PEER * best_held, color="grey", linestyle=":", linewidth=1)
    ax_held.set_xticks([x + width * (len(sizes.contention_procs) - 1) / 2 for x in xs])
    ax_held.set_xticklabels(sizes.contenders, rotation=20, fontsize=8)
    ax_held.set_ylim(0, 1)
    ax_held.set_ylabel("fraction of time the lock is held")
    ax_held.set_title("Lock utilisation under contention")
    ax_held.legend(fontsize=8)

    ratios = [pairs["typical_ratio"][lib] for lib in ALL]
    ax_pairs.bar(range(len(ALL)), ratios, color=["#999999" if lib != "ours" else "#d62728" for lib in ALL])
    ax_pairs.axhline(TARGET_RATIO, color="grey", linestyle=":", linewidth=1)
    ax_pairs.set_xticks(range(len(ALL)))
    ax_pairs.set_xticklabels(ALL, rotation=20, fontsize=8)
    ax_pairs.set_ylabel("uncontended pairs/s, x the raw floor")
    ax_pairs.set_title("Uncontended acquire+release")
    fig.tight_layout()
    section.plot("lock_contention.png", fig, "Wait-time CDF, held fraction and uncontended ratio per library")


__all__ = ["run", "Sizes", "FULL", "QUICK", "make_lock"]
