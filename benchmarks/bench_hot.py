"""The hot path: what one uncontended acquire + release costs the client and the server.

One client on the private redis-server; each library's pair (acquire, release) on its own name:

* ``raw`` — the floor: ``SET name token NX PX`` and a Lua compare-and-delete by EVALSHA;
* ``redis-py`` — redis-py's ``Lock``; ``python-redis-lock`` — its ``Lock`` (a dev extra);
* ``ours`` — ``Lock``; ``ours sem`` — a ``Semaphore`` permit (limit 3); ``ours rw read`` —
  ``ReadWriteLock.read``;
* with ``DCOORD_BENCH_BASE=/path/to/an/older/checkout`` the same three of that checkout, named
  ``base …`` (the package is imported from there under another name), for a before/after in one run.

*pairs/s* comes from :func:`benchmarks.common.interleaved_pairs` (the libraries take turns in
short slices). *server µs/pair*: per round and library, the statistics are reset, 200 pairs run
and INFO commandstats read; the time is the ``usec`` of the commands the library sends itself
(``SET``, ``EVALSHA``: a script's time includes the commands it runs, which commandstats also
counts under their own names; those are not added again). commandstats counts wall time, which
a loaded machine stretches when it takes the CPU from redis-server in the middle of a command:
fifteen short rounds, alternating; the median is reported, and *x floor* is the median of each
round's ratio to the floor.
"""

from __future__ import annotations

import importlib
import os
import secrets
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from benchmarks.common import Context, Section, interleaved_pairs, sent_usec

ROUNDS = 3
#: The server's time is measured in more, shorter rounds (see the module's text).
SERVER_ROUNDS = 15
SERVER_PAIRS = 200
#: The commands each library sends itself (the others in commandstats ran inside its scripts).
SCRIPTED = ("evalsha", "eval", "fcall")
SENT = {"raw": ("set", "evalsha"), "redis-py": ("set", "evalsha"), "python-redis-lock": ("set", "evalsha")}
#: Targets (ratios in the same run).
LOCK_PAIRS, LOCK_SERVER = 0.9, 4.0
SEM_PAIRS, SEM_SERVER = 0.8, 6.0
RW_PAIRS = 0.8


class RawLock:
    """The floor: SET NX PX, then a Lua compare-and-delete."""

    CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"

    def __init__(self, client: Any, name: str) -> None:
        self.client, self.name = client, name
        self.cad = client.register_script(self.CAD)
        self.token = b""

    def acquire(self) -> bool:
        self.token = secrets.token_hex(16).encode()
        return bool(self.client.set(self.name, self.token, nx=True, px=10_000))

    def release(self) -> None:
        if not self.cad(keys=[self.name], args=[self.token]):
            raise RuntimeError("raw lock was not held at release")


def base_package() -> Optional[Any]:
    """The package of the checkout named by ``DCOORD_BENCH_BASE``, imported as ``dcoord_base``."""
    root = os.environ.get("DCOORD_BENCH_BASE")
    if not root:
        return None
    folder = Path(tempfile.mkdtemp(prefix="dcoord-base-"))
    (folder / "dcoord_base").symlink_to(Path(root).resolve() / "django_redis_coord")
    sys.path.insert(0, str(folder))
    return importlib.import_module("dcoord_base")


def make_pairs(client: Any) -> dict[str, Callable[[], None]]:
    """``{library: one acquire + release}``."""
    from redis.lock import Lock as RedisPyLock

    import django_redis_coord as ours

    objects: dict[str, tuple[Any, Any]] = {}
    raw = RawLock(client, "hot:raw")
    objects["raw"] = (raw.acquire, raw.release)
    redis_py = RedisPyLock(client, "hot:redis-py", timeout=10)
    objects["redis-py"] = (redis_py.acquire, redis_py.release)
    try:
        import redis_lock
    except ImportError:
        pass
    else:
        prl = redis_lock.Lock(client, "hot:prl", expire=10)
        objects["python-redis-lock"] = (prl.acquire, prl.release)
    packages = [("ours", ours)]
    base = base_package()
    if base is not None:
        packages.append(("base", base))
    for label, package in packages:
        lock = package.Lock(client, f"hot:{label}:lock", timeout=10)
        objects[label] = (lock.acquire, lock.release)
        semaphore = package.Semaphore(client, f"hot:{label}:sem", limit=3, timeout=10)
        objects[f"{label} sem"] = (semaphore.acquire, semaphore.release)
        rw = package.ReadWriteLock(client, f"hot:{label}:rw", timeout=10)
        objects[f"{label} rw read"] = (rw.read.acquire, rw.read.release)

    def pair_of(acquire: Callable[[], Any], release: Callable[[], Any], lib: str) -> Callable[[], None]:
        def pair() -> None:
            if not acquire():
                raise RuntimeError(f"{lib}: an uncontended acquire failed")
            release()
        return pair

    return {lib: pair_of(acquire, release, lib) for lib, (acquire, release) in objects.items()}


def server_usec(client: Any, lib: str, pair: Callable[[], None]) -> float:
    """Server µs of one pair of ``lib``: INFO commandstats of the commands it sends itself."""
    return sent_usec(client, pair, SERVER_PAIRS, SENT.get(lib, SCRIPTED))


def run(ctx: Context) -> Section:
    section = Section("hot", "The hot path: one uncontended acquire + release")
    section.text(__doc__.split("\n\n", 1)[1])
    client = ctx.client()
    pairs = make_pairs(client)
    for pair in pairs.values():  # load the scripts: no measured call pays a NOSCRIPT
        for _ in range(20):
            pair()
    libs = list(pairs)
    ctx.log("client pairs/s")
    seconds = ctx.size(2.0, 0.3)
    rates = interleaved_pairs(ctx, pairs, seconds, ROUNDS, floor="raw")
    ctx.log("server µs per pair")
    usec: dict[str, list[float]] = {lib: [] for lib in libs}
    for round_no in range(SERVER_ROUNDS):
        order = libs[round_no % len(libs):] + libs[:round_no % len(libs)]
        for lib in order:
            usec[lib].append(server_usec(client, lib, pairs[lib]))
    client.close()

    rows = []
    per_s = {lib: statistics.median(rates["rates"][lib]) for lib in libs}
    vs_redis_py = {lib: statistics.median(r / p for r, p in zip(rates["rates"][lib], rates["rates"]["redis-py"]))
                   for lib in libs}
    server = {lib: statistics.median(usec[lib]) for lib in libs}
    vs_floor = {lib: statistics.median(u / f for u, f in zip(usec[lib], usec["raw"])) for lib in libs}
    for lib in libs:
        section.figure(f"pairs_per_s.{lib}", per_s[lib])
        section.figure(f"pairs_vs_redis_py.{lib}", vs_redis_py[lib])
        section.figure(f"server_usec.{lib}", server[lib])
        section.figure(f"server_vs_floor.{lib}", vs_floor[lib])
        rows.append([lib, per_s[lib], f"{vs_redis_py[lib]:.2f}x", server[lib], f"{vs_floor[lib]:.2f}x"])
    section.table(["library", "client pairs/s", "x redis-py Lock", "redis-server µs/pair", "x floor"], rows)
    if os.environ.get("DCOORD_BENCH_BASE"):
        section.text(f"*base …*: the package of `{os.environ['DCOORD_BENCH_BASE']}` (`DCOORD_BENCH_BASE`), "
                     "measured in the same run.")
    if "python-redis-lock" not in pairs:
        section.text("python-redis-lock is not installed (a dev extra): left out.")
    section.check("Lock pairs/s vs redis-py Lock", vs_redis_py["ours"], ">=", LOCK_PAIRS)
    section.check("Lock server µs vs the floor", vs_floor["ours"], "<=", LOCK_SERVER)
    section.check("Semaphore pairs/s vs redis-py Lock", vs_redis_py["ours sem"], ">=", SEM_PAIRS)
    section.check("Semaphore server µs vs the floor", vs_floor["ours sem"], "<=", SEM_SERVER)
    section.check("ReadWriteLock.read pairs/s vs redis-py Lock", vs_redis_py["ours rw read"], ">=", RW_PAIRS)
    return section
