"""``get_or_set`` on a cache hit: ours next to the cache's own ``get_or_set`` and ``get``.

A hit is the common case of a cache fill: the value is there, and ours reads it with one ``GET``,
as the cache's own ``get_or_set`` does.  For each supported backend (django-redis and Django's
``RedisCache``, each on its own database of the run's server), three helpers read one stored key in
a tight loop, taking turns in slices (see :func:`benchmarks.common.interleaved_pairs`):

* **ours**: ``django_redis_coord.get_or_set(key, producer, cache=alias)``;
* **own get_or_set**: the cache's ``get_or_set(key, producer)`` (the cache object fetched once);
* **own get**: the cache's ``get(key)``: one ``GET`` and the decoding, the least a hit can cost.

Target: ours runs at least 0.9x the calls per second of the cache's own ``get_or_set``, for both
backends, in the same run (the ratio of the per-call medians).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from benchmarks.bench_stampede import configure_caches
from benchmarks.common import Context, Section, interleaved_pairs

TARGET_RATIO = 0.9
KEY = "bench:hit"
VALUE = {"report": "x" * 200, "rows": list(range(20))}
#: alias -> (backend, database of the run's server)
BACKENDS = {
    "django-redis": ("django_redis.cache.RedisCache", 1),
    "django": ("django.core.cache.backends.redis.RedisCache", 2),
}


@dataclass(frozen=True)
class Sizes:
    seconds: float = 1.0  # per helper per round
    rounds: int = 5


QUICK = Sizes(seconds=0.2, rounds=1)


def _caches(url: str) -> dict[str, Any]:
    base = url.rsplit("/", 1)[0]
    return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
            **{alias: {"BACKEND": backend, "LOCATION": f"{base}/{db}"} for alias, (backend, db) in BACKENDS.items()}}


def _produce() -> Any:
    raise AssertionError("a hit runs no producer")


def helpers(alias: str) -> dict[str, Callable[[], Any]]:
    """The three ways of reading the stored key of the cache ``alias`` (see the module's docstring)."""
    from django.core.cache import caches

    from django_redis_coord.integrations.cache_fill.sync import get_or_set

    cache = caches[alias]
    return {
        "ours": lambda: get_or_set(KEY, _produce, cache=alias),
        "own get_or_set": lambda: cache.get_or_set(KEY, _produce),
        "own get": lambda: cache.get(KEY),
    }


def run(ctx: Context, sizes: Optional[Sizes] = None) -> Section:
    sizes = sizes or (QUICK if ctx.quick else Sizes())
    section = Section("cache", "get_or_set on a cache hit, next to the cache's own get_or_set")
    section.text(__doc__.split("\n\n", 1)[1])
    override = configure_caches(_caches(ctx.server.url))
    try:
        from django.core.cache import caches

        rows = []
        for alias in BACKENDS:
            caches[alias].set(KEY, VALUE, None)
            calls = helpers(alias)
            for call in calls.values():  # connect, load, warm up
                for _ in range(200):
                    assert call() == VALUE
            result = interleaved_pairs(ctx, calls, sizes.seconds, sizes.rounds, floor="own get_or_set")
            typical, ratio = result["typical"], result["typical_ratio"]
            for lib in calls:
                section.figure(f"{alias}.{lib.replace(' ', '_')}_per_s", typical[lib], f"{alias}: {lib}, calls/s")
            section.figure(f"{alias}.ours_vs_own_get_or_set", ratio["ours"],
                           f"{alias}: ours / own get_or_set (calls/s)")
            section.check(f"{alias}: get_or_set hit, ours / the cache's own get_or_set", ratio["ours"], ">=",
                          TARGET_RATIO)
            per_round = ", ".join(f"{value:.2f}" for value in result["ratios"]["ours"])
            rows.append([alias, typical["ours"], typical["own get_or_set"], typical["own get"], ratio["ours"],
                         typical["ours"] / typical["own get"], per_round])
        section.table(["backend", "ours calls/s", "own get_or_set calls/s", "own get calls/s",
                       "ours / own get_or_set", "ours / own get", "ours / own get_or_set per round"], rows)
    finally:
        if override is not None:
            override.disable()
    return section
