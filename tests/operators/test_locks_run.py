"""``manage.py locks run NAME -- COMMAND ARGS``: real ``manage.py`` processes run a management
command (tests/testapp's ``gated``) under one lock, concurrently, and are killed."""

from __future__ import annotations

import io
import signal
import subprocess
import threading
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_redis_coord import lock
from django_redis_coord.core.holders import lock_holder
from django_redis_coord.core.keys import keys_for
from django_redis_coord.management.singleton import EX_TEMPFAIL
from tests.django.test_singleton_commands import wait_for
from tests.support.procs import manage_py


def start(redis_url: str, name: str, *command: str, options: tuple = ()) -> subprocess.Popen:
    """``manage.py locks run NAME [options] -- gated COMMAND...``"""
    return manage_py(redis_url, "locks", "run", name, *options, "--", "gated", *command)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def finish_watching_queue(redis_client, name: str, proc: subprocess.Popen) -> tuple[int, str, str, int]:
    """``finish(proc)``, and the most waiters seen meanwhile in the wait queue of lock ``name``
    (a run that waits for the lock is in it for as long as it waits)."""
    queue, most, done = keys_for(name.encode()).queue, [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            most[0] = max(most[0], redis_client.zcard(queue))
            done.wait(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        code, out, err = finish(proc)
    finally:
        done.set()
        watcher.join(10)
    return code, out, err, most[0]


def started(redis_client, name: str, count: int = 1) -> list[int]:
    wait_for(lambda: redis_client.llen(f"started:{name}") >= count)
    return [int(pid) for pid in redis_client.lrange(f"started:{name}", 0, -1)]


def test_a_second_run_exits_at_once_with_75_and_says_who_holds_it(redis_client, redis_url):
    first = start(redis_url, "nightly", "--name", "a")
    [pid] = started(redis_client, "a")
    holder = lock_holder(redis_client, "nightly")
    # What operators see: the command's label and role, held by the runner's process (the command runs in it).
    assert holder is not None and holder.pid == pid == first.pid
    assert holder.label == "manage.py gated" and holder.extra == {"role": "command", "command": "gated"}
    # "At once": the first holds until its gate opens, below; the second neither waits in the
    # lock's queue nor for the first's end, which it would wait for until then.
    code, out, err, queued = finish_watching_queue(redis_client, "nightly", start(redis_url, "nightly", "--name", "a"))
    assert code == EX_TEMPFAIL == 75
    assert f"'nightly' is held by another run of gated ({holder.host} pid {pid} MainThread)" in err, err
    assert "after waiting" not in err and queued == 0
    assert out == "" and "Traceback" not in err
    assert first.poll() is None and lock_holder(redis_client, "nightly").pid == pid
    assert redis_client.llen("started:a") == 1  # the refused run never started the command
    redis_client.rpush("gate:a", 1)
    code, out, err = finish(first)
    assert (code, out.strip()) == (0, "done a"), err
    assert not redis_client.exists("nightly")


def test_concurrent_runners_only_one_runs(redis_client, redis_url):
    runners = [start(redis_url, "once", "--name", "b", "--for", "3") for _ in range(4)]
    [pid] = started(redis_client, "b")
    codes = {}
    for proc in runners:
        if proc.pid != pid:
            codes[proc.pid] = finish(proc)[0]
    assert sorted(codes.values()) == [EX_TEMPFAIL] * 3
    redis_client.rpush("gate:b", 1)
    assert finish(next(proc for proc in runners if proc.pid == pid))[0] == 0
    assert redis_client.llen("started:b") == 1


def test_wait_runs_after_the_first_without_a_limit_or_gives_up_after_seconds(redis_client, redis_url):
    first = start(redis_url, "queue", "--name", "c")
    started(redis_client, "c")
    began = time.monotonic()
    code, _, err, queued = finish_watching_queue(redis_client, "queue",
                                                 start(redis_url, "queue", "--name", "c", options=("--wait", "1")))
    assert code == EX_TEMPFAIL and "after waiting 1 s" in err
    assert queued == 1  # it waited in the lock's queue (what a run without --wait never does)
    assert time.monotonic() - began >= 1
    patient = start(redis_url, "queue", "--name", "c", "--for", "0.1", options=("--wait",))  # no limit
    time.sleep(1.5)
    assert patient.poll() is None and redis_client.llen("started:c") == 1  # waiting in line
    redis_client.rpush("gate:c", 1)
    assert finish(first)[0] == 0
    code, out, err = finish(patient)
    assert code == 0 and "done c" in out, err
    assert redis_client.llen("started:c") == 2


@pytest.mark.parametrize(
    "then, status, expected_code, on_stderr",
    [
        ("exit", 3, 3, ""),
        ("command-error", 9, 9, "CommandError: d failed on purpose"),
        ("raise", 0, 1, "RuntimeError: d broke"),
        ("return", 0, 0, ""),
    ],
)
def test_the_command_exit_status_passes_through_and_the_lock_ends_with_it(
    redis_client, redis_url, then, status, expected_code, on_stderr
):
    redis_client.rpush("gate:d", 1)
    proc = start(redis_url, "status", "--name", "d", "--then", then, "--status", str(status),
                 options=("--timeout", "60"))
    code, _, err = finish(proc)
    assert code == expected_code, err
    assert on_stderr in err
    # Released when the command ended (not left to its 60 s TTL).
    assert not redis_client.exists("status")
    assert lock_holder(redis_client, "status") is None


def test_the_hold_is_renewed_while_the_command_runs(redis_client, redis_url):
    # Renewed every third of its 3 s timeout: still held past the timeout (a renewal a loaded machine
    # delays past 2 s loses the hold, as documented; a 1 s timeout left it 0.67 s and lost it once).
    first = start(redis_url, "long", "--name", "e", options=("--timeout", "3"))
    started(redis_client, "e")
    time.sleep(3.5)
    assert 0 < redis_client.pttl("long") <= 3000
    assert finish(start(redis_url, "long", "--name", "e"))[0] == EX_TEMPFAIL
    redis_client.rpush("gate:e", 1)
    assert finish(first)[0] == 0


def test_a_sigkilled_runner_frees_the_lock_within_its_timeout(redis_client, redis_url):
    first = start(redis_url, "killed", "--name", "f", options=("--timeout", "1"))
    started(redis_client, "f")
    first.kill()
    first.wait()
    # Nobody releases it: the key ends within the 1 s timeout the runner last set (or has already).
    pttl = redis_client.pttl("killed")
    assert pttl == -2 or 0 < pttl <= 1000, pttl
    wait_for(lambda: not redis_client.exists("killed"), timeout=5)
    redis_client.rpush("gate:f", 1)
    code, out, err = finish(start(redis_url, "killed", "--name", "f"))
    assert code == 0 and "done f" in out, err


def test_sigterm_ends_the_command_and_releases_at_once(redis_client, redis_url):
    first = start(redis_url, "stopped", "--name", "g", options=("--timeout", "60"))
    started(redis_client, "g")
    first.send_signal(signal.SIGTERM)
    assert finish(first)[0] == 128 + signal.SIGTERM
    assert not redis_client.exists("stopped")


def test_usage_errors_exit_1_without_taking_the_lock(redis_client, redis_url):
    for args in (["locks", "run", "x", "--", "no-such-command"], ["locks", "run", "x"],
                 ["locks", "run", "x", "--", "gated", "--bogus"], ["locks", "run", "x", "--", "gated"]):
        code, _, err = finish(manage_py(redis_url, *args))
        assert code == 1, (args, err)
        assert "Traceback" not in err
    code, _, err = finish(manage_py(redis_url, "locks", "run", "x", "--timeout", "0", "--", "check"))
    assert code == 2 and "more than 0 seconds" in err
    code, _, err = finish(manage_py(redis_url, "locks", "run", "x", "--wait", "-1", "--", "check"))
    assert code == 2 and "0 or more seconds" in err
    assert redis_client.dbsize() == 0  # nothing taken, nothing started


def test_call_command_in_process(redis_client):
    redis_client.rpush("gate:h", 1)
    out = io.StringIO()
    before = signal.getsignal(signal.SIGTERM)
    call_command("locks", "run", "inproc", "--", "gated", "--name", "h", stdout=out, stderr=io.StringIO())
    assert out.getvalue().strip() == "done h"
    assert not redis_client.exists("inproc")
    assert signal.getsignal(signal.SIGTERM) is before  # the run's SIGTERM handler is gone with it
    redis_client.rpush("gate:h", 1)
    with pytest.raises(CommandError) as failed:
        call_command("locks", "run", "inproc", "--", "gated", "--name", "h", "--then", "command-error",
                     "--status", "4", stdout=io.StringIO())
    assert failed.value.returncode == 4 and not redis_client.exists("inproc")
    with lock("inproc", timeout=10, label="someone else"):
        with pytest.raises(CommandError) as refused:
            call_command("locks", "run", "inproc", "--", "gated", "--name", "h", stdout=io.StringIO())
    assert refused.value.returncode == EX_TEMPFAIL and "(someone else)" in str(refused.value)
    assert redis_client.llen("started:h") == 2
