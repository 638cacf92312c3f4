"""Rate limits: decisions per second and redis-server time per decision, next to the peers.

One client on the private redis-server; each library decides on its own keys:

* ``ours gcra`` — :class:`~django_redis_coord.core.ratelimit.sync.RateLimit` (GCRA, one script call);
* ``ours window`` — :class:`~django_redis_coord.core.ratelimit.sync.SlidingWindowLimit` (exact, one script call);
* ``limits moving`` / ``limits sliding`` — the ``limits`` library's moving window and sliding
  window counter on its Redis storage (one script call each; the moving window takes the
  client's clock);
* ``django-ratelimit`` — its fixed window (``get_usage(..., increment=True)``) on Django's
  ``RedisCache`` on the same server: ``cache.add`` then ``cache.incr`` (SET NX, then EXISTS and
  INCR).

Two cases: *refused* — one key, used up ("100/m"), as for a client over its limit; *admitted* —
10,000 keys in turn ("1000/m" each), every decision admitted.  *decisions/s* comes from
:func:`benchmarks.common.interleaved_blocks` (the libraries take turns in short slices) and the
ratio is against the ``limits`` moving window in the same rounds (the median of the rounds' ratios;
*typical*: from the median time of a decision over all rounds, the least sensitive to other
processes' bursts).  *server µs/decision*: per round
and library, the statistics are reset, 500 decisions run and INFO commandstats read; the time is
the ``usec`` of the commands the library sends itself (a script's includes what it runs); fifteen
rounds, alternating, the median.

*Exactness*: 16 processes x 4 threads ask one key as fast as they can for 10 s: GCRA at 200/s
with a burst of 50, the sliding window and django-ratelimit's fixed window at 100/s.  Admission
times are the server's (ours: the reply's ``server_time``; django-ratelimit's: the client's clock,
the same machine's).  GCRA: the most admitted by any instant t against ``burst + rate x t`` (at
most 1 by its guarantee), and the run's admissions against ``burst + rate x T``; the windows: the
most admitted in any one second against N, and the run's admissions against N per second.

*Boundary burst*: a fixed window of N per second admits N at the end of one second and N more at
the start of the next.  A fresh key is asked as fast as one client can from 0.2 s before a
whole second to 0.2 s after it; the admitted count is set against the nominal N.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.common import Context, Section, interleaved_blocks, run_workers, sent_usec
from django_redis_coord import RateLimit, SlidingWindowLimit

ROUNDS = 5
SERVER_ROUNDS = 15
SERVER_DECISIONS = 500
BLOCK = 10
KEYS = 10_000
#: The commands each library sends itself (the others in commandstats ran inside its scripts).
SENT = {"django-ratelimit": ("set", "exists", "incr", "get")}
SCRIPTED = ("evalsha", "eval")
#: Targets (ratios in the same run): GCRA against the limits library's moving window.
GCRA_DECISIONS, GCRA_SERVER = 1.0, 1.0
BOUNDARY_N = 50
#: The exactness runs: GCRA's rate and burst, the windows' count per second.
EXACT_RATE, EXACT_BURST, EXACT_N = 200, 50, 100
US = 1_000_000


def _setup_django(url: str) -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(DEBUG=False, SECRET_KEY="benchmark-only", INSTALLED_APPS=[], DATABASES={},
                           CACHES={"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                               "LOCATION": url}})
        django.setup()
    else:
        from django.core.cache import caches

        caches["default"]  # raises when the settings name no default cache  # noqa: B018


def deciders(ctx: Context, rate: str, limits_rate: str, keys: int) -> tuple[dict[str, Callable[[], bool]], Any]:
    """One ``decide() -> admitted`` per library, cycling over ``keys`` names."""
    from django_ratelimit.core import get_usage
    from limits import parse
    from limits.storage import RedisStorage
    from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter

    client = ctx.client()
    url = f"redis://{ctx.server.host}:{ctx.server.port}/0"
    storage = RedisStorage(url)
    moving, sliding = MovingWindowRateLimiter(storage), SlidingWindowCounterRateLimiter(storage)
    item = parse(limits_rate)
    _setup_django(url)
    names = [f"rl:{i}" for i in range(keys)]
    gcra = [RateLimit(client, f"gcra:{name}", rate) for name in names]
    window = [SlidingWindowLimit(client, f"window:{name}", rate) for name in names]

    def cycling(decide: Callable[[int], bool]) -> Callable[[], bool]:
        position = {"i": 0}

        def call() -> bool:
            position["i"] = (position["i"] + 1) % keys
            return decide(position["i"])
        return call

    decide = {
        "ours gcra": cycling(lambda i: gcra[i].hit().allowed),
        "ours window": cycling(lambda i: window[i].hit().allowed),
        "limits moving": cycling(lambda i: moving.hit(item, "moving", names[i])),
        "limits sliding": cycling(lambda i: sliding.hit(item, "sliding", names[i])),
        "django-ratelimit": cycling(lambda i: not get_usage(
            None, group="bench", key=lambda group, request, name=names[i]: name, rate=rate, increment=True,
        )["should_limit"]),
    }
    return decide, client


def measure(ctx: Context, section: Section, case: str, rate: str, limits_rate: str, keys: int,
            expect_admitted: bool) -> dict[str, dict[str, float]]:
    decide, client = deciders(ctx, rate, limits_rate, keys)
    libs = list(decide)
    for lib in libs:  # load the scripts (and use the single key up)
        for _ in range(20 if expect_admitted else 200):
            decide[lib]()
        outcome = decide[lib]()
        if outcome != expect_admitted:
            raise RuntimeError(f"{lib}: the {case} case expected admitted={expect_admitted}, got {outcome}")

    def block_of(call: Callable[[], bool]) -> Callable[[], None]:
        def block() -> None:
            for _ in range(BLOCK):
                call()
        return block

    ctx.log(f"{case}: decisions/s")
    rates = interleaved_blocks(ctx, {lib: block_of(decide[lib]) for lib in libs}, BLOCK, ctx.size(2.0, 0.3),
                               ctx.size(ROUNDS, 1), floor="limits moving")
    ctx.log(f"{case}: server µs per decision")
    usec: dict[str, list[float]] = {lib: [] for lib in libs}
    for round_no in range(ctx.size(SERVER_ROUNDS, 3)):
        shift = round_no % len(libs)
        for lib in libs[shift:] + libs[:shift]:
            usec[lib].append(sent_usec(client, decide[lib], SERVER_DECISIONS, SENT.get(lib, SCRIPTED)))
    client.close()
    out: dict[str, dict[str, float]] = {}
    rows = []
    for lib in libs:
        per_s = statistics.median(rates["rates"][lib])
        ratio = statistics.median(rates["ratios"][lib])
        server = statistics.median(usec[lib])
        server_ratio = statistics.median(u / m for u, m in zip(usec[lib], usec["limits moving"]))
        out[lib] = {"per_s": per_s, "ratio": ratio, "server": server, "server_ratio": server_ratio}
        section.figure(f"{case}.decisions_per_s.{lib}", per_s)
        section.figure(f"{case}.decisions_vs_limits_moving.{lib}", ratio)
        section.figure(f"{case}.typical_vs_limits_moving.{lib}", rates["typical_ratio"][lib])
        section.figure(f"{case}.server_usec.{lib}", server)
        section.figure(f"{case}.server_vs_limits_moving.{lib}", server_ratio)
        typical = rates["typical_ratio"][lib]
        rows.append([lib, per_s, f"{ratio:.2f}x", f"{typical:.2f}x", server, f"{server_ratio:.2f}x"])
    section.heading(f"{case.capitalize()} decisions ({rate}, {keys} key{'s' if keys > 1 else ''})", 3)
    section.table(["library", "decisions/s", "x limits moving", "typical decision, x limits moving",
                   "redis-server µs/decision", "x limits moving"], rows)
    return out


def boundary_burst(ctx: Context) -> dict[str, int]:
    """Admissions of a fresh key asked as fast as possible from 0.2 s before a whole second to
    0.2 s after it, at a nominal ``BOUNDARY_N`` per second."""
    from django_ratelimit.core import get_usage

    client = ctx.client()
    rate = f"{BOUNDARY_N}/s"
    counts = {}
    for lib in ("django-ratelimit", "ours window", "ours gcra"):
        name = f"boundary:{lib}:{time.time()}"
        if lib == "django-ratelimit":
            def decide(name: str = name) -> bool:
                usage = get_usage(None, group="boundary", key=lambda group, request: name, rate=rate, increment=True)
                return not usage["should_limit"]
        else:
            limit: Any = (SlidingWindowLimit(client, name, rate) if lib == "ours window"
                          else RateLimit(client, name, rate, burst=BOUNDARY_N))

            def decide(limit: Any = limit) -> bool:
                return bool(limit.hit().allowed)
        # django-ratelimit's windows of one second are the whole seconds of time.time().
        boundary = int(time.time()) + 2
        time.sleep(max(0.0, boundary - 0.2 - time.time()))
        admitted = 0
        while time.time() < boundary + 0.2:
            admitted += decide()
        counts[lib] = admitted
    client.close()
    return counts


def _exact_worker(url: str, lib: str, name: str, threads: int, end: float) -> list[int]:
    """Admission times (µs) of ``threads`` threads asking ``name`` as fast as they can until ``end``
    (seconds since the epoch, the server's clock)."""
    import redis
    from django_ratelimit.core import get_usage

    admitted: list[int] = []
    guard = threading.Lock()

    def loop() -> None:
        client = redis.Redis.from_url(url)
        gcra = RateLimit(client, name, f"{EXACT_RATE}/s", burst=EXACT_BURST)
        window = SlidingWindowLimit(client, name, f"{EXACT_N}/s")
        mine = []
        while True:
            if lib == "django-ratelimit":
                usage = get_usage(None, group="exact", key=lambda group, request: name, rate=f"{EXACT_N}/s",
                                  increment=True)
                at = time.time()
                allowed = not usage["should_limit"]
            else:
                reply = gcra.hit() if lib == "ours gcra" else window.hit()
                at, allowed = reply.server_time, reply.allowed
            if allowed:
                mine.append(round(at * US))
            if at >= end:
                break
        with guard:
            admitted.extend(mine)
        client.close()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: loop(), range(threads)))  # a thread's error is raised here
    return admitted


def most_in_a_second(times: list[int]) -> int:
    """The most of ``times`` (µs, sorted) in any interval (t - 1 s, t]."""
    most = start = 0
    for end, at in enumerate(times):
        while times[start] <= at - US:
            start += 1
        most = max(most, end - start + 1)
    return most


def exactness(ctx: Context, section: Section) -> None:
    processes, threads, seconds = ctx.size((16, 4, 10.0), (2, 2, 1.0))
    url = f"redis://{ctx.server.host}:{ctx.server.port}/0"
    _setup_django(url)
    client = ctx.client()
    rows = []
    for lib in ("ours gcra", "ours window", "django-ratelimit"):
        ctx.log(f"exactness: {lib}, {processes} x {threads} for {seconds:g} s")
        sec, usec = client.time()
        end = sec + usec / US + seconds + 0.5  # the processes start within the half second
        results = run_workers(_exact_worker, [(url, lib, f"exact:{lib}", threads, end)] * processes,
                              timeout=seconds + 120)
        times = sorted(at for result in results for at in result)
        span = (times[-1] - times[0]) / US
        if lib == "ours gcra":
            worst = max(n / (EXACT_BURST + EXACT_RATE * (at - times[0]) / US) for n, at in enumerate(times, 1))
            share = len(times) / (EXACT_BURST + EXACT_RATE * span)
            rows.append([lib, len(times), f"{span:.2f}", f"{worst:.4f} of burst + rate x t", f"{share:.4f}"])
            section.figure("exact.gcra.worst_vs_bound", worst)
        else:
            worst = most_in_a_second(times) / EXACT_N
            share = len(times) / (EXACT_N * (int(span) + 1))
            rows.append([lib, len(times), f"{span:.2f}", f"{worst:.2f} x N in one second", f"{share:.4f}"])
            section.figure(f"exact.{lib}.most_in_a_second_vs_n", worst)
        section.figure(f"exact.{lib}.admitted", len(times))
        section.figure(f"exact.{lib}.share_of_most_allowed", share)
    client.close()
    section.heading(f"Exactness ({processes} processes x {threads} threads, {seconds:g} s, one key)", 3)
    section.table(["library", "admitted", "first to last admission (s)", "most admitted", "share of the most allowed"],
                  rows)


def run(ctx: Context) -> Section:
    section = Section("ratelimit", "Rate limits: decisions/s and server time per decision, next to the peers")
    section.text(__doc__.split("\n\n", 1)[1])
    refused = measure(ctx, section, "refused", "100/m", "100/minute", 1, expect_admitted=False)
    admitted = measure(ctx, section, "admitted", "1000/m", "1000/minute", KEYS, expect_admitted=True)
    exactness(ctx, section)
    ctx.log("boundary burst")
    burst = boundary_burst(ctx)
    section.heading(f"Boundary burst (nominal {BOUNDARY_N}/s, asked for 0.4 s across a whole second)", 3)
    section.table(["library", "admitted", "x nominal N"],
                  [[lib, count, f"{count / BOUNDARY_N:.2f}x"] for lib, count in burst.items()])
    for lib, count in burst.items():
        section.figure(f"boundary.admitted.{lib}", count)
        section.figure(f"boundary.vs_nominal.{lib}", count / BOUNDARY_N)
    section.text(f"GCRA's burst is set to N here: it admits at most burst + rate x 0.4 s = "
                 f"{BOUNDARY_N + 0.4 * BOUNDARY_N:.0f} by its guarantee; the exact window at most N.")
    for case, figures in (("refused", refused), ("admitted", admitted)):
        section.check(f"{case}: GCRA decisions/s vs limits' moving window", figures["ours gcra"]["ratio"], ">=",
                      GCRA_DECISIONS)
        section.check(f"{case}: GCRA server µs vs limits' moving window", figures["ours gcra"]["server_ratio"], "<=",
                      GCRA_SERVER)
    section.check("sliding window: admitted across a boundary vs N", burst["ours window"] / BOUNDARY_N, "<=", 1.0)
    figures = section.figures
    section.check("GCRA: most admitted by any instant vs burst + rate x t", figures["exact.gcra.worst_vs_bound"], "<=",
                  1.0)
    section.check("GCRA: admitted over the run vs burst + rate x T", figures["exact.ours gcra.share_of_most_allowed"],
                  ">=", 0.99)
    section.check("sliding window: most admitted in one second vs N",
                  figures["exact.ours window.most_in_a_second_vs_n"], "<=", 1.0)
    return section
