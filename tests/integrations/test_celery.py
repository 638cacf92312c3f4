"""Celery tasks under ``@locked`` and ``UniqueTask``, run by a real worker process.

The worker (``celery -A tests.celery_app worker``) is started by the fixtures below, with Redis as
its broker and result backend on a private redis-server; the locks live on the session's
redis-server, as everywhere in the suite.  Tasks record their runs in Redis (``runs:<name>``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

celery = pytest.importorskip("celery")

from django_redis_coord.decorator.contention import is_skipped  # noqa: E402
from django_redis_coord.testing.server import RedisServer  # noqa: E402
from tests.support import redis_session  # noqa: E402
from tests.support.expiry import sleep_out_ttl  # noqa: E402
from tests.support.procs import run_processes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0


class Worker:
    """A ``celery worker`` process of tests.celery_app (its own process group: killed whole)."""

    def __init__(self, broker_url: str, concurrency: int = 2, pool: str = "prefork", queue: str = "celery") -> None:
        self.name = f"w{uuid.uuid4().hex[:8]}@127.0.0.1"
        env = dict(os.environ, DCOORD_TEST_BROKER_URL=broker_url, DCOORD_TEST_REDIS_URL=redis_session.url(),
                   DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=str(ROOT))
        self.log = open(ROOT / ".venv" / f"celery-{self.name.split('@')[0]}.log", "w")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker", f"--pool={pool}",
             f"--concurrency={concurrency}", "--loglevel=INFO", "-n", self.name, "-Q", queue, "--without-gossip",
             "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def wait_ready(self, app) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the worker exited: see {self.log.name}"
            if app.control.ping(destination=[self.name], timeout=0.5):
                return
        raise AssertionError(f"the worker was not ready in {READY_TIMEOUT} s: see {self.log.name}")

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes (a machine or container dying)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def broker():
    server = RedisServer().start()
    os.environ["DCOORD_TEST_BROKER_URL"] = server.url
    yield server
    os.environ.pop("DCOORD_TEST_BROKER_URL", None)
    server.cleanup()


@pytest.fixture(scope="module")
def celery_app(broker):
    from tests import celery_app as module

    module.app.conf.broker_url = broker.url
    module.app.conf.result_backend = broker.url
    return module


@pytest.fixture(scope="module")
def worker(celery_app, broker):
    started = Worker(broker.url, concurrency=3)
    try:
        started.wait_ready(celery_app.app)
        yield started
    finally:
        started.stop()


def wait_for(predicate, timeout: float = 20.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"not true within {timeout} s: {predicate}")


def key_is_free(client, name: str) -> bool:
    from django_redis_coord.config.settings import coord_settings

    return client.get(coord_settings().prefixed(name)) is None


def fresh() -> int:
    return uuid.uuid4().int % 10**9


# -- UniqueTask: enqueue-time uniqueness ----------------------------------------------------------------
def test_second_enqueue_returns_the_pending_instance(worker, celery_app, redis_client):
    day = fresh()
    first = celery_app.build_report.delay(day, 1.0)
    second = celery_app.build_report.delay(day, 1.0)
    assert second.id == first.id
    assert first.get(timeout=20) == f"report {day}"
    assert celery_app.runs(f"build_report:{day}") and len(celery_app.runs(f"build_report:{day}")) == 1
    wait_for(lambda: key_is_free(redis_client, f"report:{day}"))
    third = celery_app.build_report.delay(day, 0.1)  # finished: a new instance is accepted
    assert third.id != first.id
    assert third.get(timeout=20) == f"report {day}"
    assert len(celery_app.runs(f"build_report:{day}")) == 2


def holder_of(client, name: str):
    from django_redis_coord.config.settings import coord_settings
    from django_redis_coord.core.listing import HolderListing

    found = HolderListing(client).holder(coord_settings().prefixed(name))
    return found[0] if found else None


def locks_list_json() -> dict:
    """``manage.py locks list --json`` by name."""
    import io
    import json

    from django.core.management import call_command

    out = io.StringIO()
    call_command("locks", "list", "--json", stdout=out)
    return {item["name"]: item for item in json.loads(out.getvalue())}


def _enqueue_spanned(day: int, count: int, seconds: float) -> list[str]:
    from tests import celery_app as module

    return [module.spanned_report.delay(day, seconds).id for _ in range(count)]


def assert_one_at_a_time(celery_app, day: int, bursts: list[list[str]]) -> None:
    """What the bursts of enqueues saw: each accepted instance ran once, never two at once, and an
    instance was accepted only once the one before it had ended (an enqueuing process never sees
    an instance again after a newer one)."""
    ids = {i for burst in bursts for i in burst}
    for result_id in ids:
        assert celery_app.app.AsyncResult(result_id).get(timeout=30) == f"report {day}"
    runs = celery_app.spans(f"spanned_report:{day}")
    accepted = [task_id for _, _, task_id in runs]  # in the order they ran
    assert ids <= set(accepted) and len(set(accepted)) == len(accepted), runs
    assert all(end <= start for (_, end, _), (start, _, _) in zip(runs, runs[1:])), runs
    for burst in bursts:
        seen = list(dict.fromkeys(burst))
        assert [i for i in accepted if i in seen] == seen and burst == sorted(burst, key=seen.index), burst


def test_800_identical_enqueues_from_8_processes_run_one_at_a_time(worker, celery_app, redis_client):
    day = fresh()
    # A run of 3 s: a burst that outlasts it (a loaded machine) may start a second instance, and
    # only after the first ended.
    bursts = run_processes(_enqueue_spanned, [(day, 100, 3.0)] * 8, timeout=120)
    assert sum(len(burst) for burst in bursts) == 800
    assert_one_at_a_time(celery_app, day, bursts)
    wait_for(lambda: key_is_free(redis_client, f"spanned:{day}"))
    before = len(celery_app.spans(f"spanned_report:{day}"))
    # Finished: the next burst makes at least one more, one at a time.
    again = run_processes(_enqueue_spanned, [(day, 100, 1.0)] * 8, timeout=120)
    assert not set(i for burst in again for i in burst) & set(i for burst in bursts for i in burst)
    assert_one_at_a_time(celery_app, day, bursts + again)
    assert len(celery_app.spans(f"spanned_report:{day}")) > before


def test_the_run_takes_the_reservation_over_with_a_fresh_fence_and_a_label(worker, celery_app, redis_client):
    n = fresh()
    result = celery_app.runs_until_revoked.apply_async((n,), countdown=1)  # runs until the test ends it
    pending = holder_of(redis_client, f"revoked:{n}")
    assert pending.label == f"celery tests.celery_app.runs_until_revoked[{result.id}] pending"
    # What operators see (manage.py locks, the admin page): the task, its key, its state.
    task = {"role": "task", "task": "tests.celery_app.runs_until_revoked", "task_id": result.id,
            "key": f"revoked:{n}"}
    assert pending.extra == {**task, "state": "pending"} and pending.role_summary == "task pending"
    assert pending.pid == os.getpid()  # the enqueuer reserved it
    wait_for(lambda: celery_app.runs(f"runs_until_revoked:{n}"))
    running = holder_of(redis_client, f"revoked:{n}")
    assert running.label == f"celery tests.celery_app.runs_until_revoked[{result.id}] running"
    assert running.extra == {**task, "state": "running"} and running.role == "task"
    assert running.fence > pending.fence
    worker_pid = int(celery_app.runs(f"runs_until_revoked:{n}")[0].split(":")[0])
    assert running.pid == worker_pid != os.getpid()  # the worker's pool process holds it now
    listed = locks_list_json()
    assert listed[f"revoked:{n}"]["extra"]["task_id"] == result.id
    assert listed[f"revoked:{n}"]["owner"]["pid"] == worker_pid and listed[f"revoked:{n}"]["role"] == "task"
    assert celery_app.runs_until_revoked.delay(n).id == result.id  # still refused while it runs
    result.revoke(terminate=True, signal="SIGTERM")
    wait_for(lambda: key_is_free(redis_client, f"revoked:{n}"))


def test_duplicate_can_raise(worker, celery_app, redis_client):
    from django_redis_coord.integrations.celery import DuplicateTask

    day = fresh()
    first = celery_app.build_report.delay(day, 1.0)
    strict = celery_app.build_report.s(day).set()  # the same task, asked to raise instead
    celery_app.build_report.unique_on_duplicate = "raise"
    try:
        with pytest.raises(DuplicateTask) as raised:
            strict.delay()
    finally:
        celery_app.build_report.unique_on_duplicate = "return"
    assert raised.value.task_id == first.id
    assert raised.value.lock_name == f"report:{day}"
    assert 1 <= raised.value.retry_after <= 3600
    first.get(timeout=20)


# -- the celery-singleton failure cases ------------------------------------------------------------------
def test_hard_time_limit_frees_the_key_at_once(worker, celery_app, redis_client):
    n = fresh()
    result = celery_app.hits_hard_limit.delay(n)
    wait_for(lambda: celery_app.runs(f"hits_hard_limit:{n}"))
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        result.get(timeout=20)
    assert type(raised.value).__name__ == "TimeLimitExceeded"
    wait_for(lambda: key_is_free(redis_client, f"slow:{n}"), timeout=10)
    # time_limit=2, unique_timeout=30: the worker's main process released it, not the TTL.
    assert time.monotonic() - started < 10
    assert celery_app.hits_hard_limit.delay(n).id != result.id


def test_revoke_terminate_frees_the_key_at_once(worker, celery_app, redis_client):
    n = fresh()
    result = celery_app.runs_until_revoked.delay(n)
    wait_for(lambda: celery_app.runs(f"runs_until_revoked:{n}"))
    assert not key_is_free(redis_client, f"revoked:{n}")
    started = time.monotonic()
    result.revoke(terminate=True, signal="SIGTERM")
    wait_for(lambda: key_is_free(redis_client, f"revoked:{n}"), timeout=10)
    assert time.monotonic() - started < 10  # unique_timeout=30: not the TTL
    wait_for(lambda: result.state == "REVOKED")
    again = celery_app.runs_until_revoked.delay(n)
    assert again.id != result.id
    wait_for(lambda: len(celery_app.runs(f"runs_until_revoked:{n}")) == 2)
    again.revoke(terminate=True, signal="SIGKILL")
    wait_for(lambda: key_is_free(redis_client, f"revoked:{n}"), timeout=10)


def test_a_retried_task_keeps_its_reservation(worker, celery_app, redis_client):
    n = fresh()
    result = celery_app.flaky.delay(n, 2)  # fails twice, each time retried 1 s later
    wait_for(lambda: celery_app.runs(f"flaky:{n}"))
    refused_in = set()
    while (state := result.state) not in ("SUCCESS", "FAILURE"):
        again = celery_app.flaky.delay(n, 0)
        if again.id != result.id:
            # Accepted only once the last attempt ended (its key goes as its state is being
            # stored): never during a retry's countdown.
            assert [run.split(":")[1] for run in celery_app.runs(f"flaky:{n}")][:3] == ["0", "1", "2"]
            assert again.get(timeout=20) == "done"
            break
        refused_in.add(state)  # pending (retrying) or running
        time.sleep(0.05)
    assert result.get(timeout=20) == "done"
    assert "RETRY" in refused_in  # refused during a retry's countdown
    retries = [int(run.split(":")[1]) for run in celery_app.runs(f"flaky:{n}")]
    assert retries[:3] == [0, 1, 2] and retries[3:] in ([], [0])  # [0]: the enqueue accepted at the end
    wait_for(lambda: key_is_free(redis_client, f"flaky:{n}"))


def test_a_killed_worker_frees_the_key_within_unique_timeout(celery_app, broker, redis_client, worker):
    from django_redis_coord.config.settings import coord_settings

    own = Worker(broker.url, concurrency=1, queue="doomed")
    try:
        own.wait_ready(celery_app.app)
        day = fresh()
        result = celery_app.build_report.apply_async((day, 30.0), queue="doomed")
        wait_for(lambda: celery_app.runs(f"build_report:{day}"))
        own.kill()
        # The documented bound, unique_timeout=3: the key ends at most 3 s after the last renewal,
        # so at most 3 s from now (Redis's clock), whatever the speed of this machine.
        assert not key_is_free(redis_client, f"report:{day}")  # still held, for at most 3 s
        sleep_out_ttl(redis_client, coord_settings().prefixed(f"report:{day}"), 3000)
        accepted = celery_app.build_report.delay(day, 0.1)
        assert accepted.id != result.id
        assert accepted.get(timeout=20) == f"report {day}"
        assert len(celery_app.runs(f"build_report:{day}")) == 2
    finally:
        own.stop()


# -- a retry sent by a run that goes on: one attempt at a time, no reservation left behind -----------
def refused_until(celery_app, name: str, n: int, result_id: str, attempts: int) -> tuple[int, object]:
    """Enqueue ``name(n)`` until ``attempts`` attempts of ``result_id`` have ended: each enqueue sent
    before then must be refused (the pending or running instance returned).  How many were, and the
    enqueue that was accepted once they had ended (or ``None``).

    Whether they had ended is read after each enqueue, not only before it: the last attempt may end
    between a read and the next enqueue (on a loaded machine it does).  An attempt writes its span
    before its release frees the key, so an accepted enqueue with fewer spans is a key freed early."""
    task, refused = getattr(celery_app, name), 0
    while True:
        ended_before = len(celery_app.spans(f"{name}:{n}")) >= attempts
        sent = task.delay(n, 0.0)
        if sent.id != result_id:
            assert len(celery_app.spans(f"{name}:{n}")) >= attempts, (
                f"a new instance was accepted before the attempts of {result_id} had ended")
            return refused, sent
        if ended_before:
            return refused, None
        refused += 1
        time.sleep(0.05)


@pytest.mark.parametrize("name", ["retries_at_once", "raises_its_retry_late"])
def test_a_retry_sent_while_the_run_goes_on_runs_after_it(worker, celery_app, redis_client, name):
    """``self.retry(countdown=0, throw=False)``, then 1 s of work: the retry's message is taken at
    once by another pool process; it runs once the first attempt ended (returned, or raised the
    ``Retry`` late), and the key is free once the retry ended: not an hour later."""
    from django_redis_coord.config.settings import coord_settings

    task = getattr(celery_app, name)
    n = fresh()
    key = {"retries_at_once": "retry-now", "raises_its_retry_late": "retry-late"}[name] + f":{n}"
    result = task.delay(n, 1.0)
    refused, accepted = refused_until(celery_app, name, n, result.id, attempts=2)
    assert refused > 0
    (_, first_end, _), (second_start, _, _) = celery_app.spans(f"{name}:{n}")[:2]
    assert first_end <= second_start, "the retry ran beside the attempt that sent it"
    assert [run.split(":")[1] for run in celery_app.runs(f"{name}:{n}")][:2] == ["0", "1"]
    if accepted is None:  # ended: released at once; whatever is left lives no longer than a run's hold
        assert redis_client.pttl(coord_settings().prefixed(key)) <= 3000
    else:  # the key is the accepted instance's (its reservation: pending), or free: never result's
        holder = redis_client.get(coord_settings().prefixed(key))
        assert holder is None or result.id.encode() not in holder, holder
    spans = 2
    if accepted is not None:  # accepted after the retry ended: it runs its two attempts too
        spans += 2
        wait_for(lambda: len(celery_app.spans(f"{name}:{n}")) == spans, timeout=30)
    wait_for(lambda: key_is_free(redis_client, key), timeout=10)
    again = task.delay(n, 0.0)
    assert again.id != result.id
    wait_for(lambda: len(celery_app.spans(f"{name}:{n}")) == spans + 2, timeout=30)
    wait_for(lambda: key_is_free(redis_client, key), timeout=10)


def test_a_run_whose_renewals_come_too_late_says_it_lost_the_key(worker, celery_app, redis_client):
    """A pool process paused past its hold's TTL (a loaded machine): the key is free again, and a
    second instance may start; the first one's process is told (lock_lost, an error logged)."""
    day = fresh()
    result = celery_app.spanned_report.delay(day, 2.0)
    wait_for(lambda: celery_app.runs(f"spanned_report:{day}"))
    pid = holder_of(redis_client, f"spanned:{day}").pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # unique_timeout=3: the key is free at most 3 s after the last renewal.
        second = wait_for(lambda: (r := celery_app.spanned_report.delay(day, 0.1)).id != result.id and r,
                          timeout=10)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert second.get(timeout=20) == f"report {day}"
    assert result.get(timeout=20) == f"report {day}"
    assert [int(entry.split(":")[0]) for entry in celery_app.runs(f"lost:spanned:{day}")] == [pid]


def test_a_run_whose_hold_ended_hands_nothing_to_its_retry(worker, celery_app, redis_client):
    """A run that sent a retry hands the key to the retry's reservation when it ends, but only
    while it still holds the key: paused past its hold's TTL, it no longer does, and its end must
    not take the key again (for its retry) behind the back of whoever may have taken it since."""
    n = fresh()
    key = f"retry-lost:{n}"
    result = celery_app.retries_then_works_on.delay(n, 1.0)
    wait_for(lambda: any(run.endswith(":retry sent") for run in celery_app.runs(f"retries_then_works_on:{n}")))
    pid = holder_of(redis_client, key).pid
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: key_is_free(redis_client, key), timeout=15)  # its TTL (3 s) ran out meanwhile
    finally:
        os.kill(pid, signal.SIGCONT)
    # The attempt ended (its release, in the task's call, ran before its result was stored).
    assert result.get(timeout=30) == "done"
    assert key_is_free(redis_client, key), f"the ended run reserved the key: {holder_of(redis_client, key)}"
    wait_for(lambda: celery_app.runs(f"lost:{key}"), timeout=10)  # and it was told of the loss


# -- @locked on tasks: run-time exclusion -------------------------------------------------------------------
def test_locked_under_app_task_skips_a_contended_run(worker, celery_app, redis_client):
    account = fresh()
    first = celery_app.sync_skip.delay(account, 2.0)
    wait_for(lambda: celery_app.runs(f"sync_skip:{account}"))
    second = celery_app.sync_skip.delay(account, 0.1)
    assert is_skipped(second.get(timeout=20))  # skipped: SUCCESS with the Skipped value, the body never ran
    assert second.state == "SUCCESS"
    assert first.get(timeout=20) == "synced"
    assert len(celery_app.runs(f"sync_skip:{account}")) == 1
    wait_for(lambda: key_is_free(redis_client, f"sync:{account}"))
    assert celery_app.sync_skip.delay(account, 0.1).get(timeout=20) == "synced"


def test_locked_over_a_task_object_raises_lock_contended(worker, celery_app, redis_client):
    from celery import Task

    assert isinstance(celery_app.sync_raise, Task)  # still the task: .delay, .name, ...
    account = fresh()
    first = celery_app.sync_raise.delay(account, 2.0)
    wait_for(lambda: celery_app.runs(f"sync_raise:{account}"))
    second = celery_app.sync_raise.delay(account, 0.1)
    with pytest.raises(Exception) as raised:
        second.get(timeout=20)
    assert type(raised.value).__name__ == "LockContended"
    assert second.state == "FAILURE"
    assert first.get(timeout=20) == "synced"
    assert len(celery_app.runs(f"sync_raise:{account}")) == 1


def test_locked_retry_waits_for_the_holder(worker, celery_app, redis_client):
    account = fresh()
    first = celery_app.sync_retry.delay(account, 2.0)
    wait_for(lambda: celery_app.runs(f"sync_retry:{account}"))
    second = celery_app.sync_retry.delay(account, 0.1)
    assert second.get(timeout=30) == "synced" and first.get(timeout=20) == "synced"
    runs = celery_app.runs(f"sync_retry:{account}")
    assert len(runs) == 2
    assert int(runs[1].split(":")[1]) >= 1  # the second ran after at least one retry
    assert second.date_done >= first.date_done  # it ran once the holder was done


def test_locked_task_killed_by_a_hard_time_limit_frees_the_key_within_its_timeout(worker, celery_app,
                                                                                   redis_client):
    from django_redis_coord.config.settings import coord_settings

    n = fresh()
    result = celery_app.locked_hits_hard_limit.delay(n)
    wait_for(lambda: celery_app.runs(f"locked_hits_hard_limit:{n}"))
    with pytest.raises(Exception) as raised:
        result.get(timeout=20)
    assert type(raised.value).__name__ == "TimeLimitExceeded"
    # timeout=3, renewed until the kill: the key ends at most 3 s after it (-2: ended already).
    sleep_out_ttl(redis_client, coord_settings().prefixed(f"locked-limit:{n}"), 3000)


# -- bad input ----------------------------------------------------------------------------------------------
def test_bad_options_get_typed_errors(celery_app):
    from django.core.exceptions import ImproperlyConfigured

    from django_redis_coord import locked
    from django_redis_coord.core.exceptions import InvalidLockArgument, InvalidLockArgumentType, KeyTemplateError
    from django_redis_coord.integrations.celery import UniqueTask

    app = celery_app.app
    with pytest.raises(InvalidLockArgument, match="on_contended"):
        locked("k", on_contended="later")
    with pytest.raises(InvalidLockArgumentType, match="on_contended"):
        locked("k", on_contended=True)
    with pytest.raises(ImproperlyConfigured, match="sync"):
        @locked("k", on_contended="retry")
        async def not_a_celery_task(): ...

    @locked("plain:{n}", on_contended="retry")
    def plain(n): return n

    with locked("plain:1"):
        with pytest.raises(InvalidLockArgument, match="outside one"):
            plain(1)

    @app.task(base=UniqueTask, unique_key="typo:{dya}", name="tests.bad_key")
    def bad_key(day): ...
    with pytest.raises(KeyTemplateError, match="dya"):
        bad_key.delay(1)

    @app.task(base=UniqueTask, unique_on_duplicate="ignore", name="tests.bad_outcome")
    def bad_outcome(): ...
    with pytest.raises(InvalidLockArgument, match="unique_on_duplicate"):
        bad_outcome.delay()

    @app.task(base=UniqueTask, unique_timeout=0, name="tests.bad_timeout")
    def bad_timeout(): ...
    with pytest.raises(InvalidLockArgument, match="unique_timeout"):
        bad_timeout.delay()


def test_revoking_a_pending_task_frees_the_key_by_its_planned_start(worker, celery_app, redis_client):
    day = fresh()
    result = celery_app.build_report.apply_async((day, 0.1), countdown=2)
    assert celery_app.build_report.delay(day).id == result.id
    result.revoke()
    # The worker drops it when it was due (in 2 s), and gives the key back then, not in an hour.
    wait_for(lambda: key_is_free(redis_client, f"report:{day}"), timeout=10)
    assert celery_app.runs(f"build_report:{day}") == []
    assert celery_app.build_report.delay(day, 0.1).get(timeout=20) == f"report {day}"


def test_a_killed_pool_process_frees_the_key_at_once(worker, celery_app, redis_client):
    n = fresh()
    result = celery_app.runs_until_revoked.delay(n)
    wait_for(lambda: celery_app.runs(f"runs_until_revoked:{n}"))
    child = holder_of(redis_client, f"revoked:{n}").pid
    os.kill(child, signal.SIGKILL)  # the OOM killer, say
    killed = time.monotonic()
    wait_for(lambda: key_is_free(redis_client, f"revoked:{n}"), timeout=10)
    assert time.monotonic() - killed < 10  # unique_timeout=30: the main process released it
    with pytest.raises(Exception) as raised:
        result.get(timeout=20)
    assert type(raised.value).__name__ == "WorkerLostError"


# -- @rate_limited on tasks: on_limited "skip", "raise" and "retry" (the retry's countdown is the
# refusal's retry_after, rounded up).  In this module: its worker and broker are the ones
# tests.celery_app (one app per process) was made with.
def test_a_limited_task_is_skipped(worker, celery_app, redis_client):
    account = fresh()
    assert celery_app.rate_skip.delay(account).get(timeout=20) == "sent"
    second = celery_app.rate_skip.delay(account)
    value = second.get(timeout=20)
    assert is_skipped(value) and second.state == "SUCCESS" and 1 <= value["retry_after"] <= 60
    assert len(celery_app.runs(f"rate_skip:{account}")) == 1


def test_a_limited_task_raises_rate_limit_exceeded(worker, celery_app, redis_client):
    account = fresh()
    assert celery_app.rate_raise.delay(account).get(timeout=20) == "sent"
    second = celery_app.rate_raise.delay(account)
    with pytest.raises(Exception) as raised:
        second.get(timeout=20)
    assert type(raised.value).__name__ == "RateLimitExceeded" and second.state == "FAILURE"
    assert len(celery_app.runs(f"rate_raise:{account}")) == 1


def test_a_limited_task_retries_when_its_slot_opens(worker, celery_app, redis_client):
    """Rate 1 per 2 s: the second task, sent at once, is refused (retry_after just under 2 s),
    retried with countdown 2, and then admitted: it runs once, on a later attempt."""
    account = fresh()
    first = celery_app.rate_retry.delay(account)
    assert first.get(timeout=20) == "sent"
    second = celery_app.rate_retry.delay(account)
    assert second.get(timeout=30) == "sent"
    runs = [run.split(":") for run in celery_app.runs(f"rate_retry:{account}")]
    assert len(runs) == 2
    (_pid, retries_first, _at_first), (_pid2, retries_second, _at_second) = runs
    assert retries_first == "0" and int(retries_second) >= 1


# -- a soft time limit inside an acquire ------------------------------------------------------------------
def test_a_soft_time_limit_while_waiting_for_a_lock_leaves_the_queue(worker, celery_app, redis_client):
    """The soft time limit lands while the task waits in line for a lock the test holds: the task
    fails, and the waiter it was is gone at once, so the test's release frees the lock."""
    from celery.exceptions import SoftTimeLimitExceeded

    from django_redis_coord import Lock

    name = f"soft-waiting:{fresh()}"
    holder = Lock(redis_client, name, timeout=30)
    assert holder.acquire(blocking=False)
    result = celery_app.soft_limit_while_waiting.delay(name)
    with pytest.raises(SoftTimeLimitExceeded):
        result.get(timeout=30)
    assert celery_app.runs(f"soft_limit_while_waiting:{name}") and \
        all(run.endswith("waiting") for run in celery_app.runs(f"soft_limit_while_waiting:{name}"))
    assert redis_client.zcard(holder.keys.queue) == 0, "the task's place in the queue was left behind"
    holder.release()
    assert redis_client.pttl(name) == -2  # not handed to the task that left
    assert Lock(redis_client, name, timeout=30).acquire(blocking=False)


def test_a_soft_time_limit_while_the_acquire_reply_is_in_flight_leaves_no_hold(worker, celery_app, redis_client):
    """The soft time limit lands after the acquire script granted the free lock and before its
    reply reached the task (a proxy holds it back): the task fails, and the grant is given back
    before it does, not left in Redis for the whole ``timeout`` (30 s) with nobody holding it."""
    from celery.exceptions import SoftTimeLimitExceeded

    from django_redis_coord import Lock
    from tests.safety.proxy import Proxy

    name = f"soft-in-flight:{fresh()}"
    with Proxy("127.0.0.1", redis_client.connection_pool.connection_kwargs["port"]) as proxy:
        result = celery_app.soft_limit_in_flight.delay(proxy.url, name)
        wait_for(lambda: redis_client.exists(f"ready:{name}"), timeout=30)
        proxy.hold_replies()
        closed = proxy.closed_by_clients
        redis_client.set(f"go:{name}", 1, ex=60)
        wait_for(lambda: redis_client.exists(name), timeout=30)  # granted: the reply is held back
        # The soft time limit stops the task in its read: redis-py closes that connection.
        wait_for(lambda: proxy.closed_by_clients > closed, timeout=30)
        proxy.release_replies()
        with pytest.raises(SoftTimeLimitExceeded):
            result.get(timeout=30)
    assert not celery_app.runs(f"soft_limit_in_flight:{name}")  # it never held the lock
    assert redis_client.pttl(name) == -2, "the grant was left in Redis, held by nobody"
    assert Lock(redis_client, name, timeout=30).acquire(blocking=False)
