"""Shared machinery of the benchmark modules: the run context, report sections and measuring helpers.

See benchmarks/README.md for how a ``bench_*.py`` module plugs in.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import multiprocessing
import os
import platform
import secrets
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from django_redis_coord.testing.server import RedisServer

RESULTS_DIR = Path(__file__).resolve().parent / "results"
FORK = multiprocessing.get_context("fork")

OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
}


# -- report sections ---------------------------------------------------------------------------
@dataclass
class Check:
    """A target: ``value op target`` (e.g. ``0.97 >= 0.95``), met or missed."""

    label: str
    value: float
    op: str
    target: float

    @property
    def passed(self) -> bool:
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return False
        return bool(OPS[self.op](self.value, self.target))

    @property
    def mark(self) -> str:
        return "✅" if self.passed else "❌"

    def line(self) -> str:
        return f"{self.mark} {self.label}: {fmt(self.value)} (target {self.op} {fmt(self.target)})"

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "value": self.value, "op": self.op, "target": self.target, "passed": self.passed}


@dataclass
class Section:
    """What one benchmark module returns: figures, target checks and Markdown blocks in order."""

    name: str
    title: str
    figures: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    pending_plots: list[tuple[str, Any]] = field(default_factory=list)
    echo: bool = True

    def figure(self, key: str, value: float, label: str = "") -> float:
        """Record a named figure (printed now, written to the JSON report)."""
        self.figures[key] = value
        if label:
            self.labels[key] = label
        if self.echo:
            print(f"  {key:<48} {fmt(value):>12}  {label}", flush=True)
        return value

    def check(self, label: str, value: float, op: str, target: float) -> Check:
        """Record a target; it is shown with a met/missed mark in the report and on stdout."""
        if op not in OPS:
            raise ValueError(f"unknown comparison {op!r}")
        item = Check(label, value, op, target)
        self.checks.append(item)
        if self.echo:
            print(f"  {item.line()}", flush=True)
        return item

    def text(self, markdown: str) -> None:
        self.blocks.append(markdown.strip("\n"))

    def heading(self, title: str, level: int = 2) -> None:
        self.blocks.append("#" * level + " " + title)

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
        """Append a Markdown table (numbers are formatted with :func:`fmt`); returns it."""
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
        for row in rows:
            lines.append("| " + " | ".join(cell if isinstance(cell, str) else fmt(cell) for cell in row) + " |")
        markdown = "\n".join(lines)
        self.blocks.append(markdown)
        if self.echo:
            print("\n" + markdown + "\n", flush=True)
        return markdown

    def plot(self, filename: str, figure: Any, caption: str = "") -> None:
        """Save a matplotlib figure beside the report (when it is written) and link it."""
        self.pending_plots.append((filename, figure))
        self.plots.append(filename)
        self.blocks.append(f"![{caption or filename}]({filename})")

    def checks_markdown(self) -> str:
        if not self.checks:
            return ""
        rows = ["| target | value | goal | |", "| --- | --- | --- | --- |"]
        for item in self.checks:
            rows.append(f"| {item.label} | {fmt(item.value)} | {item.op} {fmt(item.target)} | {item.mark} |")
        return "\n".join(rows)


def fmt(value: Any) -> str:
    """Compact number formatting for tables and stdout."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if math.isinf(value):
            return "∞"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.0f}"
        if magnitude >= 10:
            return f"{value:.1f}"
        if magnitude >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


# -- the run context ---------------------------------------------------------------------------
class Context:
    """Everything a module's ``run(ctx)`` gets: the private server, sizes, output folder."""

    def __init__(self, server: RedisServer, *, quick: bool = False, results_dir: Optional[Path] = None,
                 verbose: bool = True) -> None:
        self.server = server
        self.quick = quick
        self.results_dir = Path(results_dir or RESULTS_DIR)
        self.verbose = verbose
        self._extra: list[RedisServer] = []

    def client(self, **kwargs: Any) -> Any:
        return self.server.client(**kwargs)

    def flush(self) -> None:
        client = self.client()
        try:
            client.flushall()
            client.config_resetstat()
        finally:
            client.close()

    def size(self, full: Any, quick: Any) -> Any:
        return quick if self.quick else full

    def extra_servers(self, count: int) -> list[RedisServer]:
        servers = [RedisServer(binary=self.server.binary).start() for _ in range(count)]
        self._extra.extend(servers)
        return servers

    def log(self, message: str) -> None:
        if self.verbose:
            print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    def close(self) -> None:
        for server in self._extra:
            server.cleanup()
        self._extra.clear()

    def redis_version(self) -> str:
        client = self.client()
        try:
            return str(client.info("server").get("redis_version", "?"))
        finally:
            client.close()


# -- measuring helpers ---------------------------------------------------------------------------
def commandstats(client: Any) -> dict[str, int]:
    """``{command: calls}`` from INFO commandstats (lower-case names, e.g. ``evalsha``, ``set``)."""
    stats = client.info("commandstats")
    out: dict[str, int] = {}
    for key, value in stats.items():
        name = key[len("cmdstat_"):] if key.startswith("cmdstat_") else key
        calls = value.get("calls", 0) if isinstance(value, dict) else 0
        out[name] = int(calls)
    return out


IGNORED_COMMANDS = frozenset({"info", "config|resetstat", "config", "flushall", "script|load", "script",
                              "client|setinfo", "client", "hello", "ping", "select", "time"})


def commands_delta(before: dict[str, int], after: dict[str, int], ignore: frozenset = IGNORED_COMMANDS) -> int:
    """Commands executed between two :func:`commandstats` snapshots, leaving out bookkeeping commands.

    Commands run inside a Lua script are not counted by INFO commandstats under their own name in
    Redis 7+ but are in Redis 6; scripted calls are therefore subtracted: only top-level client
    commands (each EVAL/EVALSHA counting once) are totalled.
    """
    total = 0
    for name, calls in after.items():
        if name in ignore:
            continue
        total += calls - before.get(name, 0)
    return total


def sent_usec(client: Any, call: Callable[[], Any], calls: int, sent: Iterable[str]) -> float:
    """Server µs of one ``call()``: the statistics reset, ``calls`` calls run, then the ``usec`` of
    the commands named ``sent`` in INFO commandstats (those the caller sends itself: a script's
    time includes the commands it runs, which commandstats also counts under their own names)."""
    client.config_resetstat()
    for _ in range(calls):
        call()
    stats = client.info("commandstats")
    names = set(sent)
    return sum(value["usec"] for key, value in stats.items() if key.removeprefix("cmdstat_") in names) / calls


def connection_counts(admin: Any, name: str) -> tuple[int, int, int]:
    """The client connections named ``name`` (a client made with ``client_name=name``: every
    connection of its pool, pub/sub ones included, carries it) as ``CLIENT LIST`` shows them now:
    how many in all, how many blocked in a command (flag ``b``) and how many subscribed (flag
    ``P``, or ``sub``/``psub`` above 0)."""
    total = blocked = subscribed = 0
    for entry in admin.client_list():
        if entry.get("name") != name:
            continue
        total += 1
        flags = entry.get("flags", "")
        blocked += "b" in flags
        subscribed += "P" in flags or int(entry.get("sub", 0)) > 0 or int(entry.get("psub", 0)) > 0
    return total, blocked, subscribed


class CommandMonitor:
    """Counts, with ``MONITOR`` on a connection of its own, the commands the clients *send*.

    Used as a context manager around a run.  Commands run inside a Lua script (shown by MONITOR as
    ``[0 lua]``) are left out, and so are the benchmark's own: those of this object's admin
    connection (the end marker) and connection set-up (:data:`HANDSHAKE_COMMANDS`).  ``counts``
    is ``{COMMAND: calls}`` once the block has ended.  MONITOR slows the server down: measure
    speed in runs without it.
    """

    def __init__(self, server: RedisServer, wait: float = 60.0) -> None:
        self.server = server
        self.wait = wait
        self.counts: dict[str, int] = {}
        self._marker = "bench-monitor-end-" + secrets.token_hex(8)
        self._error: Optional[BaseException] = None

    def __enter__(self) -> CommandMonitor:
        self._client = self.server.client()
        self._admin = self.server.client()
        self._admin_addr = str(self._admin.client_info()["addr"])
        self._monitor = self._client.monitor().__enter__()  # MONITOR sent, its OK read
        self._thread = threading.Thread(target=self._read, name="bench monitor", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        try:
            while True:
                entry = self._monitor.next_command()
                if entry is None or entry["client_type"] == "lua":
                    continue
                words = entry["command"].split(" ", 1)
                if f"{entry['client_address']}:{entry['client_port']}" == self._admin_addr:
                    if self._marker in entry["command"]:
                        return
                    continue
                name = words[0].upper()
                if name not in HANDSHAKE_COMMANDS:
                    self.counts[name] = self.counts.get(name, 0) + 1
        except BaseException as exc:  # reported by __exit__
            self._error = exc

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self._admin.echo(self._marker)  # the reader stops when it reads this
            self._thread.join(self.wait)
        finally:
            self._monitor.__exit__(*exc_info)
            self._admin.close()
            self._client.close()
        if self._thread.is_alive():
            raise RuntimeError(f"MONITOR output not read to its end within {self.wait:g} s")
        if self._error is not None:
            raise RuntimeError("reading MONITOR failed") from self._error


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) with linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    data = sorted(values)
    if len(data) == 1:
        return float(data[0])
    rank = (len(data) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return float(data[low] + (data[high] - data[low]) * (rank - low))


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": float(max(values)) if values else float("nan"),
        "mean": float(statistics.fmean(values)) if values else float("nan"),
    }


def held_fraction(intervals: Iterable[tuple[int, int]], start: int, end: int) -> float:
    """Length of the union of ``(start, end)`` intervals clipped to ``[start, end]``, over ``end - start``."""
    if end <= start:
        return float("nan")
    covered = 0
    cur_start: Optional[int] = None
    cur_end = 0
    for a, b in sorted(intervals):
        a, b = max(a, start), min(b, end)
        if b <= a:
            continue
        if cur_start is None or a > cur_end:
            if cur_start is not None:
                covered += cur_end - cur_start
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    if cur_start is not None:
        covered += cur_end - cur_start
    return covered / (end - start)


def overlaps(holds: Iterable[tuple[int, int, Any]]) -> int:
    """Number of holds ``(start, end, holder)`` that began before an earlier hold of another holder ended."""
    count = 0
    latest_end = -1
    latest_holder: Any = None
    for a, b, who in sorted(holds, key=lambda h: (h[0], h[1])):
        if a < latest_end and who != latest_holder:
            count += 1
        if b > latest_end:
            latest_end, latest_holder = b, who
    return count


PAIR_SLICE = 0.05  # seconds per library before switching to the next one
PAIR_BLOCK = 10    # pairs timed together for the per-pair time distribution


def interleaved_pairs(ctx: Context, pairs: dict[str, Callable[[], Any]], seconds: float, rounds: int,
                      floor: str = "raw") -> dict[str, Any]:
    """Calls per second of each ``pairs`` function (an acquire+release pair), next to ``floor``.

    See :func:`interleaved_blocks`; here each block is PAIR_BLOCK calls of the function.
    """
    def block_of(pair: Callable[[], Any]) -> Callable[[], None]:
        def block() -> None:
            for _ in range(PAIR_BLOCK):
                pair()
        return block

    return interleaved_blocks(ctx, {lib: block_of(pair) for lib, pair in pairs.items()}, PAIR_BLOCK, seconds,
                              rounds, floor)


def interleaved_blocks(ctx: Context, blocks: dict[str, Callable[[], Any]], size: int, seconds: float,
                       rounds: int, floor: str) -> dict[str, Any]:
    """Pairs per second of each library, whose ``blocks`` function runs ``size`` pairs.

    The libraries take turns in slices of PAIR_SLICE seconds (the order rotating), so that all of
    them see the same background load on a shared machine.  Per round: each one's throughput and
    its ratio to the floor's throughput in that round.  Over all rounds: the time of a pair in
    each block (``pair_times``) and the rate from their median (``typical``), which is the least
    sensitive to other processes' bursts.
    """
    libs = list(blocks)
    rates: dict[str, list[float]] = {lib: [] for lib in libs}
    ratios: dict[str, list[float]] = {lib: [] for lib in libs}
    pair_times: dict[str, list[float]] = {lib: [] for lib in libs}
    slices = max(1, round(seconds / PAIR_SLICE))
    for round_no in range(rounds):
        calls = dict.fromkeys(libs, 0)
        spent = dict.fromkeys(libs, 0.0)
        for slice_no in range(slices):
            shift = (round_no * slices + slice_no) % len(libs)
            for lib in libs[shift:] + libs[:shift]:
                block = blocks[lib]
                started = time.perf_counter()
                stop_at = started + PAIR_SLICE
                now = started
                while now < stop_at:
                    block()
                    block_end = time.perf_counter()
                    pair_times[lib].append((block_end - now) / size)
                    now = block_end
                    calls[lib] += size
                spent[lib] += now - started
        this_round = {lib: calls[lib] / spent[lib] for lib in libs}
        for lib in libs:
            rates[lib].append(this_round[lib])
            ratios[lib].append(this_round[lib] / this_round[floor])
        ctx.log(f"pairs/s round {round_no + 1}: " + ", ".join(f"{k} {v:.0f}" for k, v in this_round.items()))
    typical = {lib: 1.0 / statistics.median(pair_times[lib]) for lib in libs}
    return {"rates": rates, "ratios": ratios, "pair_times": pair_times, "typical": typical,
            "typical_ratio": {lib: typical[lib] / typical[floor] for lib in libs}}


def run_workers(target: Callable[..., Any], args_list: Iterable[tuple], timeout: float = 120.0) -> list[Any]:
    """Run ``target(*args)`` in one forked OS process per ``args``; return their results in order."""
    queue = FORK.Queue()
    args_list = list(args_list)
    procs = [FORK.Process(target=_worker_main, args=(index, target, args, queue), daemon=True)
             for index, args in enumerate(args_list)]
    for proc in procs:
        proc.start()
    results: list[Any] = [None] * len(procs)
    deadline = time.monotonic() + timeout
    try:
        for _ in procs:
            index, ok, value = queue.get(timeout=max(0.1, deadline - time.monotonic()))
            if not ok:
                raise RuntimeError(f"benchmark worker {index} failed:\n{value}")
            results[index] = value
    finally:
        for proc in procs:
            proc.join(max(0.1, min(5.0, deadline - time.monotonic())))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
    return results


def _worker_main(index: int, target: Callable[..., Any], args: tuple, queue: Any) -> None:
    try:
        queue.put((index, True, target(*args)))
    except BaseException:
        queue.put((index, False, traceback.format_exc()))


def sleep_until_ns(instant_ns: int) -> None:
    """Sleep until ``time.monotonic_ns()`` reaches ``instant_ns`` (one clock shared by all processes)."""
    remaining = instant_ns - time.monotonic_ns()
    if remaining > 0:
        time.sleep(remaining / 1e9)


#: The CPU placements :func:`placement_round_trips` measures: (label, redis-server's CPU, client's CPU),
#: CPU indexes into the CPUs this process may use; ``None``: wherever the scheduler puts it.
PLACEMENTS = (("wherever the scheduler puts them", None, None), ("on the same CPU", 0, 0),
              ("on two different CPUs", 0, 1))


def placement_round_trips(server: RedisServer, count: int = 400) -> dict[str, dict[str, float]]:
    """Median time (µs) of a ``PING`` round trip over a raw socket, with redis-server and this
    process on the same CPU, on two different CPUs, and unpinned; with and without 1 ms of idle
    time before each (an idle CPU is slower to wake).  Empty where CPU affinity cannot be set or
    fewer than two CPUs are usable.

    A lock's handoff is two such hops (releaser to Redis, Redis to the waiter): on a virtual
    machine whose idle CPUs are slow to wake, this bounds every Redis lock's held fraction.
    """
    import socket

    if not hasattr(os, "sched_setaffinity") or server.process is None:
        return {}
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return {}
    server_pid = server.process.pid
    server_cpus = os.sched_getaffinity(server_pid)
    results: dict[str, dict[str, float]] = {}
    sock = socket.create_connection((server.host, server.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for label, server_cpu, client_cpu in PLACEMENTS:
            os.sched_setaffinity(server_pid, server_cpus if server_cpu is None else {allowed[server_cpu]})
            os.sched_setaffinity(0, allowed if client_cpu is None else {allowed[client_cpu]})
            figures = {}
            for idle in (0.0, 0.001):
                samples = []
                for _ in range(count):
                    if idle:
                        time.sleep(idle)
                    start = time.perf_counter_ns()
                    sock.sendall(b"PING\r\n")
                    reply = b""
                    while not reply.endswith(b"\r\n"):
                        chunk = sock.recv(64)
                        if not chunk:
                            raise ConnectionError("redis-server closed the connection")
                        reply += chunk
                    samples.append((time.perf_counter_ns() - start) / 1000.0)
                figures["after 1 ms idle" if idle else "back to back"] = statistics.median(samples)
            results[label] = figures
    finally:
        sock.close()
        os.sched_setaffinity(server_pid, server_cpus)
        os.sched_setaffinity(0, allowed)
    return results


def machine_info() -> dict[str, str]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return {
        "cpu": cpu or "?",
        "cores": str(os.cpu_count()),
        "load average": load,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# -- reports -------------------------------------------------------------------------------------
def write_report(section: Section, ctx: Context, *, started: float, error: Optional[str] = None) -> Path:
    """Write ``<results>/<name>.md`` and ``<name>.json`` (and the section's plots); return the .md path."""
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    for filename, figure in section.pending_plots:
        figure.savefig(ctx.results_dir / filename, dpi=110, bbox_inches="tight")
        try:
            import matplotlib.pyplot as plt

            plt.close(figure)
        except Exception:  # pragma: no cover - matplotlib missing means no plot was made
            pass
    section.pending_plots.clear()
    info = machine_info()
    info["redis-server"] = ctx.redis_version()
    info["redis-py"] = _version("redis")
    info["date"] = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    info["duration"] = f"{time.monotonic() - started:.1f} s"
    info["code"] = code_version()
    info["mode"] = "quick (rough figures)" if ctx.quick else "full"
    info["command"] = "python3 dev.py bench " + " ".join(sys.argv[1:])
    lines = [f"# {section.title}", ""]
    lines.append("| machine | |")
    lines.append("| --- | --- |")
    lines.extend(f"| {key} | {value} |" for key, value in info.items())
    lines.append("")
    if error:
        lines += ["## Failed", "", "```", error.rstrip(), "```", ""]
    if section.checks:
        lines += ["## Targets", "", section.checks_markdown(), ""]
    for block in section.blocks:
        lines += [block, ""]
    path = ctx.results_dir / f"{section.name}.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    payload = {
        "title": section.title,
        "machine": info,
        "figures": section.figures,
        "labels": section.labels,
        "checks": [item.as_dict() for item in section.checks],
        "plots": section.plots,
        "error": error,
    }
    (ctx.results_dir / f"{section.name}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n",
                                                          encoding="utf-8")
    return path


def code_version() -> str:
    """The git commit measured, flagged when the package had uncommitted changes."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "django_redis_coord"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    if not commit:
        return "?"
    return commit + (" + uncommitted changes in django_redis_coord/" if dirty else "")


def _version(package: str) -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:
        return "?"


# -- client-side command counting ----------------------------------------------------------------
HANDSHAKE_COMMANDS = frozenset({"HELLO", "CLIENT", "AUTH", "SELECT", "PING", "READONLY"})
_SENT: dict[str, int] = {}
#: Requests written but not counted yet: parsing them waits for :func:`sent_commands`, so that the
#: counting adds no parsing work between a contender's call and its write (nor after it, while the
#: next holder is being woken on a 2-core machine).
_UNCOUNTED: list[bytes] = []


def record_request(data: bytes) -> None:
    """Keep a written request for :func:`sent_commands` to count (a cheap append)."""
    _UNCOUNTED.append(data)


def count_request(data: bytes) -> None:
    """Count the commands in a RESP request stream (``*<n>`` arrays of ``$<len>`` bulk strings)."""
    pos, size = 0, len(data)
    while pos < size:
        if data[pos:pos + 1] != b"*":  # not RESP: an inline command, one per line
            end = data.find(b"\r\n", pos)
            end = size if end == -1 else end
            name = data[pos:end].split(b" ", 1)[0].decode(errors="replace").upper()
            _SENT[name] = _SENT.get(name, 0) + 1
            pos = end + 2
            continue
        end = data.index(b"\r\n", pos)
        count = int(data[pos + 1:end])
        pos = end + 2
        name = ""
        for index in range(count):
            end = data.index(b"\r\n", pos)
            length = int(data[pos + 1:end])
            if index == 0:
                name = data[end + 2:end + 2 + length].decode(errors="replace").upper()
            pos = end + 2 + length + 2
        _SENT[name] = _SENT.get(name, 0) + 1


def counting_client(host: str, port: int, **kwargs: Any) -> Any:
    """A ``redis.Redis`` whose connections count the commands they write (see :func:`sent_commands`).

    Counted where bytes go to the socket, so commands packed by any layer (pipelines, pre-packed
    script calls) are seen.  Each request is kept after it was written and parsed only when
    :func:`sent_commands` is called, so the counting costs the timed calls a list append.

    INFO commandstats also counts the commands a Lua script runs; this counts what clients send:
    one EVALSHA is one command, one BLPOP is one command, whatever the server does for it.
    """
    import redis
    from redis.connection import Connection

    class CountingConnection(Connection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            chunks = [command] if isinstance(command, (str, bytes, bytearray, memoryview)) else command
            super().send_packed_command(command, check_health)
            record_request(b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks))

    pool = redis.ConnectionPool(host=host, port=port, connection_class=CountingConnection, **kwargs)
    return redis.Redis(connection_pool=pool)


def sent_commands(reset: bool = False) -> dict[str, int]:
    """Commands sent by :func:`counting_client` clients in this process (handshakes left out)."""
    for data in _UNCOUNTED:
        count_request(data)
    _UNCOUNTED.clear()
    counts = {name: calls for name, calls in _SENT.items() if name not in HANDSHAKE_COMMANDS}
    if reset:
        _SENT.clear()
    return counts
