"""The example project as a user runs it: ``run_demo.py`` (what ``python3 dev.py demo`` starts).

One demo (embedded redis-server, migrations, runserver) is started for the module; the tests talk
to it over HTTP and through its ``manage.py``, like a person following the README.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from django_redis_coord.server import free_port

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "example_project"


class Demo:
    def __init__(self) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("DJANGO_SETTINGS_MODULE", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(DEMO / "run_demo.py"), "--port", str(self.port), "--workers", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env, start_new_session=True,
        )
        self.output: list[str] = []
        self.redis_url = ""
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(self.base + "/", timeout=2).read()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("the demo did not start:\n" + "".join(self.output))
                time.sleep(0.2)
        self.redis_url = next(re.search(r"redis://\S+/0", line).group(0) for line in self.output if "redis://" in line)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def get(self, path: str, opener=None) -> tuple[int, dict, str]:
        try:
            response = (opener or urllib.request.build_opener()).open(self.base + path, timeout=60)
            return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read().decode()

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(os.environ, DEMO_REDIS_URL=self.redis_url, DJANGO_SETTINGS_MODULE="demo_site.settings")
        return subprocess.run([sys.executable, "manage.py", *args], cwd=DEMO, env=env, capture_output=True,
                              text=True, timeout=timeout)

    def holders(self) -> list[dict]:
        """``manage.py locks list --json`` of the demo (a separate process: ~1 s)."""
        result = self.manage("locks", "list", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def live(self, name: str) -> list:
        """The holders of ``name`` (without the demo's prefix), read directly: fast enough to poll."""
        import redis

        from django_redis_coord.listing import HolderListing

        client = redis.Redis.from_url(self.redis_url)
        try:
            return [h for h in HolderListing(client, prefix="demo:").holders() if h.name == "demo:" + name]
        finally:
            client.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture(scope="module")
def demo():
    running = Demo()
    yield running
    running.stop()


def wait_for(predicate, timeout: float = 30.0):
    stop_at = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > stop_at:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)
    return value


def in_background(fn):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=fn()), daemon=True)
    thread.start()
    return thread, box


def test_landing_page_links_everything(demo):
    status, _, html = demo.get("/")
    assert status == 200
    for link in ("/report/daily/", "/export.csv", "/async/daily/", "/fencing/",
                 "/admin/django_redis_coord/holder/", "locks list --watch"):
        assert link in html


def test_locked_report_view_answers_409_while_building(demo):
    thread, first = in_background(lambda: demo.get("/report/busy/?seconds=8"))
    [held] = wait_for(lambda: demo.live("report:busy"))
    assert held.label == "build report"
    status, headers, _ = demo.get("/report/busy/?seconds=0")
    assert status == 409 and int(headers["Retry-After"]) >= 1
    thread.join(60)
    status, _, html = first["result"]
    assert status == 200 and "Written" in html
    assert f"fence <code>{held.fence}</code>" in html


def test_export_allows_two_at_a_time(demo):
    runs = [in_background(lambda: demo.get("/export.csv?seconds=8")) for _ in range(2)]
    permits = wait_for(lambda: len(held := demo.live("export")) == 2 and held)
    assert {(p.kind, p.used, p.limit, p.label) for p in permits} == {("sem", 2, 2, "csv export")}
    status, _, _ = demo.get("/export.csv?seconds=0")
    assert status == 409
    for thread, box in runs:
        thread.join(60)
        status, headers, body = box["result"]
        assert status == 200 and headers["Content-Type"] == "text/csv" and body.startswith("name,builds,fence")


def test_async_view(demo):
    status, _, body = demo.get("/async/one/?seconds=0")
    data = json.loads(body)
    assert status == 200 and data["lock"] == "demo:async:one" and data["fence"] > 0


def test_fenced_write_refuses_the_stale_holder(demo):
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    status, _, html = demo.get("/fencing/", opener)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    request = urllib.request.Request(
        demo.base + "/fencing/", data=urllib.parse.urlencode({"csrfmiddlewaretoken": token}).encode(),
        headers={"Referer": demo.base + "/fencing/"},
    )
    html = opener.open(request, timeout=60).read().decode()
    assert "B wrote the row: accepted" in html
    assert "before the pause: refused" in html and "The stale write was refused" in html


def test_contending_workers_show_up_in_locks_list_and_admin(demo):
    workers = subprocess.Popen(
        [sys.executable, "manage.py", "contend", "--workers", "2", "--seconds", "20", "--min-hold", "2",
         "--max-hold", "3"],
        cwd=DEMO, env=dict(os.environ, DEMO_REDIS_URL=demo.redis_url, DJANGO_SETTINGS_MODULE="demo_site.settings"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        busy = wait_for(lambda: [h for h in demo.holders() if (h["owner"]["label"] or "").startswith("worker")],
                        timeout=60)
        assert busy[0]["owner"]["pid"] != workers.pid  # held by a worker process, not the command itself
        # The admin page (admin / admin, as the README says) shows them too.
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        _, _, login = demo.get("/admin/login/", opener)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login).group(1)
        form = {"csrfmiddlewaretoken": token, "username": "admin", "password": "admin",
                "next": "/admin/django_redis_coord/holder/?refresh=0"}
        request = urllib.request.Request(demo.base + "/admin/login/?next=/admin/django_redis_coord/holder/",
                                         data=urllib.parse.urlencode(form).encode(),
                                         headers={"Referer": demo.base + "/admin/login/"})
        html = opener.open(request, timeout=60).read().decode()
        assert "Live holders" in html
        html = wait_for(lambda: (page := demo.get("/admin/django_redis_coord/holder/?refresh=0", opener)[2])
                        and "worker " in page and page, timeout=60)
        assert 'data-kind="lock"' in html or 'data-kind="sem"' in html
    finally:
        workers.send_signal(signal.SIGINT)
        out, err = workers.communicate(timeout=60)
    assert workers.returncode == 0, err
    assert "Workers stopped." in out and "Traceback" not in err
    wait_for(lambda: not [h for h in demo.holders() if (h["owner"]["label"] or "").startswith("worker")], timeout=30)


def test_demo_stops_cleanly_with_its_redis_server(demo):
    url = demo.redis_url
    assert demo.stop() == 0
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    import socket

    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
