"""SingletonCommand: real ``manage.py`` processes run concurrently (tests/testapp's singleton_sleep)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_redis_coord.core.holders import lock_holder
from django_redis_coord.management.singleton import EX_TEMPFAIL

ROOT = Path(__file__).resolve().parents[2]


def start(redis_url: str, *args: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        DCOORD_TEST_REDIS_URL=redis_url,
    )
    return subprocess.Popen([sys.executable, "-m", "django", "singleton_sleep", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    """Until the run ends (the limit only guards against a hang): its status, stdout and stderr."""
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def wait_for(condition, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting")


def started(redis_client, name: str, count: int = 1) -> None:
    """Until ``count`` runs of the command have started (Django's start-up in a process of its own:
    no test here is about how long that takes, so the limit only guards against a hang)."""
    wait_for(lambda: redis_client.llen(f"started:{name}") >= count, timeout=120)


def test_a_second_run_exits_at_once_with_75_and_a_message(redis_client, redis_url):
    # The first run holds until the test lets it go, however slow the machine: its gate waits 600 s
    # and its hold lives 60 s, renewed every 20 s.
    first = start(redis_url, "--name", "a", "--for", "600", "--lock-timeout", "60")
    started(redis_client, "a")
    holder = lock_holder(redis_client, "sleep:a")
    assert holder is not None and holder.label == "manage.py singleton_sleep"  # what operators see
    code, out, err = finish(start(redis_url, "--name", "a"))
    assert code == EX_TEMPFAIL == 75
    assert "'sleep:a' is held by another run of singleton_sleep" in err and "after waiting" not in err
    assert out == ""
    # Refused at once, not after a wait for the first run: it exited while the first run was still
    # running and still held the lock (the same hold), and it did not wait at all (a run that waited
    # says for how long).  How long its start-up took is the machine's business.
    still = lock_holder(redis_client, "sleep:a")
    assert first.poll() is None and still is not None and still.fence == holder.fence
    assert redis_client.llen("started:a") == 1
    redis_client.rpush("gate:a", 1)
    code, out, _ = finish(first)
    assert code == 0 and "done a" in out
    assert not redis_client.exists("sleep:a")  # released when it ended


def test_other_options_other_key_both_run(redis_client, redis_url):
    first, second = start(redis_url, "--name", "b1"), start(redis_url, "--name", "b2")
    started(redis_client, "b1")
    started(redis_client, "b2")
    redis_client.rpush("gate:b1", 1)
    redis_client.rpush("gate:b2", 1)
    assert finish(first)[0] == 0 and finish(second)[0] == 0


def test_wait_runs_after_the_first_ends(redis_client, redis_url):
    first = start(redis_url, "--name", "c")
    started(redis_client, "c")
    second = start(redis_url, "--name", "c", "--wait", "20", "--for", "0.1")
    time.sleep(1.5)
    assert second.poll() is None and redis_client.llen("started:c") == 1  # waiting
    redis_client.rpush("gate:c", 1)
    assert finish(first)[0] == 0
    code, out, err = finish(second)
    assert code == 0 and "done c" in out, err
    assert redis_client.llen("started:c") == 2


def test_wait_that_runs_out_exits_75(redis_client, redis_url):
    first = start(redis_url, "--name", "d")
    started(redis_client, "d")
    began = time.monotonic()
    code, _, err = finish(start(redis_url, "--name", "d", "--wait", "1"))
    assert code == EX_TEMPFAIL and "after waiting 1 s" in err
    assert time.monotonic() - began >= 1
    redis_client.rpush("gate:d", 1)
    assert finish(first)[0] == 0


def test_the_hold_is_renewed_past_its_timeout(redis_client, redis_url):
    first = start(redis_url, "--name", "e")  # lock_timeout 1 s
    started(redis_client, "e")
    time.sleep(3)
    assert 0 < redis_client.pttl("sleep:e") <= 1000
    code, _, _ = finish(start(redis_url, "--name", "e"))
    assert code == EX_TEMPFAIL
    redis_client.rpush("gate:e", 1)
    assert finish(first)[0] == 0


@pytest.mark.parametrize("signum,expected", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, None)])
def test_sigterm_and_ctrl_c_release_at_once(redis_client, redis_url, signum, expected):
    name = f"f{signum}"
    first = start(redis_url, "--name", name)
    started(redis_client, name)
    first.send_signal(signum)
    code, _, _ = finish(first)
    assert code != 0 if expected is None else code == expected
    assert not redis_client.exists(f"sleep:{name}")  # released, not left to its TTL
    code, out, _ = finish(start(redis_url, "--name", name, "--for", "0.1"))
    assert code == 0 and f"done {name}" in out


def test_sigkill_frees_within_lock_timeout(redis_client, redis_url):
    first = start(redis_url, "--name", "g")
    started(redis_client, "g")
    first.kill()
    first.wait()
    # Nobody releases it: the key ends within the 1 s timeout the runner last set (or has already).
    pttl = redis_client.pttl("sleep:g")
    assert pttl == -2 or 0 < pttl <= 1000, pttl
    wait_for(lambda: not redis_client.exists("sleep:g"), timeout=5)


def test_call_command_and_bad_wait(redis_client):
    redis_client.rpush("gate:h", 1)
    out = io.StringIO()
    call_command("singleton_sleep", name="h", stdout=out)
    assert "done h" in out.getvalue()
    with pytest.raises(CommandError, match="must be 0 or more seconds"):
        call_command("singleton_sleep", "--name", "h", "--wait", "-1")
    from django_redis_coord import lock

    with lock("sleep:h", timeout=10):
        with pytest.raises(CommandError) as refused:
            call_command("singleton_sleep", name="h", stdout=io.StringIO())
    assert refused.value.returncode == EX_TEMPFAIL
