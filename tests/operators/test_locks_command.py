"""``manage.py locks``: every subcommand through call_command and as a separate process."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_redis_coord import Lock, Semaphore
from django_redis_coord.management.commands import locks as command_module
from django_redis_coord.management.commands.locks import HOLDER_JSON_SCHEMA
from django_redis_coord.testing.server import free_port

ROOT = Path(__file__).resolve().parents[2]


# -- helpers -----------------------------------------------------------------------------------
def run(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def fails(*args: str) -> CommandError:
    with pytest.raises(CommandError) as info:
        run(*args)
    return info.value


#: The TTL of a hold that ``manage.py locks`` runs in other processes must find: longer than any
#: number of Django start-ups (a loaded machine took more than a minute for two of them).
OUTLIVES_THE_COMMANDS = 3600


def manage(redis_url: str, *args: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m django locks ARGS`` in a process of its own (``timeout`` only guards against a hang)."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        DCOORD_TEST_REDIS_URL=redis_url,
    )
    return subprocess.run(
        [sys.executable, "-m", "django", "locks", *args],
        input=stdin, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout,
    )


TYPES = {"string": str, "integer": int, "object": dict, "array": list, "null": type(None)}


def validate(value, schema, path="$"):
    """The subset of JSON Schema used by HOLDER_JSON_SCHEMA: type, enum, required, properties."""
    if "enum" in schema:
        assert value in schema["enum"], f"{path}: {value!r} not in {schema['enum']}"
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(isinstance(value, TYPES[k]) and not (k == "integer" and isinstance(value, bool)) for k in kinds)
        assert ok, f"{path}: {value!r} is not {kinds}"
    for key in schema.get("required", ()):
        assert key in value, f"{path}: missing {key!r}"
    for key, sub in schema.get("properties", {}).items():
        if isinstance(value, dict) and key in value:
            validate(value[key], sub, f"{path}.{key}")


def wait_for(predicate, timeout: float = 20.0):
    stop_at = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > stop_at:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
    return value


# -- list --------------------------------------------------------------------------------------
def test_list_table_shows_holders_of_other_processes(redis_client, spawn):
    holder = spawn("reports:nightly", timeout=60, label="nightly")
    pool = Semaphore(redis_client, "exports", limit=3, timeout=60)
    pool.acquire()
    out = run("list")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["NAME", "KIND", "FENCE", "TTL"]
    [row] = [line for line in lines if line.startswith("reports:nightly")]
    assert str(holder.fence) in row and f"pid {holder.pid}" in row and "nightly" in row
    [sem_row] = [line for line in lines if line.startswith("exports")]
    assert "1/3" in sem_row and str(pool.fence) in sem_row
    assert "2 holder(s): 1 lock(s), 1 semaphore permit(s)" in out
    token = redis_client.get("reports:nightly").decode()
    assert token not in out and token[:4] + "…" in row


def test_list_json_follows_the_schema(redis_client, spawn):
    holder = spawn("jobs:a", timeout=60, label="job a")
    Lock(redis_client, "jobs:b").acquire()
    Semaphore(redis_client, "jobs:pool", limit=2, timeout=60).acquire()
    data = json.loads(run("list", "--json"))
    assert isinstance(data, list) and len(data) == 3
    for item in data:
        validate(item, HOLDER_JSON_SCHEMA)
    by_name = {item["name"]: item for item in data}
    assert by_name["jobs:a"]["fence"] == holder.fence
    assert by_name["jobs:a"]["owner"]["pid"] == holder.pid
    assert by_name["jobs:a"]["owner"]["label"] == "job a"
    assert 0 < by_name["jobs:a"]["ttl_ms"] <= 60000
    assert by_name["jobs:b"]["ttl_ms"] is None
    pool = by_name["jobs:pool"]
    assert pool["kind"] == "sem" and (pool["used"], pool["limit"]) == (1, 2)


def test_list_empty(redis_client):
    assert run("list").strip() == "No live holders."
    assert json.loads(run("list", "--json")) == []


def test_list_filters(redis_client):
    for name in ("alpha*1", "alpha-2", "beta"):
        Lock(redis_client, name, timeout=60).acquire()
    Semaphore(redis_client, "alpha-pool", limit=2, timeout=60).acquire()
    names = lambda *args: [item["name"] for item in json.loads(run("list", "--json", *args))]  # noqa: E731
    assert names("--search", "ALPHA") == ["alpha*1", "alpha-2", "alpha-pool"]
    assert names("--search", "a*1") == ["alpha*1"]
    assert names("--kind", "sem") == ["alpha-pool"]
    assert names("--kind", "lock", "--search", "alpha") == ["alpha*1", "alpha-2"]
    assert names("--limit", "2") == ["alpha*1", "alpha-2"]


def test_list_bad_arguments(redis_client):
    assert fails("list", "--watch", "0").returncode == 1
    assert fails("list", "--limit", "0").returncode == 1
    with pytest.raises(CommandError):
        run("list", "--kind", "mutex")


def test_list_watch_refreshes_until_count(redis_client):
    lock = Lock(redis_client, "watched", timeout=60)
    lock.acquire()
    out = run("list", "--watch", "0.05", "--count", "3")
    assert out.count("Every 0.05s: live holders on") == 3
    assert out.count("watched") == 3


def sleep_of_this_thread(monkeypatch, fake) -> None:
    """``time.sleep`` is ``fake`` in this thread (where ``call_command`` runs the watch loop) and
    the real one in the others: a thread an earlier test left in this process (the waiting hub's
    idle closer) must neither be counted as a frame nor spin."""
    real, caller = time.sleep, threading.current_thread()
    monkeypatch.setattr(command_module.time, "sleep",
                        lambda seconds: fake(seconds) if threading.current_thread() is caller else real(seconds))


def test_list_watch_stops_cleanly_on_ctrl_c(redis_client, monkeypatch):
    Lock(redis_client, "watched", timeout=60).acquire()
    calls = []

    def interrupted(seconds):
        calls.append(seconds)
        if len(calls) == 2:
            raise KeyboardInterrupt

    sleep_of_this_thread(monkeypatch, interrupted)
    out = run("list", "--watch", "1")
    assert out.count("watched") == 2 and calls == [1.0, 1.0]


def test_list_watch_follows_changes(redis_client, monkeypatch):
    lock = Lock(redis_client, "comes-and-goes", timeout=60)
    lock.acquire()
    frames = []

    def between_frames(seconds):
        frames.append(seconds)
        lock.release()

    sleep_of_this_thread(monkeypatch, between_frames)
    out = run("list", "--watch", "2", "--count", "2")
    first, second = out.split("Every 2s:")[1:]
    assert "comes-and-goes" in first
    assert "comes-and-goes" not in second and "No live holders." in second


def test_a_leader_is_listed_and_shown_with_its_role_and_term(redis_client):
    from django_redis_coord import Leader

    leader = Leader(redis_client, "scheduler", 10, label="beat")
    assert leader.campaign(blocking_timeout=5)
    try:
        Lock(redis_client, "plain", timeout=60).acquire()
        lines = run("list").splitlines()
        assert lines[0].split()[:8] == ["NAME", "KIND", "FENCE", "TTL", "HELD", "FOR", "OWNER", "ROLE"]
        role_at = lines[0].index("ROLE")
        [row] = [line for line in lines if line.startswith("scheduler")]
        assert row[role_at:].split()[0] == "leader" and str(leader.term) in row and "leader: beat" in row
        [plain] = [line for line in lines if line.startswith("plain")]
        assert plain[role_at:].split()[0] == "-"
        shown = run("show", "scheduler")
        assert re.search(r"^  role +leader$", shown, re.M) and re.search(rf"^  term +{leader.term}$", shown, re.M)
        data = {item["name"]: item for item in json.loads(run("list", "--json"))}
        for item in data.values():
            validate(item, HOLDER_JSON_SCHEMA)
        assert (data["scheduler"]["role"], data["scheduler"]["term"]) == ("leader", leader.term)
        assert (data["plain"]["role"], data["plain"]["term"]) == (None, None)
    finally:
        leader.resign()


# -- show --------------------------------------------------------------------------------------
def test_show_a_lock(redis_client, spawn):
    holder = spawn("orders:sync", timeout=60, label="sync orders")
    out = run("show", "orders:sync")
    assert "Lock 'orders:sync'" in out
    assert str(holder.fence) in out and str(holder.pid) in out and "sync orders" in out
    assert "waiting: 0" in out
    token = redis_client.get("orders:sync").decode()
    assert token not in out


def test_show_json_with_waiters(redis_client, spawn):
    holder = spawn("orders:sync", timeout=60)
    waiter = spawn("orders:sync", timeout=60, wait=False)
    wait_for(lambda: json.loads(run("show", "orders:sync", "--json"))["waiters"])
    data = json.loads(run("show", "orders:sync", "--json"))
    assert data["kind"] == "lock" and data["name"] == "orders:sync"
    [only] = data["holders"]
    validate(only, HOLDER_JSON_SCHEMA)
    assert only["fence"] == holder.fence and only["waiters"] == 1
    [queued] = data["waiters"]
    assert queued["owner"]["pid"] == waiter.pid and queued["position"] == 0


def test_show_a_semaphore(redis_client):
    pool = Semaphore(redis_client, "thumbs", limit=4, timeout=60)
    pool.acquire()
    pool.acquire()
    out = run("show", "thumbs")
    assert "Semaphore 'thumbs'" in out and "permits in use: 2/4" in out
    assert out.count("fence ") == 2
    assert json.loads(run("show", "thumbs", "--kind", "sem", "--json"))["holders"][0]["used"] == 2


def test_show_nothing_held_exits_4(redis_client):
    error = fails("show", "nobody")
    assert error.returncode == 4 and "nobody" in str(error)
    assert fails("show", "nobody", "--kind", "sem").returncode == 4


def test_bad_name_exits_1(redis_client):
    assert fails("show", "a:dcoord:b").returncode == 1
    assert fails("release", "a:dcoord:b", "--yes").returncode == 1


# -- waiters -----------------------------------------------------------------------------------
def test_waiters_in_order(redis_client, spawn):
    spawn("queue:demo", timeout=60)
    first = spawn("queue:demo", timeout=60, wait=False)
    wait_for(lambda: "pid" in run("waiters", "queue:demo"))
    second = spawn("queue:demo", timeout=60, wait=False)
    data = wait_for(lambda: (d := json.loads(run("waiters", "queue:demo", "--json"))) and len(d) == 2 and d)
    assert [w["owner"]["pid"] for w in data] == [first.pid, second.pid]
    assert all(w["lease_ms"] > 0 and w["token"].endswith("…") for w in data)
    out = run("waiters", "queue:demo")
    assert out.index(f"pid {first.pid}") < out.index(f"pid {second.pid}")


def test_waiters_none(redis_client):
    assert "Nobody is waiting" in run("waiters", "idle")
    assert json.loads(run("waiters", "idle", "--kind", "sem", "--json")) == []


# -- release -----------------------------------------------------------------------------------
def test_release_with_yes_fences_out_and_hands_off(redis_client, spawn):
    old = spawn("orders:sync", timeout=60)
    heir = spawn("orders:sync", timeout=60, wait=False)
    wait_for(lambda: "pid" in run("waiters", "orders:sync"))
    out = run("release", "orders:sync", "--yes")
    assert "Released Lock 'orders:sync'" in out and str(old.fence) in out
    assert "handed to the next waiter" in out
    fence_after = int(out.split("Fence counter moved to ")[1].split(";")[0])
    assert fence_after > old.fence
    assert heir.wait_held() > fence_after
    assert old.finish() == "LOST"
    assert heir.finish() == "RELEASED"


def test_release_asks_for_confirmation(redis_client, monkeypatch):
    lock = Lock(redis_client, "careful", timeout=60)
    lock.acquire()
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "no")
    assert fails("release", "careful").returncode == 5
    assert asked and lock.owned()
    monkeypatch.setattr("builtins.input", lambda prompt: (_ for _ in ()).throw(EOFError))
    assert fails("release", "careful").returncode == 5
    assert lock.owned()
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")
    assert "Released" in run("release", "careful")
    assert not lock.owned()


@pytest.mark.parametrize("flag", ["--noinput", "--no-input", "--yes"])
def test_release_without_asking(redis_client, monkeypatch, flag):
    """Django's --noinput (dest "interactive"), its --no-input spelling and the old --yes."""
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("asked for confirmation"))
    lock = Lock(redis_client, "scripted", timeout=60)
    lock.acquire()
    assert "Released" in run("release", "scripted", flag)
    assert redis_client.exists("scripted") == 0


def test_release_through_call_command_with_interactive_false(redis_client):
    lock = Lock(redis_client, "scripted", timeout=60)
    lock.acquire()
    out = io.StringIO()
    call_command("locks", "release", "scripted", interactive=False, stdout=out, stderr=io.StringIO())
    assert "Released" in out.getvalue() and redis_client.exists("scripted") == 0


def test_release_with_a_stale_fence_exits_6(redis_client):
    lock = Lock(redis_client, "moved-on", timeout=60)
    lock.acquire()
    error = fails("release", "moved-on", "--fence", str(lock.fence - 1), "--yes")
    assert error.returncode == 6
    assert lock.owned()


def test_release_nothing_held_exits_4(redis_client):
    assert fails("release", "nobody", "--yes").returncode == 4


def test_release_a_semaphore_permit(redis_client):
    pool = Semaphore(redis_client, "uploads", limit=3, timeout=60)
    pool.acquire()
    first = pool.fence
    pool.acquire()
    second = pool.fence
    assert fails("release", "uploads", "--yes").returncode == 1  # which permit?
    out = run("release", "uploads", "--fence", str(first), "--yes")
    assert "Released Semaphore 'uploads'" in out
    data = json.loads(run("show", "uploads", "--json"))
    assert [h["fence"] for h in data["holders"]] == [second]
    assert data["holders"][0]["used"] == 1


# -- ping --------------------------------------------------------------------------------------
def test_ping(redis_client, redis_url):
    Lock(redis_client, "one", timeout=60).acquire()
    out = run("ping")
    assert out.startswith("PONG") and redis_url.rsplit("/", 1)[0] in out
    data = json.loads(run("ping", "--json"))
    assert data["mode"] == "standalone" and data["live_holds"] == 1
    assert data["redis_version"] and data["latency_ms"] >= 0


def test_unreachable_redis_exits_3(settings):
    settings.DJANGO_REDIS_COORD = {"URL": f"redis://127.0.0.1:{free_port()}/0",
                                   "CLIENT_OPTIONS": {"socket_connect_timeout": 1}}
    for args in (["ping"], ["list"], ["show", "x"], ["release", "x", "--yes"]):
        error = fails(*args)
        assert error.returncode == 3 and "unreachable" in str(error)


def test_refused_commands_and_unusable_settings_exit_with_their_own_status(redis_servers, settings):
    (server,) = redis_servers(1)
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "viewer", "on", ">pw", "~*", "+@all", "-eval", "-evalsha")
    settings.DJANGO_REDIS_COORD = {"URL": f"redis://viewer:pw@{server.host}:{server.port}/0"}
    error = fails("release", "x", "--yes")
    assert error.returncode == 7 and "refused" in str(error) and "pw@" not in str(error)
    settings.DJANGO_REDIS_COORD = {"URL": server.url, "TIMEOUT": 5}  # an unknown setting
    error = fails("list")
    assert error.returncode == 1 and "DJANGO_REDIS_COORD" in str(error)


# -- KEY_PREFIX --------------------------------------------------------------------------------
def test_names_are_shown_and_taken_without_the_key_prefix(redis_client, settings, redis_url):
    settings.DJANGO_REDIS_COORD = {"URL": redis_url, "KEY_PREFIX": "shop"}
    Lock(redis_client, "shop:orders", timeout=60).acquire()
    Lock(redis_client, "blog:orders", timeout=60).acquire()
    data = json.loads(run("list", "--json"))
    assert [(item["name"], item["key"]) for item in data] == [("orders", "shop:orders")]
    assert "Lock 'orders' (key 'shop:orders')" in run("show", "orders")
    everything = json.loads(run("list", "--json", "--all-prefixes"))
    assert [item["name"] for item in everything] == ["blog:orders", "shop:orders"]
    run("release", "orders", "--yes")
    assert redis_client.exists("shop:orders") == 0 and redis_client.exists("blog:orders") == 1


# -- as a separate process -------------------------------------------------------------------
def test_subprocess_list_and_json(redis_client, redis_url, spawn):
    holder = spawn("proc:held", timeout=OUTLIVES_THE_COMMANDS, label="from a process")
    result = manage(redis_url, "list")
    assert result.returncode == 0, result.stderr
    assert "proc:held" in result.stdout and str(holder.fence) in result.stdout
    result = manage(redis_url, "list", "--json", "--kind", "lock", "--search", "PROC")
    assert result.returncode == 0, result.stderr
    [item] = json.loads(result.stdout)
    validate(item, HOLDER_JSON_SCHEMA)
    assert item["owner"]["pid"] == holder.pid


def test_subprocess_show_waiters_ping(redis_client, redis_url, spawn):
    holder = spawn("proc:held", timeout=OUTLIVES_THE_COMMANDS)
    result = manage(redis_url, "show", "proc:held", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["holders"][0]["fence"] == holder.fence
    result = manage(redis_url, "waiters", "proc:held")
    assert result.returncode == 0 and "Nobody is waiting" in result.stdout
    result = manage(redis_url, "ping")
    assert result.returncode == 0 and result.stdout.startswith("PONG")
    result = manage(redis_url, "show", "proc:free")
    assert result.returncode == 4 and "proc:free" in result.stderr


def test_subprocess_release_confirmation(redis_client, redis_url, spawn):
    holder = spawn("proc:held", timeout=OUTLIVES_THE_COMMANDS)
    result = manage(redis_url, "release", "proc:held", stdin="no\n")
    assert result.returncode == 5, result.stderr
    assert "Force release Lock 'proc:held'" in result.stdout
    assert redis_client.exists("proc:held") == 1
    result = manage(redis_url, "release", "proc:held", stdin="yes\n")
    assert result.returncode == 0, result.stderr
    assert "Released" in result.stdout
    assert holder.finish() == "LOST"


def test_subprocess_release_no_input_and_exit_codes(redis_client, redis_url):
    lock = Lock(redis_client, "proc:scripted", timeout=OUTLIVES_THE_COMMANDS)
    lock.acquire()
    result = manage(redis_url, "release", "proc:scripted", "--fence", "1", "--no-input")
    assert result.returncode == 6
    result = manage(redis_url, "release", "proc:scripted", "--no-input")
    assert result.returncode == 0 and not lock.owned()
    result = manage(redis_url, "release", "proc:scripted", "--no-input")
    assert result.returncode == 4
    result = manage(redis_url, "frobnicate")
    assert result.returncode != 0 and "invalid choice" in result.stderr


def test_subprocess_watch_until_ctrl_c(redis_client, redis_url):
    Lock(redis_client, "proc:watched", timeout=OUTLIVES_THE_COMMANDS).acquire()
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=str(ROOT),
        DCOORD_TEST_REDIS_URL=redis_url,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", "locks", "list", "--watch", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        seen = 0
        while seen < 2:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            seen += line.startswith("Every 0.2s")
        proc.send_signal(signal.SIGINT)
        rest, errors = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, errors
    assert "Traceback" not in errors


def test_on_a_redis_cluster(settings):
    from tests.support.cluster import LocalCluster

    cluster = LocalCluster(primaries=3, replicas_per_primary=0).start()
    try:
        host, port = cluster.startup_nodes[0]
        settings.DJANGO_REDIS_COORD = {"URL": f"redis://{host}:{port}/0", "CLUSTER": True}
        client = cluster.client()
        locks = [Lock(client, f"cluster:{i}", timeout=60, label="on a cluster") for i in range(12)]
        for lock in locks:
            lock.acquire()
        data = json.loads(run("list", "--json"))
        assert [item["name"] for item in data] == sorted(f"cluster:{i}" for i in range(12))
        ping = json.loads(run("ping", "--json"))
        assert ping["mode"] == "cluster" and ping["live_holds"] == 12 and ping["redis_version"]
        assert "Released" in run("release", "cluster:3", "--yes")
        assert not locks[3].owned() and locks[4].owned()
        client.close()
    finally:
        cluster.stop()


# -- hostile names -------------------------------------------------------------------------------
EVIL_NAME = "evil\x1b[2J\x1b]0;owned\x07\r\nFAKE  lock  1\u202e"


def test_text_output_escapes_control_characters(redis_client):
    lock = Lock(redis_client, EVIL_NAME, timeout=60, label="job\x1b[31m\rred")
    lock.acquire()
    pool = Semaphore(redis_client, "pool\x1b[1m", limit=2, timeout=60)
    pool.acquire()
    listed = run("list")
    shown = run("show", EVIL_NAME)
    for output in (listed, shown):
        assert not any(char in output for char in "\x1b\x07\r\u202e"), output
        assert "evil\\x1b[2J\\x1b]0;owned\\x07\\r\\nFAKE  lock  1\\u202e" in output
    assert "job\\x1b[31m\\rred" in listed and "job\\x1b[31m\\rred" in shown
    assert "pool\\x1b[1m" in listed
    # One line per holder: a name cannot add a row.
    assert len(listed.splitlines()) == 1 + 2 + 1
    # JSON keeps the name exactly (escaped by json).
    assert {h["name"] for h in json.loads(run("list", "--json"))} == {EVIL_NAME, "pool\x1b[1m"}


def test_each_semaphore_permit_has_its_own_id(redis_client):
    from django_redis_coord.core.listing import parse_holder_id

    pool = Semaphore(redis_client, "ids:pool", limit=3, timeout=60)
    pool.acquire()
    pool.acquire()
    Lock(redis_client, "ids:lock", timeout=60).acquire()
    listed = json.loads(run("list", "--json"))
    ids = [h["id"] for h in listed]
    assert len(ids) == 3 and len(set(ids)) == 3
    # Every id still names its primitive (the admin page of the semaphore, the lock).
    assert sorted(parse_holder_id(i) for i in ids) == [("lock", b"ids:lock"), ("sem", b"ids:pool"),
                                                        ("sem", b"ids:pool")]
    shown = json.loads(run("show", "ids:pool", "--json"))
    assert sorted(h["id"] for h in shown["holders"]) == sorted(i for i in ids if parse_holder_id(i)[0] == "sem")
