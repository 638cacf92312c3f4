"""@locked: the latency a locked view adds, next to a Redis round trip.

The same view is served through Django's test client undecorated, under ``@locked("bench:view")``
(acquire before the view, release when the response is closed), with two ``PING`` calls inside it
and under a *floor* lock: the smallest Redis lock written with plain redis-py (``SET NX PX`` before
the view, a compare-and-delete script when the response is closed).  Within a round the variants'
requests alternate one by one (see :func:`_interleaved`); rounds report medians.  In the same run, a
``PING`` through the same pooled client gives the round trip the target is measured in: the
decorator sends two commands (one Lua script to acquire, one to release) and may add at most the
latency of three PINGs (:data:`TARGET_ROUND_TRIPS`: a script call costs more than a bare PING).  The
round trips are also counted on the client's connections (every packet written is one).

The same views are then served over HTTP by Django's threaded WSGI server running in a process of
its own, to one keep-alive connection; the server process times each request from the WSGI
application call to the end of the response's ``close()`` (where the release runs).

The asyncio path (an ``async def`` view under ``AsyncClient``, the asyncio client) is measured the
same way as the sync view under the test client, with its own floor and two-``PING`` views.
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import os
import random
import socket
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

from benchmarks.common import FORK, Context, Section, percentile

#: The most ``@locked`` may add to a request, in PING round trips: its two script calls and what
#: they cost beyond a bare PING (the floor lock itself, SET NX PX + a compare-and-delete script,
#: adds 2.3-2.7 on this machine).
TARGET_ROUND_TRIPS = 3.0

#: Idle time before each request over HTTP, so that every request reaches an idle server.  The server
#: thread of a keep-alive connection reads the next request only once the previous response's
#: ``close()`` (the release, run after the response was written) has ended: without the pause, that
#: release would be counted in the next request's latency.
HTTP_IDLE_PAUSE = 0.003
#: Seconds the server process may take to start, or to stop and report.
SERVER_PROCESS_TIMEOUT = 30.0

#: The floor lock's key, and its release: delete the key only while it still holds our token.
#: KEYS[1] = the key, ARGV[1] = the token.
FLOOR_KEY = "bench:floor"
FLOOR_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"

_SENDS = {"count": 0}


def _counting_connection_class() -> type:
    from redis.connection import Connection

    class CountingConnection(Connection):
        """Counts what the client writes: one packet per round trip (a pipeline is one)."""

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            _SENDS["count"] += 1
            super().send_packed_command(command, check_health)

    return CountingConnection


@dataclass(frozen=True)
class Sizes:
    requests: int = 1500     # per variant per round (test client)
    server_requests: int = 300  # per variant per round (HTTP, each after HTTP_IDLE_PAUSE)
    rounds: int = 7
    pings: int = 3000
    async_requests: int = 600
    async_rounds: int = 3


FULL = Sizes()
QUICK = Sizes(requests=150, server_requests=40, rounds=2, pings=300, async_requests=60, async_rounds=1)


# -- the views and the Django set-up ---------------------------------------------------------------
def plain_view(request: Any) -> Any:
    from django.http import HttpResponse

    return HttpResponse(b"ok", headers={"Content-Length": "2"})


def one_ping_view(request: Any) -> Any:
    """The plain view plus one PING: a single round trip made where the lock's acquire is made.

    Half of what two PINGs add is a warmer round trip than a lone one (the second PING runs right
    after the first); this is the lone one."""
    from django_redis_coord.config.connection import get_client

    get_client().ping()
    return plain_view(request)


def two_pings_view(request: Any) -> Any:
    """The plain view plus two PINGs: two round trips made in the same conditions as the lock's."""
    from django_redis_coord.config.connection import get_client

    client = get_client()
    client.ping()
    client.ping()
    return plain_view(request)


_floor_script: list[Any] = []  # [client, Script]: the release registered once per client


def _floor_release(client: Any) -> Any:
    """The floor's compare-and-delete script, registered on ``client`` the first time it is needed."""
    if not _floor_script or _floor_script[0] is not client:
        _floor_script[:] = [client, client.register_script(FLOOR_RELEASE)]
    return _floor_script[1]


def floor_view(request: Any) -> Any:
    """The plain view under the smallest Redis lock: ``SET NX PX`` before, compare-and-delete at close.

    No Django glue: the same client as ``@locked``, a random token, and the release appended to the
    response's closers, where ``@locked`` releases.
    """
    from django.http import HttpResponse

    from django_redis_coord.config.connection import get_client

    client = get_client()
    release = _floor_release(client)
    token = os.urandom(16)
    if not client.set(FLOOR_KEY, token, nx=True, px=10000):
        return HttpResponse(b"held", status=409)
    try:
        response = plain_view(request)
    except BaseException:
        release(keys=[FLOOR_KEY], args=[token])
        raise
    _release_at_close(response, functools.partial(release, keys=[FLOOR_KEY], args=[token]))
    return response


def _release_at_close(response: Any, release: Any) -> None:
    """Run ``release`` when ``response`` is closed, as ``@locked`` does: its public ``close()`` wrapped."""
    close = response.close

    def close_releasing() -> None:
        try:
            release()
        finally:
            close()

    response.close = close_releasing


async def async_plain_view(request: Any) -> Any:
    from django.http import HttpResponse

    return HttpResponse(b"ok", headers={"Content-Length": "2"})


async def async_two_pings_view(request: Any) -> Any:
    """The async view plus two PINGs on the asyncio client: two round trips made where the
    lock's acquire is made (the in-view round trip of the async figures)."""
    from django_redis_coord.config.connection import get_async_client

    client = get_async_client()
    await client.ping()
    await client.ping()
    return await async_plain_view(request)


async def async_floor_view(request: Any) -> Any:
    """The async view under the floor lock, split as ``@locked``'s async path is: ``SET NX PX`` on
    the asyncio client before the view, the compare-and-delete script on the sync client when the
    response is closed (``AsyncClient`` closes it in a worker thread)."""
    from django.http import HttpResponse

    from django_redis_coord.config.connection import get_async_client, get_client

    token = os.urandom(16)
    if not await get_async_client().set(FLOOR_KEY, token, nx=True, px=10000):
        return HttpResponse(b"held", status=409)
    response = await async_plain_view(request)
    release = _floor_release(get_client())
    _release_at_close(response, functools.partial(release, keys=[FLOOR_KEY], args=[token]))
    return response


urlpatterns: list[Any] = []


def _setup(url: str) -> Any:
    """Configure Django for this module (or override the settings of an already configured run)."""
    import django
    from django.conf import settings
    from django.urls import path

    from django_redis_coord import locked

    coord = {"URL": url, "CLIENT_OPTIONS": {"connection_class": _counting_connection_class()}}
    if not urlpatterns:
        urlpatterns.extend(
            [
                path("plain/", plain_view),
                path("locked/", locked("bench:view", timeout=10)(plain_view)),
                path("one-ping/", one_ping_view),
                path("two-pings/", two_pings_view),
                path("floor/", floor_view),
                path("aplain/", async_plain_view),
                path("alocked/", locked("bench:aview", timeout=10)(async_plain_view)),
                path("atwo-pings/", async_two_pings_view),
                path("afloor/", async_floor_view),
            ]
        )
    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="benchmark-only",
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF=__name__,
            INSTALLED_APPS=["django_redis_coord"],
            MIDDLEWARE=[],
            DATABASES={},
            DJANGO_REDIS_COORD=coord,
        )
        django.setup()
        return None
    from django.test import override_settings

    override = override_settings(ROOT_URLCONF=__name__, MIDDLEWARE=[], DJANGO_REDIS_COORD=coord)
    override.enable()
    return override


# -- measuring -------------------------------------------------------------------------------------
def _timed_gets(client: Any, path: str, count: int) -> list[float]:
    samples = []
    clock = time.perf_counter_ns
    for _ in range(count):
        start = clock()
        response = client.get(path)
        samples.append((clock() - start) / 1000.0)
        if response.status_code != 200:
            raise RuntimeError(f"{path} answered {response.status_code}")
    return samples


def _timed_pings(redis_client: Any, count: int) -> list[float]:
    samples = []
    clock = time.perf_counter_ns
    for _ in range(count):
        start = clock()
        redis_client.ping()
        samples.append((clock() - start) / 1000.0)
    return samples


def _core_pair(redis_client: Any, count: int) -> dict[str, float]:
    """The core Lock alone on the same client: acquire and release timed apart, plus server time."""
    from django_redis_coord.core.lock.sync import Lock

    before = redis_client.info("commandstats").get("cmdstat_evalsha", {})
    clock = time.perf_counter_ns
    acquires, releases = [], []
    for _ in range(count):
        lock = Lock(redis_client, "bench:pair", timeout=10, thread_local=False)
        start = clock()
        lock.acquire(blocking=False)
        middle = clock()
        lock.release()
        acquires.append((middle - start) / 1000.0)
        releases.append((clock() - middle) / 1000.0)
    after = redis_client.info("commandstats").get("cmdstat_evalsha", {})
    calls = after.get("calls", 0) - before.get("calls", 0)
    server = (after.get("usec", 0) - before.get("usec", 0)) / calls if calls else float("nan")
    return {"acquire": statistics.median(acquires), "release": statistics.median(releases), "server": server}


# -- a real server in its own process ----------------------------------------------------------
HTTP_PATHS = ("/plain/", "/locked/", "/one-ping/", "/two-pings/", "/floor/")


#: What the server process times for each request (microseconds): the application's call until the
#: response is iterated (the view, the acquire), writing the response, its ``close()`` (the release),
#: and the whole, from the application's call to the end of ``close()``.
SERVER_PARTS = ("view", "write", "close", "total")


class _TimedBody:
    """A WSGI response wrapper: records :data:`SERVER_PARTS` of its request when it is closed."""

    def __init__(self, body: Any, key: tuple[str, str], started: int,
                 samples: dict[tuple[str, str], list[tuple[float, ...]]]) -> None:
        self.body = body
        self.key = key
        self.started = self.iterated = started
        self.samples = samples

    def __iter__(self) -> Any:
        self.iterated = time.perf_counter_ns()
        return iter(self.body)

    def close(self) -> None:
        closing = time.perf_counter_ns()
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()  # Django's HttpResponse.close(): the resource closers, @locked's release among them
        finally:
            end = time.perf_counter_ns()
            parts = (self.iterated - self.started, closing - self.iterated, end - closing, end - self.started)
            self.samples.setdefault(self.key, []).append(tuple(part / 1000.0 for part in parts))


def _timed_app(app: Any, samples: dict[tuple[str, str], list[tuple[float, ...]]]) -> Any:
    """``app`` with each request timed by :class:`_TimedBody`, keyed by (path, query string)."""

    def timed(environ: dict[str, Any], start_response: Any) -> Any:
        started = time.perf_counter_ns()
        key = (environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""))
        return _TimedBody(app(environ, start_response), key, started, samples)

    return timed


def _serve(url: str, conn: Any, other_end: Any) -> None:
    """The server process: Django's threaded WSGI server on a free loopback port.

    Sends ``("port", port)`` (or ``("error", traceback)``), serves until the benchmark process sends
    anything or goes away, then sends ``("medians", {(path, query): ({part: median us}, requests)})``
    with the parts of :data:`SERVER_PARTS`.
    """
    other_end.close()  # the benchmark process's end: while a copy is open here, its exit never reads as EOF
    try:
        from django.core.handlers.wsgi import WSGIHandler
        from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

        from django_redis_coord.config.connection import reset_clients

        _setup(url)
        reset_clients()  # never the connections inherited from the benchmark process

        class NoDelayHandler(WSGIRequestHandler):
            """Quiet; each response leaves as one segment, at once.

            Without TCP_NODELAY, Nagle's algorithm and the client's delayed ACK hold a response back
            by ~40 ms on a keep-alive connection.  The buffered writer (flushed by wsgiref after each
            piece of the body) sends the status line, the headers and the body in one write rather
            than three, each of which could wake the client.
            """

            wbufsize = -1

            def setup(self) -> None:
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                super().setup()

            def log_message(self, *args: Any) -> None:
                pass

        samples: dict[tuple[str, str], list[tuple[float, ...]]] = {}
        httpd = ThreadedWSGIServer(("127.0.0.1", 0), NoDelayHandler, allow_reuse_address=False)
        httpd.set_app(_timed_app(WSGIHandler(), samples))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    conn.send(("port", httpd.server_address[1]))
    try:
        conn.recv()
    except EOFError:  # the benchmark process went away: stop too
        return
    finally:
        httpd.shutdown()
        httpd.server_close()
    conn.send(("medians", {key: ({part: statistics.median(values) for part, values in zip(SERVER_PARTS, zip(*rows))},
                                 len(rows)) for key, rows in samples.items()}))


class _ServerProcess:
    """:func:`_serve` in a forked process, and one keep-alive HTTP connection to it."""

    def __init__(self, url: str) -> None:
        self.conn, child = FORK.Pipe()
        self.process = FORK.Process(target=_serve, args=(url, child, self.conn), daemon=True)
        self.process.start()
        child.close()
        self.http: Optional[http.client.HTTPConnection] = None
        try:
            if not self.conn.poll(SERVER_PROCESS_TIMEOUT):
                raise RuntimeError("the server process did not report its port")
            kind, value = self.conn.recv()
            if kind != "port":
                raise RuntimeError(f"the server process failed to start:\n{value}")
            self.http = http.client.HTTPConnection("127.0.0.1", value, timeout=10)
            self.http.connect()
            assert self.http.sock is not None
            self.http.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            self.stop()
            raise

    def timed_gets(self, path: str, tag: str, count: int) -> list[float]:
        """``count`` GETs of ``path?round=tag``, each after HTTP_IDLE_PAUSE; each must answer 200 ``ok``."""
        assert self.http is not None
        target = f"{path}?round={tag}"
        samples = []
        clock = time.perf_counter_ns
        for _ in range(count):
            time.sleep(HTTP_IDLE_PAUSE)
            start = clock()
            self.http.request("GET", target)
            response = self.http.getresponse()
            body = response.read()
            samples.append((clock() - start) / 1000.0)
            if response.status != 200 or body != b"ok":
                raise RuntimeError(f"{path} answered {response.status} {body[:80]!r} over HTTP")
            if response.will_close:
                raise RuntimeError(f"{path}: the server closed the keep-alive connection")
        return samples

    def stop(self) -> dict[tuple[str, str], tuple[dict[str, float], int]]:
        """Close the connection, stop the server process and return its medians (empty if it failed)."""
        medians: dict[tuple[str, str], tuple[dict[str, float], int]] = {}
        try:
            if self.http is not None:
                self.http.close()
                self.http = None
            if self.process.is_alive():
                self.conn.send("stop")
                if self.conn.poll(SERVER_PROCESS_TIMEOUT):
                    kind, value = self.conn.recv()
                    if kind == "medians":
                        medians = value
        except (OSError, EOFError):
            pass
        finally:
            self.conn.close()
            self.process.join(SERVER_PROCESS_TIMEOUT)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
        return medians


def _http_rounds(ctx: Context, url: str, redis_client: Any, sizes: Sizes) -> dict[str, Any]:
    """Rounds over HTTP: per path and round, client medians and the server process's medians."""
    server = _ServerProcess(url)
    try:
        for path in HTTP_PATHS:
            server.timed_gets(path, "warm-up", 30)
        measured = _rounds(ctx, "HTTP round", HTTP_PATHS, sizes.server_requests, redis_client, sizes,
                           lambda round_index: lambda path: server.timed_gets(path, str(round_index), 1))
        time.sleep(HTTP_IDLE_PAUSE)  # the last request's release ends before the server stops
    finally:
        reported = server.stop()
    server_medians: dict[str, dict[str, list[float]]] = {part: {path: [] for path in HTTP_PATHS}
                                                          for part in SERVER_PARTS}
    for path in HTTP_PATHS:
        for round_index in range(sizes.rounds):
            parts, served = reported.get((path, f"round={round_index}"), ({}, 0))
            if served != sizes.server_requests:
                raise RuntimeError(f"the server process timed {served} requests to {path} in round "
                                   f"{round_index + 1}, not {sizes.server_requests}")
            for part in SERVER_PARTS:
                server_medians[part][path].append(parts[part])
    return {"client": measured.medians, "samples": measured.samples, "server": server_medians,
            "ping": statistics.median(measured.pings)}


@dataclass
class _Rounds:
    """What :func:`_rounds` measured: per path one median per round and every sample; per round
    the median ``PING``."""

    medians: dict[str, list[float]]
    samples: dict[str, list[float]]
    pings: list[float]


def _rounds(ctx: Context, label: str, paths: tuple[str, ...], count: int, redis_client: Any, sizes: Sizes,
            timed_in_round: Callable[[int], Callable[[str], list[float]]]) -> _Rounds:
    """``sizes.rounds`` rounds of ``count`` requests per path (:func:`_interleaved`, timed by what
    ``timed_in_round(round_index)`` returns), each followed by ``PING``s on ``redis_client``."""
    measured = _Rounds({path: [] for path in paths}, {path: [] for path in paths}, [])
    for round_index in range(sizes.rounds):
        for path, samples in _interleaved(paths, count, round_index, timed_in_round(round_index)).items():
            measured.medians[path].append(statistics.median(samples))
            measured.samples[path].extend(samples)
        measured.pings.append(statistics.median(_timed_pings(redis_client, sizes.pings // sizes.rounds)))
        ctx.log(f"{label} {round_index + 1}: " + ", ".join(
            f"{path} {measured.medians[path][-1]:.1f} us" for path in paths) + f", ping {measured.pings[-1]:.1f} us")
    return measured


def _interleaved(paths: tuple[str, ...], count: int, round_index: int,
                 timed: Callable[[str], list[float]]) -> dict[str, list[float]]:
    """``count`` timed requests of each path, the paths taking turns request by request, in a new
    random order (seeded by the round) for each turn.

    On a virtual machine a round trip costs several times more while the processes involved run on
    different CPUs than on the same one, and the scheduler moves them now and then: requests that
    alternate see the same pace, where blocks of one variant after another would not.  The order
    changes at every turn because a request's cost also depends on the one before it (what it left
    in the caches): a fixed order would always give each path the same predecessor.
    """
    samples: dict[str, list[float]] = {path: [] for path in paths}
    for path in _turns(paths, count, round_index):
        samples[path].extend(timed(path))
    return samples


def _turns(paths: tuple[str, ...], count: int, round_index: int) -> Iterator[str]:
    """``count`` turns of ``paths``, each turn in a new random order (seeded by the round)."""
    rng = random.Random(round_index)
    order = list(paths)
    for _ in range(count):
        rng.shuffle(order)
        yield from order


def _added(medians: dict[str, list[float]], path: str) -> float:
    """Median over rounds of ``path``'s median minus the plain view's median in the same round."""
    return statistics.median(b - a for a, b in zip(medians["/plain/"], medians[path]))


def _in_units(added_us: float, in_view_us: float, ping_us: float) -> str:
    return (f"+{added_us:.1f} us = {added_us / in_view_us:.2f} in-view / {added_us / ping_us:.2f} tight-loop "
            f"round trips")


ASYNC_PATHS = ("/aplain/", "/alocked/", "/atwo-pings/", "/afloor/")


async def _async_round(count: int, round_index: int) -> tuple[dict[str, float], float]:
    """One round of the async views under ``AsyncClient``: the median of each path (the paths take
    turns as in :func:`_interleaved`), and the median ``PING`` on the asyncio client."""
    from django.test import AsyncClient

    from django_redis_coord.config.connection import get_async_client

    client = AsyncClient()
    redis_client = get_async_client()
    clock = time.perf_counter_ns
    for path in ASYNC_PATHS:
        for _ in range(20):
            await client.get(path)
    samples: dict[str, list[float]] = {path: [] for path in ASYNC_PATHS}
    for path in _turns(ASYNC_PATHS, count, round_index):
        start = clock()
        response = await client.get(path)
        samples[path].append((clock() - start) / 1000.0)
        if response.status_code != 200:
            raise RuntimeError(f"{path} answered {response.status_code}")
    pings = []
    for _ in range(count):
        start = clock()
        await redis_client.ping()
        pings.append((clock() - start) / 1000.0)
    await redis_client.aclose()
    return {path: statistics.median(values) for path, values in samples.items()}, statistics.median(pings)


def run(ctx: Context, sizes: Optional[Sizes] = None) -> Section:
    sizes = sizes or (QUICK if ctx.quick else FULL)
    section = Section("decorator", "@locked: latency added to a view, in Redis round trips")
    override = _setup(ctx.server.url)
    try:
        from django.test import Client

        from django_redis_coord.config.connection import get_client, reset_clients

        reset_clients()
        client = Client()
        redis_client = get_client()
        paths = ("/plain/", "/locked/", "/one-ping/", "/two-pings/", "/floor/")
        for path in paths:
            _timed_gets(client, path, 50)
        _timed_pings(redis_client, 100)

        measured = _rounds(ctx, "round", paths, sizes.requests, redis_client, sizes,
                           lambda _round: lambda path: _timed_gets(client, path, 1))
        round_medians, samples_of, ping_medians = measured.medians, measured.samples, measured.pings

        trips = {}
        for path in ("/locked/", "/floor/", "/plain/"):
            before = _SENDS["count"]
            _timed_gets(client, path, 100)
            trips[path] = (_SENDS["count"] - before) / 100

        ping_us = statistics.median(ping_medians)
        added_us = _added(round_medians, "/locked/")
        ratio = added_us / ping_us
        pair = _core_pair(redis_client, sizes.pings)
        section.figure("sync.plain_p50_us", statistics.median(round_medians["/plain/"]),
                       "undecorated view, median (us)")
        section.figure("sync.locked_p50_us", statistics.median(round_medians["/locked/"]), "@locked view, median (us)")
        section.figure("sync.added_us", added_us, "added latency, median of per-round differences (us)")
        section.figure("sync.ping_rtt_us", ping_us, "PING round trip through the same client (us)")
        section.figure("sync.added_in_round_trips", ratio, "added latency / PING round trip")
        section.figure("sync.round_trips_per_request", trips["/locked/"] - trips["/plain/"],
                       "packets written per request")
        section.figure("core.acquire_us", pair["acquire"], "core Lock.acquire alone, median (us)")
        section.figure("core.release_us", pair["release"], "core Lock.release alone, median (us)")
        section.figure("core.script_server_us", pair["server"], "server time per lock script (INFO commandstats)")
        section.figure("sync.glue_us", added_us - pair["acquire"] - pair["release"],
                       "added latency beyond the core acquire + release (us)")
        in_view_trip = _added(round_medians, "/two-pings/") / 2
        in_view_ratio = added_us / in_view_trip
        section.figure("sync.in_view_round_trip_us", in_view_trip,
                       "one PING made inside a view (half of what two PINGs add to it) (us)")
        section.figure("sync.added_in_in_view_round_trips", in_view_ratio, "added latency / in-view PING round trip")
        one_trip = _added(round_medians, "/one-ping/")
        section.figure("sync.one_ping_in_view_us", one_trip, "what one lone PING adds to the view (us)")
        section.figure("sync.added_in_lone_in_view_round_trips", added_us / one_trip,
                       "added latency / what one lone PING adds to the view")
        floor_us = _added(round_medians, "/floor/")
        section.figure("sync.floor_p50_us", statistics.median(round_medians["/floor/"]),
                       "view under the floor lock (SET NX PX + compare-and-delete script), median (us)")
        section.figure("sync.floor_added_us", floor_us, "floor lock's added latency (us)")
        section.figure("sync.floor_added_in_round_trips", floor_us / ping_us, "floor's added latency / PING round trip")
        section.figure("sync.floor_added_in_in_view_round_trips", floor_us / in_view_trip,
                       "floor's added latency / in-view PING round trip")
        section.figure("sync.floor_round_trips_per_request", trips["/floor/"] - trips["/plain/"],
                       "packets written per floor request")
        section.check("sync: added latency in round trips (tight-loop PING)", ratio, "<=", TARGET_ROUND_TRIPS)
        section.check("sync: added latency in round trips (PING inside a view)", in_view_ratio, "<=",
                      TARGET_ROUND_TRIPS)
        section.check("sync: round trips per locked request", trips["/locked/"] - trips["/plain/"], "<=", 2)

        def row(label: str, path: str, added: str) -> list[Any]:
            samples = samples_of[path]
            return [label, statistics.median(round_medians[path]), percentile(samples, 90), percentile(samples, 99),
                    added]

        rows = [
            row("undecorated", "/plain/", ""),
            row("@locked", "/locked/", _in_units(added_us, in_view_trip, ping_us)),
            row("floor: SET NX PX + compare-and-delete script", "/floor/", _in_units(floor_us, in_view_trip, ping_us)),
            ["PING", ping_us, "", "", "one round trip (tight loop)"],
            row("view + 1 PING", "/one-ping/", f"+{one_trip:.1f} us = one lone round trip in a view "
                f"(@locked adds {added_us / one_trip:.2f}, the floor {floor_us / one_trip:.2f})"),
            row("view + 2 PINGs", "/two-pings/", f"+{2 * in_view_trip:.1f} us = two round trips in a view"),
        ]
        section.table(["sync view (test client)", "p50 us", "p90 us", "p99 us", "added"], rows)
        section.table(
            ["where the added latency goes (sync)", "us", "tight-loop round trips"],
            [
                ["core Lock.acquire (one EVALSHA)", pair["acquire"], pair["acquire"] / ping_us],
                ["core Lock.release (one EVALSHA)", pair["release"], pair["release"] / ping_us],
                ["  of which server time per script", pair["server"], pair["server"] / ping_us],
                ["the rest: Django glue (key, objects, signals, closer) and round trips made between "
                 "Django's work rather than back to back", added_us - pair["acquire"] - pair["release"],
                 (added_us - pair["acquire"] - pair["release"]) / ping_us],
            ],
        )

        # -- a real server, in its own process ------------------------------------------------------
        over_http = _http_rounds(ctx, ctx.server.url, redis_client, sizes)
        h_client, h_ping = over_http["client"], over_http["ping"]
        h_parts = over_http["server"]
        h_server = h_parts["total"]
        h_added = _added(h_client, "/locked/")
        h_in_view = _added(h_client, "/two-pings/") / 2
        h_floor = _added(h_client, "/floor/")
        h_one = _added(h_client, "/one-ping/")
        s_added = _added(h_server, "/locked/")
        s_in_view = _added(h_server, "/two-pings/") / 2
        s_floor = _added(h_server, "/floor/")
        section.figure("http.plain_p50_us", statistics.median(h_client["/plain/"]),
                       "undecorated view over HTTP, client-perceived median (us)")
        section.figure("http.locked_p50_us", statistics.median(h_client["/locked/"]),
                       "@locked view over HTTP, client-perceived median (us)")
        section.figure("http.added_us", h_added, "client-perceived added latency over HTTP (us)")
        section.figure("http.ping_rtt_us", h_ping, "PING round trip in the benchmark process, same rounds (us)")
        section.figure("http.in_view_round_trip_us", h_in_view,
                       "one PING inside the view over HTTP (half of what two PINGs add), client-perceived (us)")
        section.figure("http.added_in_round_trips", h_added / h_ping, "client-perceived added latency / PING")
        section.figure("http.added_in_in_view_round_trips", h_added / h_in_view,
                       "client-perceived added latency / in-view PING round trip")
        section.figure("http.one_ping_in_view_us", h_one, "what one lone PING adds to the view, client-perceived (us)")
        section.figure("http.added_in_lone_in_view_round_trips", h_added / h_one,
                       "client-perceived added latency / what one lone PING adds to the view")
        section.figure("http.floor_added_in_lone_in_view_round_trips", h_floor / h_one,
                       "floor, client-perceived / what one lone PING adds to the view")
        section.figure("http.floor_added_in_round_trips", h_floor / h_ping, "floor, client-perceived / PING")
        section.figure("http.floor_added_in_in_view_round_trips", h_floor / h_in_view,
                       "floor, client-perceived / in-view PING round trip")
        section.figure("http.server_side.added_us", s_added,
                       "added time in the server process, app call to end of close() (with the release) (us)")
        section.figure("http.server_side.in_view_round_trip_us", s_in_view,
                       "one PING inside the view, timed in the server process (us)")
        section.figure("http.server_side.added_in_round_trips", s_added / h_ping, "server-side added time / PING")
        section.figure("http.server_side.added_in_in_view_round_trips", s_added / s_in_view,
                       "server-side added time / in-view PING round trip (server side)")
        section.figure("http.server_side.floor_added_in_in_view_round_trips", s_floor / s_in_view,
                       "floor, server-side / in-view PING round trip (server side)")
        section.figure("http.server_side.acquire_us", _added(h_parts["view"], "/locked/"),
                       "in the server process: what @locked adds to the view (the acquire and its glue) (us)")
        section.figure("http.server_side.release_us", _added(h_parts["close"], "/locked/"),
                       "in the server process: what @locked adds to the response's close() (the release) (us)")
        section.check("sync over HTTP, client-perceived: added latency in in-view round trips", h_added / h_in_view,
                      "<=", TARGET_ROUND_TRIPS)
        section.check("sync over HTTP, server side with the release: added time in in-view round trips",
                      s_added / s_in_view, "<=", TARGET_ROUND_TRIPS)

        def http_row(label: str, path: str, client_added: str, server_added: str) -> list[Any]:
            samples = over_http["samples"][path]
            return [label, statistics.median(h_client[path]), percentile(samples, 90), client_added,
                    statistics.median(h_server[path]), server_added]

        section.table(
            ["view over HTTP (threaded WSGI server in its own process, one keep-alive connection)", "client p50 us",
             "client p90 us", "added, client-perceived", "server p50 us (app call to end of close())",
             "added, server side (with the release)"],
            [
                http_row("undecorated", "/plain/", "", ""),
                http_row("@locked", "/locked/", _in_units(h_added, h_in_view, h_ping),
                         _in_units(s_added, s_in_view, h_ping)),
                http_row("floor: SET NX PX + compare-and-delete script", "/floor/",
                         _in_units(h_floor, h_in_view, h_ping), _in_units(s_floor, s_in_view, h_ping)),
                http_row("view + 1 PING", "/one-ping/",
                         f"+{h_one:.1f} us = one lone round trip (@locked adds {h_added / h_one:.2f}, "
                         f"the floor {h_floor / h_one:.2f})", f"{_added(h_server, '/one-ping/'):+.1f} us"),
                http_row("view + 2 PINGs", "/two-pings/", f"+{2 * h_in_view:.1f} us = two round trips in a view",
                         f"+{2 * s_in_view:.1f} us = two round trips in a view"),
                ["PING (tight loop, benchmark process)", h_ping, "", "one round trip", "", ""],
            ],
        )

        def parts_row(label: str, path: str) -> list[Any]:
            cells: list[Any] = [label]
            for part in SERVER_PARTS:
                cells.append(statistics.median(h_parts[part][path]))
                cells.append("" if path == "/plain/" else f"{_added(h_parts[part], path):+.1f}")
            return cells

        section.table(
            ["in the server process (medians, us)", "view: app call to response", "added",
             "writing the response", "added", "close() (the release)", "added", "app call to end of close()",
             "added"],
            [parts_row("undecorated", "/plain/"), parts_row("@locked", "/locked/"),
             parts_row("floor", "/floor/"), parts_row("view + 1 PING", "/one-ping/"),
             parts_row("view + 2 PINGs", "/two-pings/")],
        )

        # -- asyncio ----------------------------------------------------------------------------
        results = [asyncio.run(_async_round(sizes.async_requests, index)) for index in range(sizes.async_rounds)]

        def a_median(path: str) -> float:
            return statistics.median(r[0][path] for r in results)

        def a_added(path: str) -> float:
            return statistics.median(r[0][path] - r[0]["/aplain/"] for r in results)

        a_ping = statistics.median(r[1] for r in results)
        a_in_view = a_added("/atwo-pings/") / 2
        added_locked, added_floor = a_added("/alocked/"), a_added("/afloor/")
        section.figure("async.plain_p50_us", a_median("/aplain/"), "undecorated async view, median (us)")
        section.figure("async.locked_p50_us", a_median("/alocked/"), "@locked async view, median (us)")
        section.figure("async.ping_rtt_us", a_ping, "PING round trip through the asyncio client (us)")
        section.figure("async.in_view_rtt_us", a_in_view, "half of what two PINGs add to the async view (us)")
        section.figure("async.added_in_round_trips", added_locked / a_ping, "added latency / tight-loop PING")
        section.figure("async.added_in_view_round_trips", added_locked / a_in_view,
                       "added latency / in-view round trip")
        section.figure("async.floor_added_in_view_round_trips", added_floor / a_in_view,
                       "the floor's added latency / in-view round trip")
        section.check("async: added latency in round trips (tight-loop PING)", added_locked / a_ping, "<=",
                      TARGET_ROUND_TRIPS)
        section.check("async: added latency in round trips (PING inside a view)", added_locked / a_in_view, "<=",
                      TARGET_ROUND_TRIPS)
        section.table(
            ["async view (AsyncClient)", "p50 us", "added"],
            [["undecorated", a_median("/aplain/"), ""],
             ["@locked", a_median("/alocked/"), _in_units(added_locked, a_in_view, a_ping)],
             ["floor: SET NX PX (asyncio client) + compare-and-delete script (sync, at close)",
              a_median("/afloor/"), _in_units(added_floor, a_in_view, a_ping)],
             ["view + 2 PINGs (asyncio client)", a_median("/atwo-pings/"),
              f"+{2 * a_in_view:.1f} us = two round trips in a view"],
             ["PING (asyncio client)", a_ping, "one round trip (tight loop)"]],
        )
        section.text(
            "*Floor* is the same view under the smallest Redis lock written with plain redis-py and no "
            "Django glue: a `SET NX PX` before the view and a compare-and-delete script when the response "
            "is closed.  It is a reference, not a target: what any Redis lock (one SET and one script) adds "
            "on this machine.\n\n"
            "Over HTTP, Django's threaded WSGI server runs in a process of its own and the client sends its "
            f"requests on one keep-alive connection, each after {HTTP_IDLE_PAUSE * 1000:g} ms idle so that it "
            "reaches an idle server.  The release runs after the response was written, when the server closes "
            "it: the client-perceived latency holds the acquire only, while the server-side figure, timed in "
            "the server process from the application call to the end of `close()`, holds both.  Each side's "
            "in-view round trip is half of what two `PING`s add to the view on that side.  The server process "
            "also splits its time into the view (with the acquire), writing the response and `close()` (the "
            "release).  On this machine, writing the undecorated view's response takes longer than writing "
            "the others (the client, woken by it, reads it before the server's write returns), which makes "
            "every server-side difference smaller by about that much; the view and `close()` columns are "
            "free of it.\n\n"
            "Three references for a round trip: a `PING` in a tight loop (the server never idles between "
            "commands, the cheapest a round trip gets), half of what two `PING`s add to the same view (a "
            "round trip made where the lock's are made, between Django's work) and what one lone `PING` "
            "adds to the view (the second of two `PING`s runs warmer than a lone one, as the lock's acquire "
            "is).  The checks use the first two.\n\n"
            "The added latency is the difference of the medians of the same view with and without "
            "`@locked`, per round; within a round the variants' requests take turns one by one (on this "
            "machine a round trip costs several times more while the processes run on different CPUs, and "
            "the scheduler moves them: see the lock report), in an order that changes from round to round; "
            "the median over rounds is reported.  The round trip is a `PING` through the "
            "same pooled client in the same rounds.  *Round trips per locked request* counts the packets "
            "the client wrote: one EVALSHA to acquire and one to release.  The async view's release runs "
            "when the response is closed, which `AsyncClient` does in a worker thread: that thread "
            "releases it with the sync client (no hop back to the event loop), so the figure has one "
            "acquire on the asyncio client and one release on the sync one; the async floor is split the "
            "same way.  Its in-view round trip is half of what two `PING`s on the asyncio client add to the "
            "async view."
        )
    finally:
        if override is not None:
            override.disable()
    return section
