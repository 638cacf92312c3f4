"""Listing live holders: 1,000 holders among 1,000,000 unrelated keys, without scanning.

The listing (``django_redis_coord.listing.HolderListing``) reads the 16384 per-slot registries in
one round trip (``TIME`` and one ``ZUNION`` in ``MULTI``/``EXEC``) and the details of the live
entries in one more (one read-only script call); the unrelated keys (here ``DEBUG POPULATE``
strings standing for a large cache in the same database) are never touched.  For scale, the
report also times what a listing built on ``SCAN`` would pay just to walk the keyspace once.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.common import Context, Section, percentile
from django_redis_coord import Lock
from django_redis_coord.core.listing import HolderListing

TARGET_MS = 100.0


def _timed(fn: Any, rounds: int) -> list[float]:
    values = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        values.append((time.perf_counter() - started) * 1000.0)
    return values


def run(ctx: Context) -> Section:
    section = Section("listing", "Listing live holders among unrelated keys")
    ctx.flush()
    client = ctx.client()
    unrelated = ctx.size(1_000_000, quick=20_000)
    holders = ctx.size(1000, quick=50)
    rounds = ctx.size(30, quick=5)

    ctx.log(f"filling {unrelated:,} unrelated keys with DEBUG POPULATE")
    client.execute_command("DEBUG", "POPULATE", unrelated, "cache")
    ctx.log(f"acquiring {holders} locks")
    locks = []
    for i in range(holders):
        lock = Lock(client, f"orders:{i:05d}", timeout=600, label=f"worker {i % 7}")
        lock.acquire()
        locks.append(lock)
    dbsize = client.dbsize()

    listing = HolderListing(client)
    listed = listing.holders()
    if len(listed) != holders:
        raise AssertionError(f"listed {len(listed)} holders, expected {holders}")
    _timed(listing.holders, 3)  # warm connections and script caches

    entries = listing.entries()
    client.config_resetstat()
    full = _timed(listing.holders, rounds)
    stats = client.info("commandstats")
    # Commands inside MULTI/EXEC and scripts count twice (EXEC/EVALSHA include them): top level only.
    server_us = sum(stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in ("exec", "evalsha", "multi")) / rounds
    scans = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("scan", "keys"))

    # The parts, interleaved round by round so that the machine's load weighs on each alike.
    parts: dict[str, list[float]] = {"registries": [], "details": [], "page": [], "search": [], "full": []}
    calls = {
        "registries": listing.entries,
        "details": lambda: listing.details(entries),
        "page": lambda: listing.holders(offset=0, limit=100),
        "search": lambda: listing.holders(search="orders:0042"),
        "full": listing.holders,
    }
    for _ in range(rounds):
        for name, call in calls.items():
            parts[name].extend(_timed(call, 1))
    full = full + parts["full"]
    registries, details, page, search = parts["registries"], parts["details"], parts["page"], parts["search"]

    ctx.log("one SCAN pass over the keyspace, for scale")
    started = time.perf_counter()
    walked = 0
    for _ in client.scan_iter(match="*:dcoord:registry", count=1000):
        walked += 1
    scan_ms = (time.perf_counter() - started) * 1000.0

    p50 = percentile(full, 50)
    section.figure("keys.total", dbsize, "keys in the database")
    section.figure("holders", holders, "live holders")
    section.figure("list_all.p50_ms", p50, "list every holder with details, p50 (ms)")
    section.figure("list_all.p90_ms", percentile(full, 90), "list every holder, p90 (ms)")
    section.figure("list_all.max_ms", max(full), "list every holder, max (ms)")
    section.figure("list_all.server_ms", server_us / 1000.0, "server time per listing (ms)")
    section.figure("registries.p50_ms", percentile(registries, 50), "step 1: read the 16384 registries (ms)")
    section.figure("details.p50_ms", percentile(details, 50), f"step 2: details of {holders} entries (ms)")
    section.figure("page_100.p50_ms", percentile(page, 50), "one admin page of 100 holders (ms)")
    section.figure("search.p50_ms", percentile(search, 50), "search matching one holder (ms)")
    section.figure("scan_pass_ms", scan_ms, "one SCAN pass over the keyspace, COUNT 1000 (ms)")
    section.figure("scan_commands", scans, "SCAN/KEYS commands issued by the listing")
    section.check(f"list {holders} holders among {dbsize:,} keys, p50 (ms)", p50, "<=", TARGET_MS)
    section.check("SCAN/KEYS commands used by the listing", scans, "==", 0)
    section.table(
        ["operation", "p50 ms", "p90 ms", "max ms"],
        [
            ["list every holder (both steps)", p50, percentile(full, 90), max(full)],
            ["step 1: 16384 registries (TIME + ZUNION in MULTI/EXEC)", percentile(registries, 50),
             percentile(registries, 90), max(registries)],
            [f"step 2: details of {holders} entries, one script call", percentile(details, 50),
             percentile(details, 90), max(details)],
            ["one page of 100 (admin)", percentile(page, 50), percentile(page, 90), max(page)],
            ["search, one match", percentile(search, 50), percentile(search, 90), max(search)],
            ["one SCAN pass (reference, not used)", scan_ms, scan_ms, scan_ms],
        ],
    )
    section.text(
        f"{holders} locks held (600 s TTL) among {dbsize:,} keys; {rounds} rounds each after warm-up; "
        "times are wall-clock on the client, including parsing. The listing issues no SCAN or KEYS: "
        "the server spends its time in one ZUNION over the (mostly empty) registries and in one "
        "read-only inspect script call covering every live entry."
    )
    for lock in locks:
        lock.release()
    client.close()
    return section
