"""Metrics: what recording a hold costs an uncontended acquire+release, metrics on against off.

The variants of ``DJANGO_REDIS_COORD["METRICS"]`` (off; ``prometheus``; ``otel`` with the
OpenTelemetry SDK aggregating in memory; ``history``, its background writer running; all three)
take turns in one process (forked from the runner, Django set up as a site would), in slices of
:data:`SLICE` seconds, the order rotating every slice, so that they share the same connection
placement and the same load on a shared machine.  Each turn sets the variant's settings
(``override_settings``), runs :data:`WARM` pairs untimed (the client is built again for new
settings), then times pairs of one path:

* ``factory``: ``lock("bench:metrics", template="bench:{n}")`` made, acquired and released;
* ``@locked``: a function decorated with ``@locked("bench:metrics:{n}")`` called with a new ``n``.

The pairs are timed in blocks of :data:`BLOCK`; a variant's typical pair is the median block time
over the whole run, and its ratio is ``off``'s typical pair time over its own (1.0: no cost; the
target is at least 0.95, an overhead of at most 5 %).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from benchmarks.common import Context, Section, percentile, run_workers

#: Seconds of one variant's turn, pairs timed together, and pairs run untimed at the start of a turn.
SLICE = 0.01
BLOCK = 5
WARM = 5
TARGET_RATIO = 0.95

VARIANTS: dict[str, tuple[str, ...]] = {
    "off": (),
    "off again": (),  # the same as off: what the machine's noise alone makes of a ratio
    "prometheus": ("prometheus",),
    "otel": ("otel",),
    "history": ("history",),
    "all": ("prometheus", "otel", "history"),
}
PATHS = ("factory", "@locked")


@dataclass
class Sizes:
    rounds: int
    slices: int


FULL = Sizes(rounds=5, slices=60)
QUICK = Sizes(rounds=1, slices=2)


def _setup(url: str) -> None:
    """Django for the measuring process (configured afresh, or overridden when the run set it up)."""
    import django
    from django.conf import settings
    from opentelemetry import metrics as otel
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    coord = {"URL": url}
    if not settings.configured:
        settings.configure(DEBUG=False, SECRET_KEY="benchmark-only", INSTALLED_APPS=["django_redis_coord"],
                           DATABASES={}, DJANGO_REDIS_COORD=coord)
        django.setup()
    else:
        from django.test import override_settings

        override_settings(DJANGO_REDIS_COORD=coord).enable()
    # An SDK aggregating what is recorded, as an application's set-up does.
    otel.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _pairs() -> dict[str, Callable[[], None]]:
    from django_redis_coord import lock, locked

    numbers = itertools.count()

    def factory() -> None:
        held = lock("bench:metrics", template="bench:{n}")
        if not held.acquire(blocking=False):
            raise RuntimeError("the lock was taken: the benchmark wants it uncontended")
        held.release()

    @locked("bench:metrics:{n}")
    def decorated(n: int) -> int:
        return n

    def through_locked() -> None:
        decorated(next(numbers) % 1000)

    return {"factory": factory, "@locked": through_locked}


def _turn(pair: Callable[[], None], seconds: float, settle: Callable[[], object]) -> tuple[int, float, float]:
    """Pairs for ``seconds``, then ``settle()`` (the hand-over of what the turn queued to the
    recorders): (pairs, seconds of pairs, seconds of hand-over)."""
    clock = time.perf_counter
    count = 0
    started = now = clock()
    while now - started < seconds:
        for _ in range(BLOCK):
            pair()
        count += BLOCK
        now = clock()
    settle()
    return count, now - started, clock() - now


def _settle() -> int:
    """What a turn queued, handed to the recorders now (so that it is charged to the variant that
    queued it, not to the next one)."""
    from django_redis_coord.metrics import feed

    return feed()


def _measure(url: str, sizes: Sizes) -> dict[str, Any]:
    """In a forked process: (pairs, seconds) of every turn, by variant and path, slice after slice."""
    from django.test import override_settings

    _setup(url)
    pairs = _pairs()
    settings_of = {variant: {"URL": url, "METRICS": list(metrics)} for variant, metrics in VARIANTS.items()}
    variants = list(VARIANTS)
    for variant in variants:  # exporters made, scripts loaded
        with override_settings(DJANGO_REDIS_COORD=settings_of[variant]):
            for pair in pairs.values():
                for _ in range(200):
                    pair()
            _settle()
    turns: dict[str, list[tuple[int, float, float]]] = {f"{v}|{p}": [] for v in variants for p in PATHS}
    for round_no in range(sizes.rounds):
        for slice_no in range(sizes.slices):
            shift = (round_no * sizes.slices + slice_no) % len(variants)
            for path in PATHS:
                for variant in variants[shift:] + variants[:shift]:
                    with override_settings(DJANGO_REDIS_COORD=settings_of[variant]):
                        for _ in range(WARM):
                            pairs[path]()
                        _settle()
                        turns[f"{variant}|{path}"].append(_turn(pairs[path], SLICE, _settle))
    return turns


def run(ctx: Context, sizes: Optional[Sizes] = None) -> Section:
    sizes = sizes or (QUICK if ctx.quick else FULL)
    section = Section("metrics", "Metrics: the cost of recording a hold, metrics on against off")
    ctx.flush()
    [turns] = run_workers(_measure, [(ctx.server.url, sizes)], timeout=900)
    rows = []
    for variant in VARIANTS:
        for path in PATHS:
            mine, off = turns[f"{variant}|{path}"], turns[f"off|{path}"]
            # Each slice's turn against off's turn of the same slice (the variants took turns in it):
            # pairs/s of the lock path alone, and with the hand-over to the recorders charged to the turn.
            lock_path = [(n / t) / (off_n / off_t) for (n, t, _), (off_n, off_t, _) in zip(mine, off)]
            charged = [(n / (t + f)) / (off_n / (off_t + off_f)) for (n, t, f), (off_n, off_t, off_f) in zip(mine, off)]
            ratio, charged_ratio = statistics.median(lock_path), statistics.median(charged)
            pair_us = sum(t for _, t, _ in mine) / sum(n for n, _, _ in mine) * 1e6
            off_us = sum(t for _, t, _ in off) / sum(n for n, _, _ in off) * 1e6
            feed_us = sum(f for _, _, f in mine) / sum(n for n, _, _ in mine) * 1e6
            key = f"{variant.replace(' ', '_')}.{path.strip('@')}"
            section.figure(f"{key}.pair_us", pair_us, f"{path}, METRICS {variant}: mean acquire+release (us)")
            section.figure(f"{key}.ratio", ratio, f"{path}, METRICS {variant}: pairs/s against off, median of slices")
            section.figure(f"{key}.ratio_fed", charged_ratio,
                           f"{path}, METRICS {variant}: the same, the recorders' work charged")
            rows.append([path, variant, pair_us, pair_us - off_us, ratio, percentile(lock_path, 25),
                         percentile(lock_path, 75), feed_us, charged_ratio])
            if variant not in ("off", "off again"):
                section.check(f"{path}, METRICS {variant}: pairs/s against off (overhead <= 5 %)", ratio, ">=",
                              TARGET_RATIO)
    section.table(["path", "METRICS", "pair us (mean)", "added us", "ratio to off (median)", "ratio p25",
                   "ratio p75", "recorders us/pair", "ratio, recorders charged"], rows)
    section.text(
        f"{sizes.rounds * sizes.slices} slices; in each, every variant and path had one turn of "
        f"{SLICE * 1000:.0f} ms (the order rotating), in one process. A pair is one uncontended acquire and "
        "release: two Lua script calls. The ratio is a turn's pairs/s over off's in the same slice, the median "
        "of the slices (p25 and p75 beside it); 'off again' is off measured as a variant: the noise alone. "
        "A lock only queues its events; the metrics' background thread hands them to the recorders "
        "(Prometheus, OpenTelemetry's SDK, the history's counts) every second. Here each turn ends by handing "
        "over what it queued, timed apart ('recorders us/pair'); the last column charges that time to the turn: "
        "what metrics cost a process whose CPU is the limit rather than its locks' round trips."
    )
    return section
