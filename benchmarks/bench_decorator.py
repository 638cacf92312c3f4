"""@locked: the latency a locked view adds, next to a Redis round trip.

The same view is served through Django's test client twice: undecorated and under
``@locked("bench:view")`` (acquire before the view, release when the response is closed).  Rounds
alternate the order of the two and report medians.  In the same run, a ``PING`` through the same
pooled client gives the round trip the target is measured in: the decorator may add at most two
round trips (one Lua script to acquire, one to release).  The round trips are also counted on the
client's connections (every packet written is one).

The asyncio path (an ``async def`` view under ``AsyncClient``, the asyncio client) is measured the
same way.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.common import Context, Section, percentile

TARGET_ROUND_TRIPS = 2.0

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
    requests: int = 1500     # per variant per round
    server_requests: int = 400
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


def two_pings_view(request: Any) -> Any:
    """The plain view plus two PINGs: two round trips made in the same conditions as the lock's."""
    from django_redis_coord.connection import get_client

    client = get_client()
    client.ping()
    client.ping()
    return plain_view(request)


async def async_plain_view(request: Any) -> Any:
    from django.http import HttpResponse

    return HttpResponse(b"ok", headers={"Content-Length": "2"})


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
                path("two-pings/", two_pings_view),
                path("aplain/", async_plain_view),
                path("alocked/", locked("bench:aview", timeout=10)(async_plain_view)),
                # Over HTTP the release runs after the response is sent: back-to-back requests to one
                # key could meet the previous hold, so each request locks its own key.
                path("keyed-plain/", plain_view),
                path("keyed-locked/", locked("bench:{query[n]}", timeout=10)(plain_view)),
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
    from django_redis_coord.locks import Lock

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


class _Server:
    """Django's threaded development WSGI server on a free loopback port, in a background thread."""

    def __init__(self) -> None:
        import threading

        from django.core.handlers.wsgi import WSGIHandler
        from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

        class QuietHandler(WSGIRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
        self.httpd.set_app(WSGIHandler())
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def timed_gets(self, path: str, count: int) -> list[float]:
        """One connection per request: the release after a response never delays the next one."""
        import http.client

        samples = []
        clock = time.perf_counter_ns
        for number in range(count):
            connection = http.client.HTTPConnection("127.0.0.1", self.port)
            connection.connect()
            start = clock()
            connection.request("GET", f"{path}?n={number}")
            response = connection.getresponse()
            body = response.read()
            samples.append((clock() - start) / 1000.0)
            connection.close()
            if response.status != 200 or body != b"ok":
                raise RuntimeError(f"{path} answered {response.status}")
        return samples

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


async def _async_round(count: int) -> tuple[float, float, float]:
    from django.test import AsyncClient

    from django_redis_coord.connection import get_async_client

    client = AsyncClient()
    redis_client = get_async_client()
    clock = time.perf_counter_ns
    for path in ("/aplain/", "/alocked/"):
        for _ in range(20):
            await client.get(path)
    medians = []
    for path in ("/aplain/", "/alocked/"):
        samples = []
        for _ in range(count):
            start = clock()
            response = await client.get(path)
            samples.append((clock() - start) / 1000.0)
            if response.status_code != 200:
                raise RuntimeError(f"{path} answered {response.status_code}")
        medians.append(statistics.median(samples))
    pings = []
    for _ in range(count):
        start = clock()
        await redis_client.ping()
        pings.append((clock() - start) / 1000.0)
    await redis_client.aclose()
    return medians[0], medians[1], statistics.median(pings)


def run(ctx: Context) -> Section:
    sizes = QUICK if ctx.quick else FULL
    section = Section("decorator", "@locked: latency added to a view, in Redis round trips")
    override = _setup(ctx.server.url)
    try:
        from django.test import Client

        from django_redis_coord.connection import get_client, reset_clients

        reset_clients()
        client = Client()
        redis_client = get_client()
        for path in ("/plain/", "/locked/", "/two-pings/"):
            _timed_gets(client, path, 50)
        _timed_pings(redis_client, 100)

        plain_medians, locked_medians, ping_medians, added, pinged_added = [], [], [], [], []
        samples_of: dict[str, list[float]] = {"/plain/": [], "/locked/": [], "/two-pings/": []}
        for round_index in range(sizes.rounds):
            order = ("/plain/", "/locked/", "/two-pings/")
            medians = {}
            for path in order if round_index % 2 == 0 else order[::-1]:
                samples = _timed_gets(client, path, sizes.requests)
                medians[path] = statistics.median(samples)
                samples_of[path].extend(samples)
            ping = statistics.median(_timed_pings(redis_client, sizes.pings // sizes.rounds))
            plain_medians.append(medians["/plain/"])
            locked_medians.append(medians["/locked/"])
            ping_medians.append(ping)
            added.append(medians["/locked/"] - medians["/plain/"])
            pinged_added.append(medians["/two-pings/"] - medians["/plain/"])
            ctx.log(f"round {round_index + 1}: plain {medians['/plain/']:.1f} us, locked {medians['/locked/']:.1f} us,"
                    f" two pings {medians['/two-pings/']:.1f} us, ping {ping:.1f} us")
        all_plain, all_locked = samples_of["/plain/"], samples_of["/locked/"]

        before = _SENDS["count"]
        _timed_gets(client, "/locked/", 100)
        trips_locked = (_SENDS["count"] - before) / 100
        before = _SENDS["count"]
        _timed_gets(client, "/plain/", 100)
        trips_plain = (_SENDS["count"] - before) / 100

        ping_us = statistics.median(ping_medians)
        added_us = statistics.median(added)
        ratio = added_us / ping_us
        pair = _core_pair(redis_client, sizes.pings)
        section.figure("sync.plain_p50_us", statistics.median(plain_medians), "undecorated view, median (us)")
        section.figure("sync.locked_p50_us", statistics.median(locked_medians), "@locked view, median (us)")
        section.figure("sync.added_us", added_us, "added latency, median of per-round differences (us)")
        section.figure("sync.ping_rtt_us", ping_us, "PING round trip through the same client (us)")
        section.figure("sync.added_in_round_trips", ratio, "added latency / PING round trip")
        section.figure("sync.round_trips_per_request", trips_locked - trips_plain, "packets written per request")
        section.figure("core.acquire_us", pair["acquire"], "core Lock.acquire alone, median (us)")
        section.figure("core.release_us", pair["release"], "core Lock.release alone, median (us)")
        section.figure("core.script_server_us", pair["server"], "server time per lock script (INFO commandstats)")
        section.figure("sync.glue_us", added_us - pair["acquire"] - pair["release"],
                       "added latency beyond the core acquire + release (us)")
        in_view_trip = statistics.median(pinged_added) / 2
        in_view_ratio = added_us / in_view_trip
        section.figure("sync.in_view_round_trip_us", in_view_trip,
                       "one PING made inside a view (half of what two PINGs add to it) (us)")
        section.figure("sync.added_in_in_view_round_trips", in_view_ratio, "added latency / in-view PING round trip")
        section.check("sync: added latency in round trips (tight-loop PING)", ratio, "<=", TARGET_ROUND_TRIPS)
        section.check("sync: added latency in round trips (PING inside a view)", in_view_ratio, "<=",
                      TARGET_ROUND_TRIPS)
        section.check("sync: round trips per locked request", trips_locked - trips_plain, "<=", 2)

        rows = [
            ["undecorated", statistics.median(plain_medians), percentile(all_plain, 90), percentile(all_plain, 99), ""],
            ["@locked", statistics.median(locked_medians), percentile(all_locked, 90), percentile(all_locked, 99),
             f"+{added_us:.1f} us = {ratio:.2f} round trips"],
            ["PING", ping_us, "", "", "one round trip (tight loop)"],
            ["view + 2 PINGs", statistics.median(samples_of["/two-pings/"]), percentile(samples_of["/two-pings/"], 90),
             percentile(samples_of["/two-pings/"], 99), f"+{2 * in_view_trip:.1f} us = two round trips in a view"],
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

        # -- a real server ----------------------------------------------------------------------
        server = _Server()
        try:
            server.timed_gets("/keyed-plain/", 30)
            server.timed_gets("/keyed-locked/", 30)
            real: dict[str, list[float]] = {"/keyed-plain/": [], "/keyed-locked/": []}
            real_ping = []
            for round_index in range(sizes.rounds):
                order = ("/keyed-plain/", "/keyed-locked/")
                for path in order if round_index % 2 == 0 else order[::-1]:
                    real[path].append(statistics.median(server.timed_gets(path, sizes.server_requests)))
                real_ping.append(statistics.median(_timed_pings(redis_client, sizes.pings // sizes.rounds)))
        finally:
            server.close()
        r_plain, r_locked = statistics.median(real["/keyed-plain/"]), statistics.median(real["/keyed-locked/"])
        r_added = statistics.median(b - a for a, b in zip(real["/keyed-plain/"], real["/keyed-locked/"]))
        r_ping = statistics.median(real_ping)
        section.figure("server.plain_p50_us", r_plain, "undecorated view over HTTP, median (us)")
        section.figure("server.locked_p50_us", r_locked, "@locked view over HTTP, median (us)")
        section.figure("server.added_in_round_trips", r_added / r_ping, "added latency / PING round trip")
        section.table(
            ["view over HTTP (Django's threaded WSGI server)", "p50 us", "added"],
            [["undecorated", r_plain, ""],
             ["@locked", r_locked, f"+{r_added:.1f} us = {r_added / r_ping:.2f} round trips"],
             ["PING", r_ping, "one round trip"]],
        )

        # -- asyncio ----------------------------------------------------------------------------
        results = [asyncio.run(_async_round(sizes.async_requests)) for _ in range(sizes.async_rounds)]
        a_plain = statistics.median(r[0] for r in results)
        a_locked = statistics.median(r[1] for r in results)
        a_ping = statistics.median(r[2] for r in results)
        a_added = statistics.median(r[1] - r[0] for r in results)
        section.figure("async.plain_p50_us", a_plain, "undecorated async view, median (us)")
        section.figure("async.locked_p50_us", a_locked, "@locked async view, median (us)")
        section.figure("async.ping_rtt_us", a_ping, "PING round trip through the asyncio client (us)")
        section.figure("async.added_in_round_trips", a_added / a_ping, "added latency / PING round trip")
        section.check("async: added latency in round trips", a_added / a_ping, "<=", TARGET_ROUND_TRIPS)
        section.table(
            ["async view (AsyncClient)", "p50 us", "added"],
            [["undecorated", a_plain, ""],
             ["@locked", a_locked, f"+{a_added:.1f} us = {a_added / a_ping:.2f} round trips"],
             ["PING", a_ping, "one round trip"]],
        )
        section.text(
            "Over HTTP the release runs after the response was written, so the client waits for the acquire "
            "only; but on a 2-core machine the release competes with the next request for the CPU, so that "
            "figure is shown without a target.\n\n"
            "Two references for a round trip: a `PING` in a tight loop (the server never idles between "
            "commands, the cheapest a round trip gets) and half of what two `PING`s add to the same view (a "
            "round trip made where the lock's are made, between Django's work).\n\n"
            "The added latency is the difference of the medians of the same view with and without "
            "`@locked`, per round, rounds alternating their order; the round trip is a `PING` through the "
            "same pooled client in the same rounds.  *Round trips per locked request* counts the packets "
            "the client wrote: one EVALSHA to acquire and one to release.  The async view's release runs "
            "when the response is closed, which `AsyncClient` does in a worker thread: that thread "
            "releases it with the sync client (no hop back to the event loop), so the figure has one "
            "acquire on the asyncio client and one release on the sync one."
        )
    finally:
        if override is not None:
            override.disable()
    return section
