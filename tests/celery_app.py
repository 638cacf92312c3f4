"""The Celery app of tests/integrations/test_celery.py: its worker runs as a separate process (``celery -A
tests.celery_app worker``) with Redis as its broker, on the redis-server of ``DCOORD_TEST_BROKER_URL``.

Each task records its runs in Redis (``runs:<name>``, a list that expires), so the test sees how
many times it ran, whatever process ran it.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402
from django.apps import apps  # noqa: E402

if not apps.ready:
    django.setup()

from celery import Celery  # noqa: E402
from django.dispatch import receiver  # noqa: E402

from django_redis_coord import locked  # noqa: E402
from django_redis_coord.config.connection import get_client  # noqa: E402  # noqa: E402
from django_redis_coord.integrations.celery import UniqueTask  # noqa: E402  # noqa: E402
from django_redis_coord.signals import lock_lost  # noqa: E402

BROKER = os.environ.get("DCOORD_TEST_BROKER_URL", "redis://127.0.0.1:1/0")

app = Celery("tests", broker=BROKER, backend=BROKER)
app.conf.update(
    broker_connection_retry_on_startup=True,
    task_acks_late=False,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=600,
)

RUNS_TTL = 600


def record(name: str, *values: object) -> None:
    """One run of ``name`` (with ``values``), seen by the test through Redis."""
    client = get_client()
    key = f"runs:{name}"
    client.rpush(key, ":".join(str(v) for v in (os.getpid(), *values)))
    client.expire(key, RUNS_TTL)


def runs(name: str) -> list[str]:
    return [v.decode() for v in get_client().lrange(f"runs:{name}", 0, -1)]


@receiver(lock_lost)
def record_loss(sender: object, name: str, **_: object) -> None:
    """The loss signal, as a worker process sends it: ``lost:<name>`` lists the pids that lost ``name``."""
    record(f"lost:{name}")


# -- unique tasks -------------------------------------------------------------------------------------
@app.task(base=UniqueTask, unique_key="report:{day}", unique_timeout=3)
def build_report(day: int, seconds: float = 0.5) -> str:
    record(f"build_report:{day}")
    time.sleep(seconds)
    return f"report {day}"


@app.task(base=UniqueTask, unique_key="slow:{n}", unique_timeout=3, time_limit=2, soft_time_limit=None)
def hits_hard_limit(n: int) -> None:
    record(f"hits_hard_limit:{n}")
    time.sleep(30)


@app.task(base=UniqueTask, unique_key="revoked:{n}", unique_timeout=30)
def runs_until_revoked(n: int) -> None:
    record(f"runs_until_revoked:{n}")
    time.sleep(60)


@app.task(bind=True, base=UniqueTask, unique_key="flaky:{n}", unique_timeout=5, max_retries=3)
def flaky(self, n: int, failures: int) -> str:
    record(f"flaky:{n}", self.request.retries)
    if self.request.retries < failures:
        raise self.retry(countdown=1)
    return "done"


def span(name: str, started_us: int, task_id: str) -> None:
    """One run of ``name`` by task ``task_id`` from ``started_us`` to now, on Redis's clock."""
    client = get_client()
    client.rpush(f"spans:{name}", f"{started_us} {now_us()} {task_id}")
    client.expire(f"spans:{name}", RUNS_TTL)


def spans(name: str) -> list[tuple[int, int, str]]:
    """The runs of ``name`` as (start, end, task id), microseconds of Redis's clock, by start."""
    found = [v.decode().split() for v in get_client().lrange(f"spans:{name}", 0, -1)]
    return sorted((int(start), int(end), task_id) for start, end, task_id in found)


def now_us() -> int:
    seconds, micros = get_client().time()
    return int(seconds) * 1_000_000 + int(micros)


@app.task(bind=True, base=UniqueTask, unique_key="retry-now:{n}", unique_timeout=3)
def retries_at_once(self, n: int, seconds: float) -> str:
    """Sends its retry at once and goes on working: the retry must wait for this run's end."""
    started = now_us()
    record(f"retries_at_once:{n}", self.request.retries)
    if self.request.retries == 0:
        self.retry(countdown=0, throw=False)
    time.sleep(seconds)
    span(f"retries_at_once:{n}", started, self.request.id)
    return "done"


@app.task(bind=True, base=UniqueTask, unique_key="retry-late:{n}", unique_timeout=3)
def raises_its_retry_late(self, n: int, seconds: float) -> str:
    """Sends its retry at once, works, then raises the ``Retry`` it got (a late ``raise``)."""
    started = now_us()
    record(f"raises_its_retry_late:{n}", self.request.retries)
    if self.request.retries == 0:
        retry = self.retry(countdown=0, throw=False)
        time.sleep(seconds)
        span(f"raises_its_retry_late:{n}", started, self.request.id)
        raise retry
    span(f"raises_its_retry_late:{n}", started, self.request.id)
    return "done"


@app.task(bind=True, base=UniqueTask, unique_key="retry-lost:{n}", unique_timeout=3)
def retries_then_works_on(self, n: int, seconds: float) -> str:
    """The first attempt sends its retry (due in ten minutes) and works on for ``seconds``: long
    enough for the test to pause it past its hold's TTL."""
    record(f"retries_then_works_on:{n}", self.request.retries)
    if self.request.retries == 0:
        self.retry(countdown=600, throw=False)
        record(f"retries_then_works_on:{n}", "retry sent")
        time.sleep(seconds)
    return "done"


@app.task(bind=True, base=UniqueTask, unique_key="spanned:{day}", unique_timeout=3)
def spanned_report(self, day: int, seconds: float) -> str:
    started = now_us()
    record(f"spanned_report:{day}")
    time.sleep(seconds)
    span(f"spanned_report:{day}", started, self.request.id)
    return f"report {day}"


# -- @locked on tasks ---------------------------------------------------------------------------------
@app.task(bind=True)
@locked("sync:{account}", timeout=5, auto_renew=True, on_contended="skip")
def sync_skip(self, account: int, seconds: float) -> str:
    record(f"sync_skip:{account}")
    time.sleep(seconds)
    return "synced"


@locked("sync-raise:{account}", timeout=5, on_contended="raise")
@app.task
def sync_raise(account: int, seconds: float) -> str:
    record(f"sync_raise:{account}")
    time.sleep(seconds)
    return "synced"


@app.task(bind=True, max_retries=5)
@locked("sync-retry:{account}", timeout=5, on_contended="retry")
def sync_retry(self, account: int, seconds: float) -> str:
    record(f"sync_retry:{account}", self.request.retries)
    time.sleep(seconds)
    return "synced"


@app.task(time_limit=2)
@locked("locked-limit:{n}", timeout=3, auto_renew=True)
def locked_hits_hard_limit(n: int) -> None:
    record(f"locked_hits_hard_limit:{n}")
    time.sleep(30)


# -- a soft time limit inside an acquire -------------------------------------------------------------
#: Long enough for the warm-up of :func:`soft_limit_in_flight` on a loaded machine.
IN_FLIGHT_SOFT_LIMIT = 3


@app.task(soft_time_limit=1)
def soft_limit_while_waiting(name: str) -> None:
    """Waits for ``name`` (held by the test) until its soft time limit stops it."""
    from django_redis_coord import Lock

    record(f"soft_limit_while_waiting:{name}", "waiting")
    with Lock(get_client(), name, timeout=30):
        record(f"soft_limit_while_waiting:{name}", "acquired")


@app.task(soft_time_limit=IN_FLIGHT_SOFT_LIMIT)
def soft_limit_in_flight(url: str, name: str) -> None:
    """Acquires the free ``name`` through ``url`` (the test's proxy, which holds the replies back
    once the test says "go"): the soft time limit lands while the acquire's reply is in flight."""
    import redis

    from django_redis_coord import Lock

    client = redis.Redis.from_url(url)
    warm = Lock(client, name + ":warm", timeout=30)
    warm.acquire()  # the connection is open and the scripts loaded: the acquire below is one call
    warm.release()
    direct = get_client()
    direct.set(f"ready:{name}", 1, ex=60)
    while not direct.exists(f"go:{name}"):
        time.sleep(0.005)
    with Lock(client, name, timeout=30):
        record(f"soft_limit_in_flight:{name}", "acquired")


# -- @rate_limited on tasks ---------------------------------------------------------------------------
from django_redis_coord import rate_limited  # noqa: E402


@app.task
@rate_limited("rl-skip:{account}", rate="1/m", on_limited="skip")
def rate_skip(account: int) -> str:
    record(f"rate_skip:{account}")
    return "sent"


@rate_limited("rl-raise:{account}", rate="1/m", on_limited="raise")
@app.task
def rate_raise(account: int) -> str:
    record(f"rate_raise:{account}")
    return "sent"


@app.task(bind=True, max_retries=5)
@rate_limited("rl-retry:{account}", rate="1/2s", on_limited="retry")
def rate_retry(self, account: int) -> str:
    record(f"rate_retry:{account}", self.request.retries, now_us())
    return "sent"
