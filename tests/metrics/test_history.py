"""The contention history in Redis: written in background batches (a lock pays no round trip for
it), read back exactly, bounded (keys expire, a cap of templates per minute over all processes)."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from django_redis_coord import Lock
from django_redis_coord.metrics import OTHER_TEMPLATE, HistoryRecorder, MetricsEvents, feed, read_history
from django_redis_coord.metrics._recording import failures
from django_redis_coord.metrics.history import RETENTION_SECONDS, history_key
from django_redis_coord.metrics.history_reading import quantile
from django_redis_coord.metrics.log_buckets import MAX_SECONDS, MIN_SECONDS, RELATIVE_ERROR, bucket, merged, value
from tests.support.expiry import keys_without_expiry
from tests.support.procs import run_processes

#: A fixed instant (seconds since the epoch), the 30th second of its minute.
NOW = 29_000_000 * 60 + 30.0
MINUTE = int(NOW // 60)


def fixed_clock() -> float:
    return NOW


def recorder_for(client, **kwargs) -> HistoryRecorder:
    """A recorder that writes only when told (flush()), at the fixed minute."""
    return HistoryRecorder(client, flush_every=3600, clock=fixed_clock, **kwargs)


@pytest.fixture(autouse=True)
def fresh_failures():
    failures.clear()
    yield
    failures.clear()


def test_counts_and_percentiles_read_back_exactly(redis_client):
    history = recorder_for(redis_client, prefix="shop")
    events = MetricsEvents(history, template="invoice:{pk}")
    for pk in range(20):
        holder = Lock(redis_client, f"invoice:{pk}", timeout=5, events=events)
        assert holder.acquire(blocking=False)
        assert not Lock(redis_client, f"invoice:{pk}", timeout=5, events=events).acquire(blocking=False)
        holder.release()
    feed()  # what the metrics' thread does every second (one an earlier test started may have fed some)
    for wait in [0.002] * 98 + [2.0] * 2:  # known waits: p50 is 2 ms, p99 2 s (the 99th of 100)
        history.acquired("report", "lock", wait)
    history.lost("report", "lock", None)
    assert history.flush() == 1 and history.pending() == 0
    found = {h.template: h for h in read_history(redis_client, "shop", minutes=60, now=NOW)}
    assert set(found) == {"invoice:{pk}", "report"}
    invoice, report = found["invoice:{pk}"], found["report"]
    assert invoice.minutes[-1] == MINUTE and len(invoice.minutes) == 60
    assert invoice.acquisitions[-1] == 20 and invoice.contentions[-1] == 20 and invoice.total("losses") == 0
    assert sum(invoice.holds[-1].values()) == 20 and sum(invoice.acquisitions[:-1]) == 0
    assert report.total("acquisitions") == 100 and report.total("losses") == 1
    assert report.wait_p50[-1] == pytest.approx(0.002, rel=RELATIVE_ERROR)
    assert report.wait_p99[-1] == pytest.approx(2.0, rel=RELATIVE_ERROR)
    assert report.wait_p50[0] is None  # nothing that minute
    assert read_history(redis_client, "", minutes=60, now=NOW) == []  # another prefix: nothing
    # The templates with the most contentions come first.
    assert [h.template for h in read_history(redis_client, "shop", now=NOW)] == ["invoice:{pk}", "report"]


def test_quantiles_are_the_recorded_durations_within_the_stated_error():
    assert quantile({}, 0.5) is None
    # Three holds of exactly 10 s: every percentile is 10 s (not a bucket's bounds).
    tens = {bucket(10.0): 3}
    assert quantile(tens, 0.5) == pytest.approx(10.0, rel=RELATIVE_ERROR)
    assert quantile(tens, 0.99) == pytest.approx(10.0, rel=RELATIVE_ERROR)
    # Nearest rank: of 100 durations 1..100 s, p50 is the 50th, p99 the 99th.
    spread = merged({bucket(float(n)): 1} for n in range(1, 101))
    assert quantile(spread, 0.5) == pytest.approx(50.0, rel=RELATIVE_ERROR)
    assert quantile(spread, 0.99) == pytest.approx(99.0, rel=RELATIVE_ERROR)
    # No upper bound short of days: a minute, an hour, a day are what they are.
    for seconds in (60.0, 61.0, 3600.0, 86400.0):
        assert quantile({bucket(seconds): 1}, 0.5) == pytest.approx(seconds, rel=RELATIVE_ERROR)
    # The error holds for every duration from 0.1 ms to 7 days, bucket by bucket.
    seconds = MIN_SECONDS
    while seconds < MAX_SECONDS:
        assert value(bucket(seconds)) == pytest.approx(seconds, rel=RELATIVE_ERROR)
        seconds *= 1.0123
    assert value(bucket(0.0)) == pytest.approx(MIN_SECONDS, rel=RELATIVE_ERROR)  # shorter: counted as 0.1 ms


def test_a_lock_pays_no_round_trip_for_the_history(redis_client):
    history = recorder_for(redis_client)
    events = MetricsEvents(history, template="job:{n}")
    with Lock(redis_client, "warm", timeout=5, events=events):  # scripts loaded
        pass
    feed()
    assert history.flush() == 1
    redis_client.delete(history_key("", MINUTE))
    redis_client.config_resetstat()
    for n in range(30):
        with Lock(redis_client, f"job:{n}", timeout=5, events=events):
            pass
    stats = redis_client.info("commandstats")
    calls = {name: value["calls"] for name, value in stats.items()}
    assert calls["cmdstat_evalsha"] == 60  # acquire and release, nothing more (the rest ran inside them)
    assert not {"cmdstat_hincrby", "cmdstat_hsetnx", "cmdstat_multi", "cmdstat_exec"} & set(calls), calls
    feed()
    assert not redis_client.exists(history_key("", MINUTE)) and history.pending() == 1
    redis_client.config_resetstat()
    assert history.flush() == 1  # one script call for the minute, in one pipeline
    assert redis_client.info("commandstats")["cmdstat_evalsha"]["calls"] == 1


def test_the_background_thread_writes_every_few_seconds(redis_client):
    history = HistoryRecorder(redis_client, flush_every=0.2, clock=fixed_clock)
    try:
        with Lock(redis_client, "bg:1", timeout=5, events=MetricsEvents(history, template="bg:{n}")):
            pass
        deadline = time.monotonic() + 10
        while not redis_client.exists(history_key("", MINUTE)):
            assert time.monotonic() < deadline, "the history was never written"
            time.sleep(0.05)
        assert read_history(redis_client, now=NOW)[0].total("acquisitions") == 1
    finally:
        history.close()


def test_history_keys_expire_within_the_documented_bound(redis_client):
    history = HistoryRecorder(redis_client, flush_every=3600)  # the real clock: this minute
    for n in range(5):
        history.acquired(f"t{n}", "lock", 0.01)
        history.released(f"t{n}", "lock", 0.02)
    assert history.flush() == 1
    keys = list(redis_client.scan_iter("*history*"))
    assert len(keys) == 1 and keys_without_expiry(redis_client) == []
    assert RETENTION_SECONDS * 1000 - 5000 < redis_client.pttl(keys[0]) <= RETENTION_SECONDS * 1000
    assert keys[0] == history_key("", int(time.time() // 60)) or keys[0] == history_key("", int(time.time() // 60) - 1)


def _write_templates(url: str, index: int, cap: int, count: int) -> int:
    """In a forked process: ``count`` templates of its own, one acquisition each, in the fixed minute."""
    client = redis.Redis.from_url(url)
    history = HistoryRecorder(client, flush_every=3600, clock=fixed_clock, templates_per_minute=cap)
    for n in range(count):
        history.acquired(f"p{index}:t{n}", "lock", 0.001)
    written = history.flush()
    client.close()
    return written


def test_a_minute_keeps_a_bounded_number_of_templates_whichever_processes_write(redis_client, redis_url):
    cap, processes, each = 10, 4, 8
    written = run_processes(_write_templates, [(redis_url, index, cap, each) for index in range(processes)])
    assert written == [1] * processes
    raw = redis_client.hgetall(history_key("", MINUTE))
    templates = [field for field in raw if field.startswith(b"t|")]
    assert int(raw[b"#templates"]) == cap and len(templates) == cap + 1  # the cap, and "(other)"
    found = {h.template: h.total("acquisitions") for h in read_history(redis_client, now=NOW)}
    assert len(found) == cap + 1 and OTHER_TEMPLATE in found
    assert sum(found.values()) == processes * each  # nothing lost: the rest went to "(other)"
    assert found[OTHER_TEMPLATE] == processes * each - cap


def test_one_process_keeps_a_bounded_number_of_templates_per_minute_too(redis_client):
    history = recorder_for(redis_client, templates_per_minute=3)
    for n in range(50):
        history.contended(f"t{n}", "lock", 0.0)
    assert history.pending() == 4  # three, and "(other)"
    history.flush()
    found = {h.template: h.total("contentions") for h in read_history(redis_client, now=NOW)}
    assert found == {"t0": 1, "t1": 1, "t2": 1, OTHER_TEMPLATE: 47}


def test_a_failed_write_drops_the_batch_logs_and_leaves_the_lock_alone(redis_client, caplog):
    caplog.set_level(logging.ERROR, logger="django_redis_coord.metrics")
    history = recorder_for(redis.Redis(port=1, socket_connect_timeout=0.2))
    events = MetricsEvents(history, template="down:{n}")
    for n in range(3):
        with Lock(redis_client, f"down:{n}", timeout=5, events=events):
            pass
        feed()
        assert history.flush() == 0
        assert history.pending() == 0  # dropped, not kept to grow
    records = [r for r in caplog.records if "contention history" in r.getMessage()]
    assert len(records) == 1


def _child_writes_its_own(url: str, history: HistoryRecorder) -> int:
    """In a forked child: the parent's pending counts are not its own."""
    history.client = redis.Redis.from_url(url)
    pending = history.pending()
    history.acquired("forked", "lock", 0.001)
    history.flush()
    return pending


def test_a_forked_child_does_not_write_its_parents_counts(redis_client, redis_url):
    history = recorder_for(redis_client)
    for _ in range(5):
        history.acquired("forked", "lock", 0.001)
    assert run_processes(_child_writes_its_own, [(redis_url, history)]) == [0]
    assert read_history(redis_client, now=NOW)[0].total("acquisitions") == 1
    history.flush()
    assert read_history(redis_client, now=NOW)[0].total("acquisitions") == 6
