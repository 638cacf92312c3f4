"""Django's tasks framework with a real worker: django-tasks-db's ``db_worker`` on SQLite, started
as a subprocess against the test session's redis-server; enqueues from processes of their own
(tests/testapp/task_client.py), tasks in tests/testapp/tasks.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.expiry import sleep_out_ttl

pytest.importorskip("django_tasks_db")

ROOT = Path(__file__).resolve().parents[2]


class TaskWorld:
    """A SQLite database with django-tasks-db's tables, its workers and enqueuing processes."""

    def __init__(self, redis_url: str, database: Path) -> None:
        self.env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="tests.testapp.task_settings",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            DCOORD_TEST_REDIS_URL=redis_url,
            DCOORD_TASKS_DB=str(database),
        )
        self.workers: list[subprocess.Popen] = []
        subprocess.run([sys.executable, "-m", "django", "migrate", "-v0"], env=self.env, cwd=ROOT, check=True,
                       timeout=120)

    def start_worker(self) -> subprocess.Popen:
        worker = subprocess.Popen(
            [sys.executable, "-m", "django", "db_worker", "--interval", "0.05", "--no-startup-delay", "--no-reload",
             "-v0"],
            env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self.workers.append(worker)
        return worker

    def enqueue(self, task: str, arg: str, *, count: int = 1, wait: bool = False,
                pair: bool = False) -> subprocess.Popen:
        args = [sys.executable, "-m", "tests.testapp.task_client", task, arg, "--count", str(count)]
        args += [*(["--wait"] if wait else []), *(["--pair"] if pair else [])]
        return subprocess.Popen(args, env=self.env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def report(self, proc: subprocess.Popen) -> dict:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        return json.loads(out)

    def stop(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


@pytest.fixture
def world(redis_url, tmp_path):
    tasks = TaskWorld(redis_url, tmp_path / "tasks.sqlite3")
    yield tasks
    tasks.stop()


#: How long a wait for a worker or an enqueuing process may take: each is a new Python process
#: (Django set-up, SQLite), slow on a loaded machine.  Liveness only: no promise is timed by it.
PROCESS_WAIT = 90.0


def wait_for(condition, timeout: float = PROCESS_WAIT, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("timed out waiting")


def runs(redis_client, name: str) -> int:
    return int(redis_client.get(f"runs:{name}") or 0)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("task,name", [("steady_report", "steady"), ("steady_areport", "asteady")])
def test_800_enqueues_from_8_processes_run_once_and_once_more_after(world, redis_client, task, name):
    day = f"2026-11-{task}"
    key = f"{name}:{day}"
    world.start_worker()
    world.start_worker()
    for round_number in (1, 2):
        reports = [world.report(p) for p in [world.enqueue(task, day, count=100) for _ in range(8)]]
        accepted = [i for report in reports for i in report["accepted"]]
        assert len(accepted) == 1, reports
        assert sum(report["refused"] for report in reports) == 799
        wait_for(lambda n=round_number: redis_client.llen(f"started:{key}") == n)
        # Running: still refused (as "running" now), and still no second run.
        late = world.report(world.enqueue(task, day, count=20))
        assert late["accepted"] == [] and late["refused"] == 20 and late["states"] == ["running"]
        redis_client.rpush(f"gate:{key}", 1)
        wait_for(lambda: redis_client.llen(f"gate:{key}") == 0)
        # The run's hold ends with the run: the next round's enqueue is accepted.
        wait_for(lambda: not redis_client.exists(f"{key}"))
        assert runs(redis_client, key) == round_number
    time.sleep(0.5)  # a stray second run would have started by now (workers poll every 50 ms)
    assert runs(redis_client, key) == 2


@pytest.mark.timeout(240)
def test_a_sigkilled_worker_frees_the_key_within_the_run_timeout(world, redis_client):
    key = "report:killed"
    worker = world.start_worker()
    first = world.report(world.enqueue("unique_report", "killed"))
    assert len(first["accepted"]) == 1
    wait_for(lambda: redis_client.llen(f"started:{key}") == 1)
    os.kill(worker.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    worker.wait()
    # The documented bound: the key ends at most the run's timeout (2 s here) after the last
    # renewal, so about 2 s after the kill (Redis's clock, whatever this machine's speed).
    assert redis_client.exists(key)
    sleep_out_ttl(redis_client, key, 2000)
    print(f"\nthe key ended {time.monotonic() - killed_at:.2f} s after SIGKILL (run timeout 2 s)")
    assert len(world.report(world.enqueue("unique_report", "killed"))["accepted"]) == 1
    # The new instance runs on a new worker.
    world.start_worker()
    wait_for(lambda: redis_client.llen(f"started:{key}") == 2)
    redis_client.rpush(f"gate:{key}", 1)


@pytest.mark.timeout(240)
def test_a_tuple_argument_names_one_key_from_the_enqueue_to_the_end_of_the_run(world, redis_client):
    """Enqueued with ``("t", 1)``, run with ``["t", 1]`` (JSON): the run ends the pending hold and
    its own, and the next enqueue is accepted."""
    world.start_worker()
    [first] = world.report(world.enqueue("unique_pair", "t", pair=True))["accepted"]
    wait_for(lambda: redis_client.llen("started:pair:t") == 1)
    assert world.report(world.enqueue("unique_pair", "t", pair=True))["states"] == ["running"]
    redis_client.rpush("gate:pair:t", 1)
    wait_for(lambda: not redis_client.exists("pair:('t', 1)"))
    assert not redis_client.exists("pair:('t', 1):pending")
    again = world.report(world.enqueue("unique_pair", "t", pair=True))
    assert len(again["accepted"]) == 1 and again["accepted"] != [first], again
    wait_for(lambda: redis_client.llen("started:pair:t") == 2)
    redis_client.rpush("gate:pair:t", 1)
    wait_for(lambda: not redis_client.exists("pair:('t', 1)"))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("task", ["nightly_under", "nightly_over"])
def test_a_contended_run_with_skip_is_successful_and_says_skipped(world, redis_client, task):
    from django_redis_coord import lock

    region = f"eu-{task}"
    world.start_worker()
    with lock(f"nightly:{region}", timeout=30, auto_renew=True):  # another run holds it, however long this takes
        report = world.report(world.enqueue(task, region, wait=True))
    assert report["status"] == "SUCCESSFUL", report
    assert report["return_value"]["skipped"] is True
    assert report["return_value"]["lock"] == f"nightly:{region}"
    assert runs(redis_client, f"nightly:{region}") == 0
    # Free: it runs.
    proc = world.enqueue(task, region, wait=True)
    wait_for(lambda: redis_client.llen(f"started:nightly:{region}") == 1)
    redis_client.rpush(f"gate:nightly:{region}", 1)
    report = world.report(proc)
    assert report["status"] == "SUCCESSFUL" and report["return_value"] == "done"


@pytest.mark.timeout(240)
def test_a_contended_run_with_raise_is_failed(world, redis_client):
    from django_redis_coord import lock

    world.start_worker()
    with lock("nightly:raise", timeout=30, auto_renew=True):
        report = world.report(world.enqueue("nightly_raise", "raise", wait=True))
    assert report["status"] == "FAILED"
    assert report["errors"] == ["django_redis_coord.exceptions.LockContended"]
    assert runs(redis_client, "nightly:raise") == 0


@pytest.mark.timeout(240)
def test_operators_see_the_task_its_key_and_the_worker(world, redis_client):
    """The pending hold (made by the enqueuing process) and the run's (the worker's), as
    ``manage.py locks list`` shows them."""
    import io

    from django.core.management import call_command

    def listed() -> dict:
        out = io.StringIO()
        call_command("locks", "list", "--json", stdout=out)
        return {item["name"]: item for item in json.loads(out.getvalue())}

    task = {"role": "task", "task": "tests.testapp.tasks.unique_report", "key": "report:seen"}
    [result_id] = world.report(world.enqueue("unique_report", "seen"))["accepted"]
    pending = listed()["report:seen:pending"]
    assert pending["extra"] == {**task, "state": "pending"} and pending["role"] == "task"
    assert pending["owner"]["label"] == "task tests.testapp.tasks.unique_report (pending)"
    worker = world.start_worker()
    wait_for(lambda: redis_client.llen("started:report:seen") == 1)
    running = wait_for(lambda: listed().get("report:seen"))
    assert running["extra"] == {**task, "state": "running", "result_id": result_id}
    assert running["owner"]["pid"] == worker.pid and running["owner"]["host"]
    table = io.StringIO()
    call_command("locks", "list", stdout=table)
    [row] = [line for line in table.getvalue().splitlines() if line.startswith("report:seen ")]
    assert "task running" in row and f"pid {worker.pid}" in row
    redis_client.rpush("gate:report:seen", 1)
    wait_for(lambda: not redis_client.exists("report:seen"))
