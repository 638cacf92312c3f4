"""Process workloads: clients that contend for one lock (or semaphore) and record what they did.

Every client is its own OS process.  Each round it

1. acquires (blocking, up to ``blocking_timeout``),
2. reads the protected set (a fenced read: the resource remembers the highest fence it saw),
3. holds for a while - sometimes far past the TTL (``stall``), like a long GC pause,
4. writes the set back with one new element (a fenced write: refused for an older fence),
5. releases.

With ``fenced=False`` steps 2 and 4 are a plain GET and SET, which is what most code does; the
lost-update checker then shows what fencing is for.  A *nemesis* thread in the parent can inject
faults meanwhile: SIGSTOP/SIGCONT of client processes, SIGKILL and restart of redis-server, or
latency and blackholes through :class:`tests.safety.proxy.Proxy`.

The protected set lives on a different redis-server than the lock when the lock's server is the
one being killed: it stands for the storage a lock protects, which does not forget its data.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from django_redis_coord import Lock, LockLostError, LockNotOwnedError, Semaphore, StaleFenceError
from django_redis_coord.integrations.fencing import fenced_get, fenced_set

from .checkers import Report, check_lock_history, check_semaphore_history
from .history import History, Recorder
from .unsafe import GetThenDelLock, RacyFenceLock, RacySemaphore, TokenlessLock

#: Errors that leave a call's outcome unknown (the network or the server went away).
IO_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)

# -- the protected resource -------------------------------------------------------------------------
class Resource:
    """The set the lock protects: one comma-separated string written with
    :func:`django_redis_coord.fenced_set` (a hash with fields ``value`` and ``fence``).

    Under a hold both the read and the write are fenced (``fenced_get(key, fence)`` records the
    reader's fence): a read-modify-write needs both, or a stale holder's write that lands between
    the new holder's read and write is accepted and then overwritten - a lost update.
    """

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.key = f"{{resource:{name}}}"

    @staticmethod
    def decode(raw: Any) -> list[str]:
        if isinstance(raw, bytes):
            raw = raw.decode()
        return [item for item in (raw or "").split(",") if item]

    def fenced_read(self, fence: int) -> Optional[list[str]]:
        """The elements, or None when a newer holder has been seen (``fence`` is stale)."""
        try:
            return self.decode(fenced_get(self.key, fence, client=self.client)[0])
        except StaleFenceError:
            return None

    def fenced_write(self, fence: int, elements: Sequence[str]) -> bool:
        return fenced_set(self.key, ",".join(elements), fence, client=self.client)

    def read(self) -> list[str]:
        """The elements, unfenced."""
        return self.decode(fenced_get(self.key, client=self.client)[0])

    def write(self, elements: Sequence[str]) -> bool:
        self.client.hset(self.key, "value", ",".join(elements))
        return True

    def clear(self) -> None:
        self.client.delete(self.key)


# -- what a client contends for ---------------------------------------------------------------
class _CoordAdapter:
    """What a client needs from one of our primitives (a fresh object per hold)."""

    primitive: Any
    #: Recorded with the acquire (a read-write lock's mode).
    details: dict = {}

    @property
    def fence(self) -> Optional[int]:
        return self.primitive.fence

    def deadline_ns(self) -> Optional[int]:
        deadline = self.primitive.deadline
        return None if deadline is None else int(deadline * 1e9)

    def acquire(self, blocking_timeout: float) -> bool:
        return self.primitive.acquire(blocking=True, blocking_timeout=blocking_timeout)


class CoordLock(_CoordAdapter):
    """Adapter for :class:`django_redis_coord.Lock`."""

    def __init__(self, client: Any, name: str, timeout: float, *, auto_renew: bool = False,
                 reentrant: bool = False, on_lost: Optional[Callable[[Any], None]] = None) -> None:
        self.primitive = Lock(client, name, timeout=timeout, auto_renew=auto_renew, reentrant=reentrant,
                              on_lost=on_lost)

    def release(self) -> str:
        try:
            self.primitive.release()
        except LockLostError:
            return "ok-lost"  # released, but the watchdog had already given the hold up
        except LockNotOwnedError:
            return "not-owned"
        return "ok"

    def reenter(self) -> Optional[int]:
        assert self.primitive.acquire(blocking=False)
        return self.primitive.fence

    def release_inner(self) -> None:
        self.primitive.release()


class CoordSemaphore(_CoordAdapter):
    """Adapter for :class:`django_redis_coord.Semaphore` (one permit per hold)."""

    def __init__(self, client: Any, name: str, timeout: float, limit: int, *, auto_renew: bool = False,
                 on_lost: Optional[Callable[[Any], None]] = None) -> None:
        self.primitive = Semaphore(client, name, limit=limit, timeout=timeout, auto_renew=auto_renew,
                                   on_lost=on_lost)

    def release(self) -> str:
        return "ok" if self.primitive.release() else "not-owned"


def make_adapter(w: Workload, client: Any, on_lost: Callable[[Any], None], rng: Any = None) -> Any:
    kind = w.kind
    if kind == "lock":
        return CoordLock(client, w.name, w.ttl)
    if kind == "lock-renew":
        return CoordLock(client, w.name, w.ttl, auto_renew=True, on_lost=on_lost)
    if kind == "lock-reentrant":
        return CoordLock(client, w.name, w.ttl, reentrant=True)
    if kind == "semaphore":
        return CoordSemaphore(client, w.name, w.ttl, w.limit)
    if kind == "semaphore-renew":
        return CoordSemaphore(client, w.name, w.ttl, w.limit, auto_renew=True, on_lost=on_lost)
    if kind == "get-then-del":
        return GetThenDelLock(client, w.name, w.ttl, gap=w.gap)
    if kind == "tokenless":
        return TokenlessLock(client, w.name, w.ttl)
    if kind == "racy-fence":
        return RacyFenceLock(client, w.name, w.ttl, gap=w.gap)
    if kind == "racy-semaphore":
        return RacySemaphore(client, w.name, w.limit, w.ttl)
    raise ValueError(f"unknown kind {kind!r}")


SEMAPHORE_KINDS = ("semaphore", "semaphore-renew", "racy-semaphore")
UNSAFE_KINDS = ("get-then-del", "tokenless", "racy-fence", "racy-semaphore")


# -- the workload -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """What every client does; times in seconds."""

    kind: str = "lock"
    name: str = "safety"
    lock_url: str = ""
    resource_url: str = ""
    processes: int = 4
    rounds: int = 10
    duration: Optional[float] = None
    ttl: float = 0.25
    hold: tuple[float, float] = (0.001, 0.01)
    stall: float = 0.0
    stall_for: float = 0.0
    blocking_timeout: float = 3.0
    #: Writes under a hold through fenced_set (else a plain HSET).
    fenced: bool = True
    #: Reads under a hold fenced too (else a plain read, which does not record the reader's fence).
    fenced_reads: bool = True
    socket_timeout: Optional[float] = 2.0
    #: How often redis-py retries a call that hit a connection error or timeout (None: its default,
    #: 3 retries with backoff, each reconnecting - through a blackhole that is many socket timeouts).
    retries: Optional[int] = 1
    limit: int = 1
    #: Time between the two round trips of the unsafe locks (a slow network or a paused client);
    #: for ``lock-reentrant``, between the grant and the re-entry (a process stalled in between).
    gap: float = 0.0
    #: With ``duration``: a multiprocessing Event the clients also wait for before they stop (a
    #: nemesis's :attr:`Nemesis.finished`: its last fault and a quiet time after it were run,
    #: however long a loaded machine took over them).
    until: Any = None
    seed: int = 0
    #: Sleep after a call whose outcome is unknown (the server is probably gone).
    backoff: float = 0.05

    @property
    def is_semaphore(self) -> bool:
        return self.kind in SEMAPHORE_KINDS

    def with_(self, **changes: Any) -> Workload:
        return replace(self, **changes)


def _connect(url: str, w: Workload) -> Any:
    options: dict[str, Any] = {"socket_timeout": w.socket_timeout, "socket_connect_timeout": w.socket_timeout}
    if w.retries is not None:
        options["retry"] = Retry(NoBackoff(), w.retries)
    return redis.Redis.from_url(url, **options)


def client_main(w: Workload, index: int, make: Optional[Callable[..., Any]] = None,
                hold: Optional[Callable[..., None]] = None) -> list:
    """One client process: run ``w.rounds`` holds (or until ``w.duration``) and return its events.

    ``make(w, client, on_lost, rng)`` gives the adapter of each hold (default :func:`make_adapter`),
    ``hold(w, rng, rec, adapter, resource, element)`` does the work under it (default :func:`_hold`);
    what an adapter's ``details`` say is recorded with its grant."""
    make = make or make_adapter
    hold = hold or _hold
    rng = random.Random(w.seed * 1000 + index)
    rec = Recorder(index)
    lock_client = _connect(w.lock_url, w)
    resource = Resource(_connect(w.resource_url or w.lock_url, w), w.name)
    stop_at = time.monotonic() + w.duration if w.duration else None

    def on_lost(_: Any) -> None:
        rec.note("lost")

    for round_no in range(w.rounds if stop_at is None else 10**9):
        if stop_at is not None and time.monotonic() >= stop_at and (w.until is None or w.until.is_set()):
            break
        adapter = make(w, lock_client, on_lost, rng)
        rec.invoke("acquire", {"blocking_timeout": w.blocking_timeout, **adapter.details})
        try:
            got = adapter.acquire(w.blocking_timeout)
        except IO_ERRORS as exc:
            rec.info("acquire", type(exc).__name__)
            time.sleep(w.backoff)
            continue
        if not got:
            rec.fail("acquire", "timed out")
            continue
        rec.ok("acquire", {"fence": adapter.fence, "deadline": adapter.deadline_ns(), **adapter.details})
        try:
            hold(w, rng, rec, adapter, resource, f"{index}-{round_no}")
        except IO_ERRORS:
            time.sleep(w.backoff)
        _release(w, rec, adapter)
    return rec.events


def _hold(w: Workload, rng: random.Random, rec: Recorder, adapter: Any, resource: Resource, element: str) -> None:
    """Everything done under one hold; a network error ends it early (the caller releases)."""
    if w.kind != "lock-reentrant":
        _protected_update(w, rng, rec, adapter, resource, element)
        return
    time.sleep(w.gap)
    rec.invoke("acquire", {"reentrant": True})
    try:
        fence = adapter.reenter()
    except LockLostError:
        # The hold's TTL ran out before the re-entry (the process stalled): there is nothing to
        # join, and the work under it is not done.  The client learns of its loss here, as a renewed
        # hold's learns from the loss signal (a note the checkers end the hold at); the re-entry
        # took no hold (the checkers judge no nested call), and the release that follows is refused
        # or comes before the server's expiry, as for any hold that outlived its TTL.
        rec.fail("acquire", {"reentered": True, "lost": True})
        rec.note("lost")
        return
    rec.ok("acquire", {"fence": fence, "reentered": True})
    try:
        _protected_update(w, rng, rec, adapter, resource, element)
    finally:
        rec.invoke("release", {"inner": True})
        adapter.release_inner()
        rec.ok("release")


def _protected_update(w: Workload, rng: random.Random, rec: Recorder, adapter: Any, resource: Resource,
                      element: str) -> None:
    """Read the set, hold a while (maybe stalling), write it back with one more element."""
    fence = adapter.fence
    fenced = w.fenced and fence is not None
    if not w.is_semaphore:
        rec.invoke("read", {"fence": fence})
        try:
            elements = resource.fenced_read(fence) if fenced and w.fenced_reads else resource.read()
        except IO_ERRORS as exc:
            rec.info("read", type(exc).__name__)
            raise
        if elements is None:
            rec.fail("read", "stale fence")
            return
        rec.ok("read", len(elements))
    pause = rng.uniform(*w.hold)
    if w.stall and rng.random() < w.stall:
        pause = w.stall_for
    time.sleep(pause)
    if w.is_semaphore:
        return
    rec.invoke("write", {"fence": fence, "element": element})
    try:
        stored = resource.fenced_write(fence, [*elements, element]) if fenced else resource.write([*elements, element])
    except IO_ERRORS as exc:
        rec.info("write", type(exc).__name__)
        raise
    if stored:
        rec.ok("write")
    else:
        rec.fail("write", "stale fence")


def _release(w: Workload, rec: Recorder, adapter: Any) -> None:
    """Release; on an unknown outcome try once more after a pause (each try is its own call)."""
    for attempt in range(2):
        rec.invoke("release", {"deadline": adapter.deadline_ns(), "attempt": attempt})
        try:
            outcome = adapter.release()
        except IO_ERRORS as exc:
            rec.info("release", type(exc).__name__)
            time.sleep(w.backoff)
            continue
        if outcome.startswith("ok"):
            rec.ok("release", outcome)
        else:
            rec.fail("release", outcome)
        return


# -- running clients ----------------------------------------------------------------------------
def _child(w: Workload, index: int, queue: Any, main: Callable[[Any, int], list] = client_main) -> None:
    try:
        queue.put((index, True, main(w, index)))
    except BaseException as exc:  # reported to the parent
        import traceback

        queue.put((index, False, "".join(traceback.format_exception(exc))))


class Nemesis:
    """A fault injector: a thread calling ``step()`` every ``every`` seconds until stopped (or,
    with ``stop_after``, until that many seconds after it started, or with ``count``, after that
    many faults, leaving the rest of the run fault-free).  :attr:`finished` is set ``quiet_for``
    seconds after its last fault (give it to :attr:`Workload.until`)."""

    def __init__(self, every: float, stop_after: Optional[float] = None, count: Optional[int] = None,
                 quiet_for: float = 0.0) -> None:
        from tests.support.procs import CTX

        self.every = every
        self.stop_after = stop_after
        self.count = count
        self.quiet_for = quiet_for
        self.finished = CTX.Event()
        self.faults = 0
        self.log: list[str] = []
        #: ``monotonic_ns`` instants at which each fault began.
        self.times: list[int] = []
        self.procs: list[Any] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None

    def start(self, procs: list[Any]) -> None:
        self.procs = procs
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        try:
            while not self._stop.wait(self.every):
                if self.stop_after is not None and time.monotonic() - started > self.stop_after:
                    break
                self.step()
                if self.count is not None and self.faults >= self.count:
                    break
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
        finally:
            self.heal()
        self._stop.wait(self.quiet_for)
        self.finished.set()

    def step(self) -> None:
        raise NotImplementedError

    def heal(self) -> None:
        """Undo any fault still in force."""

    def stop(self) -> None:
        self._stop.set()
        self.finished.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.error is not None:
            raise self.error

    def record(self, message: str) -> None:
        self.times.append(time.monotonic_ns())
        self.faults += 1
        self.log.append(f"{time.monotonic():.3f} {message}")


class PauseNemesis(Nemesis):
    """SIGSTOP one running client for ``pause`` seconds, then SIGCONT it."""

    def __init__(self, every: float, pause: float, seed: int = 0) -> None:
        super().__init__(every)
        self.pause = pause
        self.rng = random.Random(seed)
        self._stopped: Optional[int] = None

    def target(self) -> Optional[tuple[int, str]]:
        """The pid to stop and how to describe it (None: nobody this time)."""
        alive = [proc for proc in self.procs if proc.is_alive()]
        if not alive:
            return None
        pid = self.rng.choice(alive).pid
        return pid, f"client pid {pid}"

    def step(self) -> None:
        chosen = self.target()
        if chosen is None:
            return
        pid, what = chosen
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        self._stopped = pid
        self.record(f"SIGSTOP {what} for {self.pause}s")
        time.sleep(self.pause)
        self.heal()

    def heal(self) -> None:
        if self._stopped is not None:
            try:
                os.kill(self._stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self._stopped = None


class HolderPauseNemesis(PauseNemesis):
    """SIGSTOP the client that holds the lock right now (found from the holder's metadata)."""

    def __init__(self, url: str, name: str, every: float, pause: float) -> None:
        super().__init__(every, pause)
        self.client = redis.Redis.from_url(url, socket_timeout=2.0)
        self.name = name

    def target(self) -> Optional[tuple[int, str]]:
        from django_redis_coord import lock_holder

        holder = lock_holder(self.client, self.name)
        pids = {proc.pid for proc in self.procs if proc.is_alive()}
        if holder is None or holder.pid not in pids:
            return None
        return holder.pid, f"holder pid {holder.pid} (fence {holder.fence})"


class RestartNemesis(Nemesis):
    """SIGKILL the lock's redis-server (no persistence) and start it again after ``down_for``."""

    def __init__(self, server: Any, every: float, down_for: float, stop_after: Optional[float] = None,
                 count: Optional[int] = None, quiet_for: float = 0.0) -> None:
        super().__init__(every, stop_after, count, quiet_for)
        self.server = server
        self.down_for = down_for

    def step(self) -> None:
        self.server.kill()
        self.record(f"SIGKILL redis-server :{self.server.port}, down for {self.down_for}s")
        time.sleep(self.down_for)
        self.heal()

    def heal(self) -> None:
        if self.server.process is None:
            self.server.start()


class ProxyNemesis(Nemesis):
    """Alternate latency and blackholes on a :class:`tests.safety.proxy.Proxy`."""

    def __init__(self, proxy: Any, every: float, latency: float, blackhole_for: float, seed: int = 0) -> None:
        super().__init__(every)
        self.proxy = proxy
        self.latency = latency
        self.blackhole_for = blackhole_for
        self.rng = random.Random(seed)

    def step(self) -> None:
        if self.rng.random() < 0.5:
            self.proxy.set_latency(self.latency)
            self.record(f"latency {self.latency * 1000:.0f} ms")
            time.sleep(self.blackhole_for)
            self.proxy.set_latency(0.0)
        else:
            self.proxy.blackhole()
            self.record(f"blackhole for {self.blackhole_for}s")
            time.sleep(self.blackhole_for)
            self.proxy.heal()

    def heal(self) -> None:
        self.proxy.heal()
        self.proxy.set_latency(0.0)


@dataclass
class Outcome:
    """A finished run: the merged history, the final protected set and the checkers' report."""

    workload: Workload
    history: History
    final: Optional[list[str]]
    report: Report
    faults: int = 0
    fault_log: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    fault_times: list[int] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return self.report.violations

    def count(self, f: str, kind: str) -> int:
        return sum(1 for op in self.history.operations() if op.f == f and op.type == kind)

    def describe(self) -> str:
        w = self.workload
        fencing = "fenced reads and writes" if w.fenced and w.fenced_reads else (
            "fenced writes" if w.fenced else "plain reads and writes")
        return (f"{w.kind} x{w.processes} ({fencing}): "
                f"{len(self.history)} events, {self.faults} faults, {self.violations} violations\n{self.report}")


def run_clients(w: Workload, nemesis: Optional[Nemesis] = None, timeout: float = 120.0,
                main: Callable[[Any, int], list] = client_main) -> list[list]:
    """Run ``w.processes`` clients, each ``main(w, index)`` (with the nemesis meanwhile); return
    each client's events.

    Raises AssertionError if a client failed or did not finish within ``timeout`` (a hang).
    """
    from tests.support.procs import CTX

    queue = CTX.Queue()
    procs = [CTX.Process(target=_child, args=(w, index, queue, main), daemon=True) for index in range(w.processes)]
    for proc in procs:
        proc.start()
    if nemesis is not None:
        nemesis.start(procs)
    results: dict[int, list] = {}
    failure: Optional[str] = None
    try:
        stop_at = time.monotonic() + timeout
        while len(results) < len(procs):
            remaining = stop_at - time.monotonic()
            if remaining <= 0:
                failure = f"{len(procs) - len(results)} of {len(procs)} clients did not finish within {timeout}s"
                break
            try:
                index, ok, value = queue.get(timeout=min(remaining, 1.0))
            except Exception:  # queue.Empty
                continue
            if not ok:
                failure = f"client {index} failed:\n{value}"
                break
            results[index] = value
    finally:
        if nemesis is not None:
            nemesis.stop()
        for proc in procs:
            if proc.is_alive() and failure is not None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.join(10)
    if failure is not None:
        raise AssertionError(failure)
    return [results[index] for index in sorted(results)]


def run_workload(w: Workload, nemesis: Optional[Nemesis] = None, timeout: float = 120.0,
                 linearizability: bool = True, main: Callable[[Any, int], list] = client_main,
                 check: Optional[Callable[[History, list[str]], Report]] = None) -> Outcome:
    """Clear the resource, run the clients (each ``main(w, index)``), read the final set and check
    the history (``check(history, final)``, by default the lock's or the semaphore's checkers)."""
    resource_client = redis.Redis.from_url(w.resource_url or w.lock_url)
    resource = Resource(resource_client, w.name)
    resource.clear()
    lock_client = redis.Redis.from_url(w.lock_url)
    try:
        lock_client.delete(w.name, w.name + ":fence", f"semaphore::{w.name}::holders")
    except IO_ERRORS:
        pass
    started = time.monotonic()
    per_process = run_clients(w, nemesis, timeout, main)
    elapsed = time.monotonic() - started
    history = History.merge(per_process)
    if check is not None:
        final = resource.read()
        report = check(history, final)
    elif w.is_semaphore:
        report = check_semaphore_history(history, w.limit)
        final = None
    else:
        final = resource.read()
        report = check_lock_history(history, final, linearizability=linearizability)
    resource_client.close()
    lock_client.close()
    return Outcome(w, history, final, report, nemesis.faults if nemesis else 0,
                   nemesis.log if nemesis else [], elapsed, nemesis.times if nemesis else [])
