"""``manage.py locks release`` with filters (a bulk release): holders in other OS processes chosen
by host, pid, label and age, dry runs, and bad filters."""

from __future__ import annotations

import time

import pytest

from django_redis_coord import Lock, Semaphore
from tests.operators.test_locks_command import OUTLIVES_THE_COMMANDS, fails, manage, run, wait_for


def fence_counter(redis_client, name: str) -> int:
    return int(redis_client.hget(Lock(redis_client, name).keys.meta, "fence"))


def test_bulk_release_is_a_dry_run_without_yes_then_releases_only_the_matching_holds(redis_client, spawn):
    """Holders in other processes, chosen by host AND label prefix: the dry run lists and changes
    nothing; --yes releases exactly those, each fenced out (its loss signal fires), the others untouched."""
    chosen = [spawn(f"batch:{i}", timeout=3, label=f"nightly batch {i}", host="web-9", auto_renew=True)
              for i in range(2)]
    same_label_here = spawn("batch:here", timeout=3, label="nightly batch here", auto_renew=True)
    same_host_other_label = spawn("other:job", timeout=3, label="weekly", host="web-9", auto_renew=True)
    untouched = [same_label_here, same_host_other_label]
    before = {"batch:0": chosen[0].fence, "batch:1": chosen[1].fence}

    out = run("release", "--host", "web-9", "--label-prefix", "nightly")
    assert "2 hold(s) match host 'web-9' and label starting with 'nightly'" in out
    assert "batch:0" in out and "batch:1" in out and "batch:here" not in out and "other:job" not in out
    assert "Dry run: nothing was released" in out
    assert all(redis_client.exists(name) for name in ("batch:0", "batch:1", "batch:here", "other:job"))

    out = run("release", "--host", "web-9", "--label-prefix", "nightly", "--yes")
    assert out.count("Released Lock 'batch:") == 2 and "2 of 2 hold(s) released." in out
    for holder in chosen:
        holder.expect("LOSS-SIGNAL", timeout=5)  # the next renewal failed: the process knows
        assert holder.finish() == "LOST"
    for name, fence in before.items():
        assert not redis_client.exists(name) and fence_counter(redis_client, name) > fence
    for holder in untouched:
        assert holder.finish() == "RELEASED"


def test_bulk_release_by_pid_hands_off_to_the_waiter(redis_client, spawn):
    victim = spawn("jobs:a", timeout=60)
    heir = spawn("jobs:a", timeout=60, wait=False)
    bystander = spawn("jobs:b", timeout=60)
    wait_for(lambda: "pid" in run("waiters", "jobs:a"))
    out = run("release", "--pid", str(victim.pid), "--yes")
    assert "handed to the next waiter" in out and "1 of 1 hold(s) released." in out
    assert heir.wait_held() > victim.fence
    assert victim.finish() == "LOST" and heir.finish() == "RELEASED"
    assert bystander.finish() == "RELEASED"


def test_bulk_release_older_than(redis_client, spawn):
    old = spawn("age:old", timeout=60)
    time.sleep(1.2)
    young = spawn("age:young", timeout=60)
    data = run("release", "--older-than", "1s")
    assert "age:old" in data and "age:young" not in data
    run("release", "--older-than", "1s", "--kind", "lock", "--yes")
    assert old.finish() == "LOST" and young.finish() == "RELEASED"


def test_bulk_release_of_semaphore_permits(redis_client):
    pool = Semaphore(redis_client, "bulk:pool", limit=3, timeout=60, label="thumbs")
    pool.acquire()
    pool.acquire()
    Lock(redis_client, "bulk:lock", timeout=60, label="thumbs").acquire()
    out = run("release", "--label-prefix", "thumbs", "--kind", "sem", "--yes")
    assert "2 of 2 hold(s) released." in out
    assert pool.holders() == [] and redis_client.exists("bulk:lock")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--older-than=-5m"], "not a duration"),
        (["--older-than", "1e999"], "not a duration"),
        (["--older-than", "5 parsecs"], "not a duration"),
        (["--older-than", ""], "Name the hold"),
        (["--older-than", "99999999999d"], "longer than ten years"),
        (["--older-than", "9" * 5000], "longer than 1000 characters"),
        (["--older-than", "9" * 65], "not a duration"),
        (["--label-prefix", "", "--host", ""], "Name the hold"),
        (["--pid", "abc"], "pid must be a process id"),
        (["--pid", "0"], "pid must be a process id"),
        (["--pid", "99999999999999999999"], "pid must be a process id"),
        (["--host", "h" * 1001], "longer than 1000 characters"),
        (["--kind", "sem"], "Name the hold"),
        ([], "Name the hold"),
        (["some:name", "--host", "web-9"], "not both"),
        (["--host", "web-9", "--fence", "3"], "--fence names one hold"),
    ],
)
def test_bulk_release_refuses_bad_filters_with_status_1(redis_client, args, message):
    lock = Lock(redis_client, "bystander", timeout=60, label="anything")
    lock.acquire()
    error = fails("release", *args, "--yes")
    assert error.returncode == 1 and message in str(error), str(error)
    assert lock.owned()


def test_bulk_release_with_nothing_matching_exits_4(redis_client):
    Lock(redis_client, "kept", timeout=60, label="kept").acquire()
    error = fails("release", "--label-prefix", "gone", "--yes")
    assert error.returncode == 4 and "No live hold matches: label starting with 'gone'" in str(error)
    assert redis_client.exists("kept")


def test_subprocess_bulk_release(redis_client, redis_url, spawn):
    holder = spawn("proc:bulk", timeout=OUTLIVES_THE_COMMANDS, label="bulk job")
    result = manage(redis_url, "release", "--label-prefix", "bulk")
    assert result.returncode == 0 and "Dry run" in result.stdout, result.stderr
    assert redis_client.exists("proc:bulk")
    result = manage(redis_url, "release", "--label-prefix", "bulk", "--yes")
    assert result.returncode == 0 and "1 of 1 hold(s) released." in result.stdout, result.stderr
    assert holder.finish() == "LOST"
    result = manage(redis_url, "release", "--older-than", "soon")
    assert result.returncode == 1 and "not a duration: 'soon'" in result.stderr
