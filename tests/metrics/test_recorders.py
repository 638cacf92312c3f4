"""Metrics of the core primitives (no Django): Prometheus and OpenTelemetry count exactly the events
of a workload run in several OS processes, labels are templates (bounded), the registry gauges
read the live holders, and a failing exporter never breaks a lock."""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections import Counter

import pytest
import redis
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from django_redis_coord import Lock, ReadWriteLock, Semaphore
from django_redis_coord.core.exceptions import LockNotOwnedError
from django_redis_coord.metrics import (
    DEFAULT_TEMPLATE,
    MAX_TEMPLATE_LENGTH,
    MAX_TEMPLATES,
    OTHER_TEMPLATE,
    HolderGauges,
    MetricsEvents,
    Recorder,
    _recording,
    feed,
    label_of,
)
from django_redis_coord.metrics.otel import OtelRecorder
from django_redis_coord.metrics.prometheus import HolderCollector, PrometheusRecorder
from tests.support.hold_lock import HolderProcesses
from tests.support.procs import run_processes

#: The workload of one process (see :func:`workload`).
OWN, SHARED, PERMITS, REFUSED, LOST = 6, 4, 3, 5, 2
PROCESSES = 3


class Counting(Recorder):
    """Counts every event it is given, by (event, template, kind)."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def acquired(self, template, kind, wait_time):
        self.counts["acquired", template, kind] += 1

    def contended(self, template, kind, wait_time):
        self.counts["contended", template, kind] += 1

    def released(self, template, kind, held_time):
        self.counts["released", template, kind] += 1

    def lost(self, template, kind, held_time):
        self.counts["lost", template, kind] += 1


def workload(url: str, index: int, *recorders: Recorder) -> None:
    """Known events, some of them against holders in other processes: OWN locks of "job:{n}", SHARED
    blocking acquires of one lock all processes take turns on, PERMITS semaphore permits, REFUSED
    acquires of the lock the parent holds (contended), LOST holds that expire before their release."""
    client = redis.Redis.from_url(url)
    events = MetricsEvents(*recorders)
    for n in range(OWN):
        with Lock(client, f"job:{index}:{n}", timeout=10, events=events.bound("job:{n}")):
            pass
    for _ in range(SHARED):
        shared = Lock(client, "shared", timeout=10, events=events.bound("shared"))
        assert shared.acquire(blocking=True, blocking_timeout=30)
        time.sleep(0.005)
        shared.release()
    permits = Semaphore(client, "exports", limit=PROCESSES, timeout=10, events=events.bound("exports"))
    for _ in range(PERMITS):
        with permits:
            pass
    busy = Lock(client, "busy", timeout=10, events=events.bound("busy"))
    assert not busy.acquire(blocking=True, blocking_timeout=0.02)  # queued behind the parent's hold, gave up
    for _ in range(REFUSED - 1):
        assert not Lock(client, "busy", timeout=10, events=events.bound("busy")).acquire(blocking=False)
    for n in range(LOST):
        short = Lock(client, f"short:{index}:{n}", timeout=0.2, events=events.bound("short:{n}"))
        assert short.acquire(blocking=False)
        time.sleep(0.35)
        with pytest.raises(LockNotOwnedError):
            short.release()
    client.close()


def expected(processes: int) -> dict[tuple[str, str, str], int]:
    each = {
        ("acquired", "job:{n}", "lock"): OWN, ("released", "job:{n}", "lock"): OWN,
        ("acquired", "shared", "lock"): SHARED, ("released", "shared", "lock"): SHARED,
        ("acquired", "exports", "semaphore"): PERMITS, ("released", "exports", "semaphore"): PERMITS,
        ("contended", "busy", "lock"): REFUSED,
        ("acquired", "short:{n}", "lock"): LOST, ("lost", "short:{n}", "lock"): LOST,
    }
    return {key: count * processes for key, count in each.items()}


def _prometheus_worker(url: str, index: int) -> dict:
    """In a spawned process (PROMETHEUS_MULTIPROC_DIR set): the workload, its events counted too."""
    counting = Counting()
    workload(url, index, PrometheusRecorder(CollectorRegistry()), counting)
    feed()  # what the metrics' thread does every second
    return dict(counting.counts)


# Prometheus' names of each event: (metric, sample suffix).
PROMETHEUS_SAMPLES = {
    "acquired": "django_redis_coord_acquisitions_total",
    "contended": "django_redis_coord_contentions_total",
    "lost": "django_redis_coord_losses_total",
    "released": "django_redis_coord_hold_seconds_count",
}


def test_prometheus_counts_equal_the_events_of_several_processes(redis_client, redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # as under gunicorn: one file per process
    holder = Lock(redis_client, "busy", timeout=60)
    assert holder.acquire(blocking=False)
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        counted = pool.starmap(_prometheus_worker, [(redis_url, index) for index in range(PROCESSES)])
    holder.release()
    recorded: Counter = Counter()
    for counts in counted:
        recorded.update(counts)
    assert dict(recorded) == expected(PROCESSES)

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    for (event, template, kind), count in recorded.items():
        labels = {"template": template, "kind": kind}
        assert registry.get_sample_value(PROMETHEUS_SAMPLES[event], labels) == count, (event, template)
        if event == "acquired":
            assert registry.get_sample_value("django_redis_coord_acquire_wait_seconds_count", labels) == count
    # Nothing else was counted, and the shared lock's waits (turns taken across processes) show.
    assert registry.get_sample_value("django_redis_coord_contentions_total", {"template": "job:{n}",
                                                                             "kind": "lock"}) == 0
    shared_wait = registry.get_sample_value("django_redis_coord_acquire_wait_seconds_sum",
                                            {"template": "shared", "kind": "lock"})
    assert shared_wait is not None and shared_wait > 0


def otel_sums(reader: InMemoryMetricReader) -> dict[tuple[str, str, str], float]:
    """(metric, template, kind) -> a counter's value or a histogram's count."""
    found = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attrs = dict(point.attributes)
                    value = getattr(point, "count", None)
                    found[metric.name, attrs.get("template", ""), attrs.get("kind", "")] = (
                        value if value is not None else point.value)
    return found


OTEL_NAMES = {
    "acquired": "django_redis_coord.acquisitions",
    "contended": "django_redis_coord.contentions",
    "lost": "django_redis_coord.losses",
    "released": "django_redis_coord.hold.duration",
}


def _otel_worker(url: str, index: int) -> tuple[dict, dict]:
    """In a forked process: its own meter provider and in-memory reader."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    counting, recorder = Counting(), OtelRecorder(provider.get_meter("test"))
    workload(url, index, recorder, counting)
    feed()  # what the metrics' thread does every second
    sums = otel_sums(reader)
    provider.shutdown()
    return dict(counting.counts), sums


def test_opentelemetry_counts_equal_the_events_of_several_processes(redis_client, redis_url):
    holder = Lock(redis_client, "busy", timeout=60)
    assert holder.acquire(blocking=False)
    results = run_processes(_otel_worker, [(redis_url, index) for index in range(PROCESSES)], timeout=120)
    holder.release()
    recorded: Counter = Counter()
    for counts, sums in results:
        recorded.update(counts)
        for (event, template, kind), count in counts.items():
            assert sums[OTEL_NAMES[event], template, kind] == count, (event, template)
            if event == "acquired":
                assert sums["django_redis_coord.acquire.wait", template, kind] == count
    assert dict(recorded) == expected(PROCESSES)


def test_otel_gauges_read_the_registry(redis_client, redis_url):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    OtelRecorder(provider.get_meter("test"), gauges=HolderGauges(redis_client, max_age=0))
    permits = Semaphore(redis_client, "gauged", limit=3, timeout=30)
    assert permits.acquire(blocking=False) and permits.acquire(blocking=False)
    lock = Lock(redis_client, "gauged-lock", timeout=30)
    assert lock.acquire(blocking=False)
    sums = otel_sums(reader)
    assert sums["django_redis_coord.holders", "", "semaphore"] == 2
    assert sums["django_redis_coord.holders", "", "lock"] == 1
    assert sums["django_redis_coord.waiters", "", "lock"] == 0
    assert sums["django_redis_coord.oldest_hold", "", "lock"] >= 0
    provider.shutdown()


def wait_for_sample(registry: CollectorRegistry, name: str, labels: dict[str, str], value: float) -> None:
    """Wait until the registry's sample ``name{labels}`` reads ``value`` (processes starting up)."""
    deadline = time.monotonic() + 30
    while registry.get_sample_value(name, labels) != value:
        assert time.monotonic() < deadline, f"{name}{labels} never reached {value}"
        time.sleep(0.05)


def test_prometheus_gauges_count_holders_waiters_and_the_oldest_hold(redis_client, redis_url):
    registry = CollectorRegistry()
    gauges = HolderGauges(redis_client, max_age=0)
    registry.register(HolderCollector(gauges))
    assert registry.get_sample_value("django_redis_coord_holders", {"kind": "lock"}) == 0
    with HolderProcesses(redis_url) as processes:
        processes.start("reports:nightly", timeout=60)
        processes.start("reports:nightly", timeout=60, wait=False)  # queued behind the first
        processes.start("reports:nightly", timeout=60, wait=False)
        permits = Semaphore(redis_client, "exports", limit=3, timeout=60)
        assert permits.acquire(blocking=False) and permits.acquire(blocking=False)
        time.sleep(0.3)
        wait_for_sample(registry, "django_redis_coord_waiters", {"kind": "lock"}, 2)
        assert registry.get_sample_value("django_redis_coord_holders", {"kind": "lock"}) == 1
        assert registry.get_sample_value("django_redis_coord_holders", {"kind": "semaphore"}) == 2
        assert registry.get_sample_value("django_redis_coord_waiters", {"kind": "semaphore"}) == 0
        assert registry.get_sample_value("django_redis_coord_oldest_hold_seconds", {"kind": "lock"}) >= 0.3
        assert registry.get_sample_value("django_redis_coord_registry_up") == 1


def test_gauges_and_counters_count_read_write_locks_as_rwlock(redis_client, redis_url):
    """A read-write lock's holds are in the gauges (the listing shows them) and its events are
    labelled ``rwlock``, one of the documented kinds."""
    registry = CollectorRegistry()
    registry.register(HolderCollector(HolderGauges(redis_client, max_age=0)))
    counting = Counting()
    rw = ReadWriteLock(redis_client, "ledger", timeout=60, events=MetricsEvents(counting, template="ledger"))
    with HolderProcesses(redis_url) as processes:
        processes.start("ledger", timeout=60, mode="read")
        assert rw.read.acquire(blocking=False)
        processes.start("ledger", timeout=60, mode="write", wait=False)  # queued behind the two readers
        wait_for_sample(registry, "django_redis_coord_waiters", {"kind": "rwlock"}, 1)
        assert registry.get_sample_value("django_redis_coord_holders", {"kind": "rwlock"}) == 2
        assert registry.get_sample_value("django_redis_coord_holders", {"kind": "lock"}) == 0
        rw.read.release()
        assert not rw.write.acquire(blocking=False)  # the other reader still holds
    feed()
    assert dict(counting.counts) == {("acquired", "ledger", "rwlock"): 1, ("released", "ledger", "rwlock"): 1,
                                     ("contended", "ledger", "rwlock"): 1}


def test_the_gauges_share_one_reading_within_max_age(redis_client):
    gauges = HolderGauges(redis_client, max_age=60)
    assert gauges.read()["lock"].holders == 0
    lock = Lock(redis_client, "later", timeout=30)
    assert lock.acquire(blocking=False)
    assert gauges.read()["lock"].holders == 0  # the reading kept
    assert HolderGauges(redis_client, max_age=0).read()["lock"].holders == 1


class Exploding(Recorder):
    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *args) -> None:
        self.calls += 1
        raise RuntimeError("exporter down")

    acquired = contended = released = lost = _fail


@pytest.fixture
def fresh_failures():
    _recording.failures.clear()
    yield
    _recording.failures.clear()


def test_a_failing_exporter_never_breaks_a_lock_and_is_logged_once_in_a_while(redis_client, caplog, fresh_failures):
    exploding, counting = Exploding(), Counting()
    events = MetricsEvents(exploding, counting, template="safe:{n}")
    caplog.set_level(logging.ERROR, logger="django_redis_coord.metrics")
    for n in range(50):
        lock = Lock(redis_client, f"safe:{n}", timeout=10, events=events)
        assert lock.acquire(blocking=False)
        assert not Lock(redis_client, f"safe:{n}", timeout=10, events=events).acquire(blocking=False)
        lock.release()
    feed()
    assert exploding.calls == 150  # every event reached it
    assert counting.counts["acquired", "safe:{n}", "lock"] == 50  # and the next recorder still got them
    assert counting.counts["released", "safe:{n}", "lock"] == 50
    records = [r for r in caplog.records if "exporter down" in r.getMessage()]
    assert len(records) == 1 and "not affected" in records[0].getMessage()
    assert redis_client.exists(*[f"safe:{n}" for n in range(50)]) == 0


def test_the_gauges_of_an_unreachable_redis_say_so_and_do_not_raise(fresh_failures):
    dead = redis.Redis(port=1, socket_connect_timeout=0.2)
    registry = CollectorRegistry()
    registry.register(HolderCollector(HolderGauges(dead, max_age=0)))
    assert registry.get_sample_value("django_redis_coord_registry_up") == 0
    assert registry.get_sample_value("django_redis_coord_holders", {"kind": "lock"}) is None


def test_labels_are_templates_bounded_in_number_and_length(monkeypatch):
    monkeypatch.setattr(label_of, "known", set())
    assert label_of(None) == DEFAULT_TEMPLATE
    assert label_of("x" * 500) == "x" * MAX_TEMPLATE_LENGTH
    for n in range(MAX_TEMPLATES * 2):
        label = label_of(f"template-{n}:{{pk}}")
        assert label == (f"template-{n}:{{pk}}" if n < MAX_TEMPLATES - 1 else OTHER_TEMPLATE)
    assert label_of("template-0:{pk}") == "template-0:{pk}"  # a known one stays itself


def test_ten_thousand_names_of_one_template_are_one_series(redis_client):
    registry = CollectorRegistry()
    events = MetricsEvents(PrometheusRecorder(registry), template="invoice:{pk}")
    for pk in range(0, 10_000, 50):  # 200 distinct names of the template, each taken and released
        with Lock(redis_client, f"invoice:{pk}", timeout=5, events=events):
            pass
    series = [sample for metric in registry.collect() if metric.name == "django_redis_coord_acquisitions"
              for sample in metric.samples if sample.name.endswith("_total")]
    assert [(s.labels, s.value) for s in series] == [({"template": "invoice:{pk}", "kind": "lock"}, 200.0)]
    other = CollectorRegistry()
    holder = Lock(redis_client, "invoice:1", timeout=5, events=MetricsEvents(PrometheusRecorder(other)))
    assert holder.acquire(blocking=False)
    holder.release()
    assert other.get_sample_value("django_redis_coord_acquisitions_total",
                                  {"template": DEFAULT_TEMPLATE, "kind": "lock"}) == 1
    assert other.get_sample_value("django_redis_coord_acquisitions_total",
                                  {"template": "invoice:1", "kind": "lock"}) is None


async def _async_workload(client, recorder: Counting) -> None:
    from django_redis_coord.asyncio import Lock as AsyncLock

    events = MetricsEvents(recorder, template="async:{n}")
    holder = AsyncLock(client, "async:1", timeout=5, events=events)
    assert await holder.acquire(blocking=False)
    assert not await AsyncLock(client, "async:1", timeout=5, events=events).acquire(blocking=False)
    await holder.release()


def test_asyncio_primitives_feed_the_same_recorders(async_redis):
    import asyncio

    counting = Counting()

    async def main() -> None:
        client = async_redis()
        await _async_workload(client, counting)
        await client.aclose()

    asyncio.run(main())
    feed()
    assert dict(counting.counts) == {("acquired", "async:{n}", "lock"): 1, ("contended", "async:{n}", "lock"): 1,
                                     ("released", "async:{n}", "lock"): 1}



def test_events_are_fed_in_the_background_and_the_queue_is_bounded(redis_client, monkeypatch, caplog,
                                                                   fresh_failures):
    counting = Counting()
    events = MetricsEvents(counting, template="fed:{n}")
    with Lock(redis_client, "fed:1", timeout=5, events=events):
        pass
    deadline = time.monotonic() + 10
    while counting.counts["released", "fed:{n}", "lock"] != 1:  # the metrics' thread, within a second
        assert time.monotonic() < deadline, "the background thread never fed the recorder"
        time.sleep(0.05)
    monkeypatch.setattr(_recording, "QUEUED", 10)
    caplog.set_level(logging.ERROR, logger="django_redis_coord.metrics")
    with _recording._feeding:  # the thread is kept from feeding meanwhile
        for _ in range(25):
            events.contended(None, wait_time=0.0, pttl=None, limit=None)
    assert feed() == 10  # the rest was dropped, not kept to grow
    assert counting.counts["contended", "fed:{n}", "lock"] == 10
    assert len([r for r in caplog.records if "queue is full" in r.getMessage()]) == 1


def test_a_metrics_thread_that_cannot_start_fails_no_lock_and_starts_later(monkeypatch, redis_client):
    import threading

    from django_redis_coord import Lock, MetricsEvents
    from django_redis_coord.metrics import _background, _recording

    periodic = _background.Periodic(lambda: None, 60, "test-metrics-periodic")
    original = threading.Thread.start

    def refuse(thread):
        if thread.name in ("test-metrics-periodic", "django-redis-coord-metrics"):
            raise RuntimeError("can't start new thread")
        return original(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    monkeypatch.setattr(_recording, "_feeder", periodic)
    with pytest.raises(RuntimeError):
        periodic.ensure()
    lock = Lock(redis_client, "metrics:no-thread", timeout=5, events=MetricsEvents(template="t"))
    assert lock.acquire()  # the feeder cannot start: the lock does not care
    lock.release()
    monkeypatch.setattr(threading.Thread, "start", original)
    periodic.ensure()  # not left half-started: it starts now
    assert periodic._thread is not None and periodic._thread.is_alive()
    periodic.stop()
    assert _recording.feed() == 2  # the two events queued meanwhile, handed over (none left for other tests)


def test_gauges_are_read_in_a_child_forked_while_a_reading_held_their_lock(redis_client):
    import os
    import signal

    from django_redis_coord.metrics.gauges import HolderGauges

    gauges = HolderGauges(redis_client)
    gauges._lock.acquire()  # a reading under way in another thread at the instant of the fork
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            signal.alarm(10)  # a deadlocked read ends the child with SIGALRM
            os._exit(0 if gauges.read() is not None else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        gauges._lock.release()
    assert os.waitstatus_to_exitcode(status) == 0
