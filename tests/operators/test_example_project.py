"""The example project as a user runs it: ``run_demo.py`` (what ``python3 dev.py demo`` starts).

One demo (embedded redis-server, migrations, runserver) is started for the module; the tests talk
to it over HTTP and through its ``manage.py``, like a person following the README.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from html import unescape
from pathlib import Path

import pytest

from django_redis_coord.testing.server import free_port
from tests.operators.test_admin_browser import browser, browser_binaries, clipped, page_fits  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "example_project"


class Demo:
    def __init__(self, *options: str) -> None:
        """``run_demo.py --port <free port> *options`` (``python3 dev.py demo`` runs exactly that
        script, with .venv's Python)."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        # The demo's SQLite database goes to a temporary directory, never example_project/db.sqlite3.
        self.tmp = tempfile.mkdtemp(prefix="dcoord-demo-")
        self.db_path = os.path.join(self.tmp, "db.sqlite3")
        env = dict(os.environ, PYTHONUNBUFFERED="1", DEMO_DB_PATH=self.db_path)
        env.pop("DJANGO_SETTINGS_MODULE", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(DEMO / "run_demo.py"), "--port", str(self.port), *options],
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

    @property
    def env(self) -> dict:
        """What the demo's own processes get: its Redis, its settings, its database."""
        return dict(os.environ, DEMO_REDIS_URL=self.redis_url, DJANGO_SETTINGS_MODULE="demo_site.settings",
                    DEMO_DB_PATH=self.db_path)

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = self.env
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

        from django_redis_coord.core.listing import HolderListing

        client = redis.Redis.from_url(self.redis_url)
        try:
            return [h for h in HolderListing(client, prefix="demo:").holders() if h.name == "demo:" + name]
        finally:
            client.close()

    def worker_holds(self) -> list:
        """The holds of the ``contend`` workers (labels ``worker N...``), read directly: fast enough to poll."""
        import redis

        from django_redis_coord.core.listing import HolderListing

        client = redis.Redis.from_url(self.redis_url)
        try:
            return [h for h in HolderListing(client, prefix="demo:").holders() if (h.label or "").startswith("worker")]
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
        shutil.rmtree(self.tmp, ignore_errors=True)
        return self.proc.returncode


def project_database_state():
    """Whether example_project/db.sqlite3 exists, and its size and modification time."""
    path = DEMO / "db.sqlite3"
    return (path.stat().st_size, path.stat().st_mtime_ns) if path.exists() else None


@pytest.fixture(scope="module")
def demo():
    before = project_database_state()
    running = Demo("--workers", "0")
    yield running
    running.stop()
    # A developer's own demo database is left as it was (or not created at all).
    assert project_database_state() == before


def start_workers(demo, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "contend", *args], cwd=DEMO, env=demo.env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


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


def log_in(demo) -> urllib.request.OpenerDirector:
    """An opener with the session of the demo's superuser (admin / admin, as the README says)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    _, _, login = demo.get("/admin/login/", opener)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login).group(1)
    form = {"csrfmiddlewaretoken": token, "username": "admin", "password": "admin", "next": "/admin/"}
    request = urllib.request.Request(demo.base + "/admin/login/", data=urllib.parse.urlencode(form).encode(),
                                     headers={"Referer": demo.base + "/admin/login/"})
    assert "Site administration" in opener.open(request, timeout=60).read().decode()
    return opener


def links(html: str, under: str = "/") -> list[str]:
    """The targets of the page's ``<a href>`` under ``under``, in order, once each."""
    found = (unescape(href) for href in re.findall(r'<a\b[^>]*\bhref="([^"#]+)"', html))
    return list(dict.fromkeys(href for href in found if href.startswith(under)))


#: What example_project/README.md promises: every page linked from the landing page and from the
#: admin shows something within this many seconds of ``python3 dev.py demo`` (on an idle machine).
#: The test waits up to twice as long for a page before failing, and prints the time the walk took:
#: a time is a measurement, not a test bound (a loaded machine is slower, not wrong).
WALK_SECONDS = 30


def test_every_linked_page_shows_content():
    """The demo as ``python3 dev.py demo`` starts it (three contending workers), walked like a
    visitor: every link of the landing page, then every link of the admin's index and of the
    holders' pages with the demo's superuser; each page shows what it is about (a report built,
    the CSV, the holders, the contention history, the minute-long hold's page and its release
    confirmation); the time the walk took is printed.  Meanwhile the export lets two callers in
    and refuses the third, as the README says, although the workers run."""
    started = time.monotonic()
    demo = Demo()
    try:
        _, _, landing = demo.get("/")
        landing_links = links(landing)
        assert {"/report/monthly/?seconds=10", "/export.csv?seconds=10", "/async/daily/?seconds=10", "/fencing/",
                "/hold-a-minute/", "/admin/django_redis_coord/holder/",
                "/admin/django_redis_coord/contention/", "/limited/", "/api/quote/",
                "/admin/django_redis_coord/ratelimit/"} <= set(landing_links), landing_links
        with ThreadPoolExecutor(max_workers=len(landing_links) + 8) as pool:
            # A visitor opens the site's own links (the slow ones take 10 s) while the operator logs in.
            session = pool.submit(log_in, demo)
            opened = {path: pool.submit(demo.get, path) for path in landing_links
                      if not path.startswith(("/admin/", "/hold-a-minute/"))}
            # The workers never take an export permit: two visitors are let in, the third is refused.
            second = pool.submit(demo.get, "/export.csv?seconds=8")
            wait_for(lambda: len(demo.live("export")) == 2, timeout=2 * WALK_SECONDS)
            assert demo.get("/export.csv?seconds=0")[0] == 409
            opener = session.result()
            fetch = lambda path: demo.get(path, opener)  # noqa: E731
            opened.update({path: pool.submit(fetch, path) for path in landing_links if path not in opened})

            def shows(path: str, status: int, html: str, *texts: str) -> None:
                assert status == 200 and all(text in html for text in texts), (path, status, texts, html[-3000:])

            # The minute-long hold: its page in the admin (times in UTC, to the second), then its release page.
            status, _, held = opened["/hold-a-minute/"].result()
            shows("/hold-a-minute/", status, held, "maintenance:nightly-backup", "held for a minute", "Force release…")
            assert re.search(r'<span class="acquired-at">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</span>', held)
            [release] = [href for href in links(held, "/admin/") if "/release/" in href]
            shows(release, *fetch(release)[::2], "Yes, force release", "maintenance:nightly-backup")

            # The holders' page lists the workers; the contention page has their history (written
            # every few seconds by each process).
            holders = "/admin/django_redis_coord/holder/?refresh=0"
            listed = wait_for(lambda: (page := fetch(holders)) and "worker " in page[2] and page,
                              timeout=2 * WALK_SECONDS)
            shows(holders, *listed[::2], 'class="holder-row"', "maintenance:nightly-backup")
            contention = "/admin/django_redis_coord/contention/"
            charts = wait_for(lambda: (page := fetch(contention)) and 'data-template="report:{period}"' in page[2]
                              and page, timeout=2 * WALK_SECONDS)
            shows(contention, *charts[::2], "svg")
            assert 'id="history-off"' not in charts[2]

            # Every link of the admin's index and of the holders' page answers with a page; a worker's
            # hold may end meanwhile, so its own pages may say that nobody holds it any more.
            admin_links = links(fetch("/admin/")[2], "/admin/") + links(listed[2], "/admin/")
            for path, (status, _, html) in zip(admin_links, pool.map(fetch, admin_links)):
                assert status == 200 or (status == 404 and "Nobody holds this" in html), (path, status)
                assert 'id="content"' in html, path

            pages = {path: page.result() for path, page in opened.items()}
            assert second.result()[0] == 200
        shows("/report/monthly/", *pages["/report/monthly/?seconds=10"][::2], "Written")
        status, headers, body = pages["/export.csv?seconds=10"]
        assert status == 200 and headers["Content-Type"] == "text/csv" and body.startswith("name,builds,fence")
        assert json.loads(pages["/async/daily/?seconds=10"][2])["lock"] == "demo:async:daily"
        shows("/fencing/", *pages["/fencing/"][::2], "csrfmiddlewaretoken")
        shows("/limited/", *pages["/limited/"][::2], 'id="decision"', 'class="remaining"')
        assert json.loads(pages["/api/quote/"][2])["rate_limit"]["limit"] == 3
        elapsed = time.monotonic() - started
        print(f"demo walk: every linked page showed its content {elapsed:.1f} s after the start "
              f"(promised on an idle machine: {WALK_SECONDS} s)")
    finally:
        demo.stop()


def test_landing_page_links_everything(demo):
    status, _, html = demo.get("/")
    assert status == 200
    for link in ("/report/monthly/", "/export.csv", "/async/daily/", "/fencing/", "/hold-a-minute/",
                 "/admin/django_redis_coord/holder/", "/admin/django_redis_coord/contention/",
                 "locks list --watch", "/limited/", "/api/quote/", "/admin/django_redis_coord/ratelimit/",
                 "ratelimits list", 'id="call-api"'):
        assert link in html


def test_the_landing_pages_command_box_wraps(demo, browser):  # noqa: F811 (browser is a fixture)
    """The terminal command (a long line: the Redis URL, the full paths) is shown whole in a
    narrow window too, wrapped, never cut or scrolled sideways."""
    from selenium.webdriver.common.by import By

    for width in (1280, 800):
        browser.set_window_size(width, 900)
        browser.get(demo.base + "/")
        assert not clipped(browser, "#terminal-command, code") and page_fits(browser), width
        assert "locks list --watch 1" in browser.find_element(By.ID, "terminal-command").text


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
    # The workers run until the SIGINT at the end (--seconds only caps an orphan's life): a loaded
    # machine may take longer to start them and log in than any fixed run would last.
    workers = start_workers(demo, "--workers", "2", "--seconds", "600", "--min-hold", "2", "--max-hold", "3")
    try:
        busy = wait_for(lambda: [h for h in demo.holders() if (h["owner"]["label"] or "").startswith("worker")],
                        timeout=60)
        assert busy[0]["owner"]["pid"] != workers.pid  # held by a worker process, not the command itself
        # The admin page (admin / admin, as the README says) shows them too.
        opener = log_in(demo)
        html = wait_for(lambda: (page := demo.get("/admin/django_redis_coord/holder/?refresh=0", opener)[2])
                        and "worker " in page and page, timeout=60)
        assert 'data-kind="lock"' in html or 'data-kind="sem"' in html
    finally:
        workers.send_signal(signal.SIGINT)
        out, err = workers.communicate(timeout=60)
    assert workers.returncode == 0, err
    assert "Workers stopped." in out and "Traceback" not in err
    wait_for(lambda: not [h for h in demo.holders() if (h["owner"]["label"] or "").startswith("worker")], timeout=30)


def test_the_database_is_the_temporary_one(demo):
    assert os.path.getsize(demo.db_path) > 0  # migrated there by run_demo.py


def test_the_printed_terminal_command_works_from_anywhere(demo):
    """The "Terminal:" line the demo prints runs as printed, from another directory, in a shell
    without .venv on PATH (``--count 1`` so it draws one frame)."""
    [line] = [line for line in demo.output if line.startswith("Terminal: ")]
    command = line.removeprefix("Terminal: ").strip()
    assert command.endswith("locks list --watch 1")
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "DEMO_DB_PATH": demo.db_path}
    result = subprocess.run(["/bin/sh", "-c", command + " --count 1"], cwd="/", env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"live holders on {demo.redis_url}" in result.stdout
    _, _, html = demo.get("/")
    assert "locks list --watch 1" in html and sys.executable in html  # the landing page shows the same


def test_the_two_tabs_report_is_free_while_the_workers_run(demo):
    """The landing page's "open it in two tabs" report: the first tab builds, the second gets 409,
    although the contending workers run (they never take that report)."""
    sys.path.insert(0, str(DEMO))
    try:
        from demo.management.commands.contend import JOBS
    finally:
        sys.path.remove(str(DEMO))
    _, _, html = demo.get("/")
    name = re.search(r'href="/report/([\w-]+)/\?seconds=10" id="two-tabs"', html).group(1)
    assert f"report:{name}" not in JOBS
    # The workers run until the SIGINT at the end (--seconds only caps an orphan's life): a loaded
    # machine may take longer to start them than any fixed run would last.  Their holds (0.5-1 s
    # each) are polled directly, not by a `locks list` process that takes seconds to start.
    workers = start_workers(demo, "--workers", "3", "--seconds", "600", "--min-hold", "0.5", "--max-hold", "1")
    try:
        wait_for(demo.worker_holds, timeout=60)
        # The first tab holds the report as long as the landing page's link asks (10 s): time for
        # the second tab's request, however busy the machine.
        thread, first = in_background(lambda: demo.get(f"/report/{name}/?seconds=10"))
        wait_for(lambda: demo.live(f"report:{name}"))
        status, headers, _ = demo.get(f"/report/{name}/?seconds=0")
        assert status == 409 and int(headers["Retry-After"]) >= 1
        assert workers.poll() is None  # refused while the workers ran (only the first tab holds it)
        thread.join(60)
        assert first["result"][0] == 200
    finally:
        workers.send_signal(signal.SIGINT)
        workers.communicate(timeout=60)


def forget_rate_limits(demo) -> None:
    """The demo's limits of this machine's address start idle (earlier tests of the module used them)."""
    import redis

    from django_redis_coord import RateLimit

    client = redis.Redis.from_url(demo.redis_url)
    try:
        for name in ("demo:demo.views.limited:127.0.0.1", "demo:api:127.0.0.1"):
            RateLimit(client, name, "1/s").reset()
    finally:
        client.close()


def fields(headers: dict) -> tuple[int, int, int]:
    """(q, r, t) of a response's ``RateLimit-Policy`` and ``RateLimit`` fields."""
    q = int(re.search(r";q=(\d+)", headers["RateLimit-Policy"]).group(1))
    r, t = (int(value) for value in re.search(r";r=(\d+);t=(\d+)", headers["RateLimit"]).groups())
    return q, r, t


def until_refused(demo, path: str, tries: int = 100) -> list[tuple[int, dict, str]]:
    """GETs of ``path``, one after the other, up to the first refusal (each admitted one uses the
    burst faster than the rate refills it, however slow the machine: one more try each time)."""
    answers = []
    for _ in range(tries):
        answers.append(demo.get(path))
        if answers[-1][0] != 200:
            return answers
    raise AssertionError(f"{path} admitted {tries} calls in a row")


def test_the_rate_limited_page_and_api_answer_429_and_show_up_in_the_admin(demo):
    """What the landing page promises: the rate-limited page shows the decision that let it in, the
    same numbers as its fields; the JSON endpoint gives them in its body and fields; a refusal is a
    429 with Retry-After; then the admin's Rate limits page and ``manage.py ratelimits list`` list
    the live limit."""
    forget_rate_limits(demo)
    opener = log_in(demo)
    pages = until_refused(demo, "/limited/")
    status, headers, html = pages[0]
    assert fields(headers)[:2] == (5, 4)  # an idle limit: the burst of 5, one used
    assert '<td class="limit">5</td>' in html and '<td class="remaining">4</td>' in html
    for status, headers, html in pages[:-1]:
        assert status == 200 and f'<td class="remaining">{fields(headers)[1]}</td>' in html
    status, headers, body = pages[-1]
    assert status == 429 and int(headers["Retry-After"]) >= 1 and "too many requests" in body
    assert fields(headers)[1:] == (0, int(headers["Retry-After"]))
    # The limit is live (its backlog lasts ~30 s): listed by the admin's page and by the command.
    _, _, listing = demo.get("/admin/django_redis_coord/ratelimit/", opener)
    assert "demo.views.limited:127.0.0.1" in listing, listing[-3000:]
    result = demo.manage("ratelimits", "list")
    assert result.returncode == 0 and "demo.views.limited:127.0.0.1" in result.stdout, result.stdout + result.stderr

    calls = until_refused(demo, "/api/quote/")
    status, headers, body = calls[0]
    assert json.loads(body)["rate_limit"]["remaining"] == 2 and fields(headers)[:2] == (3, 2)
    for status, headers, body in calls[:-1]:
        assert status == 200 and headers["Content-Type"] == "application/json"
        data = json.loads(body)["rate_limit"]
        assert (data["limit"], data["remaining"]) == fields(headers)[:2]
    status, headers, body = calls[-1]
    assert status == 429 and int(headers["Retry-After"]) >= 1 and fields(headers)[1] == 0


def test_the_api_widget_shows_each_answers_fields_in_chromium(demo, browser):  # noqa: F811 (a fixture)
    """The rate-limited page in a browser: "Call the API" adds a row per answer with its status,
    limit, remaining, reset and Retry-After read from the response's fields, up to a 429.  Its
    screenshot is docs/img/demo-ratelimited.png (written when missing or asked for, as the admin's)."""
    from selenium.webdriver.common.by import By

    from tests.operators.test_admin_browser import screenshot, wait_until

    forget_rate_limits(demo)
    browser.set_window_size(1100, 1000)
    browser.get(demo.base + "/limited/")
    assert browser.find_element(By.CSS_SELECTOR, "#decision .limit").text == "5"
    for count in range(1, 101):
        browser.find_element(By.ID, "call-api").click()
        wait_until(browser, lambda d, count=count: len(d.find_elements(By.CSS_SELECTOR, "tr.api-call")) == count,
                   what=f"row {count} of the API calls")
        if browser.find_elements(By.CSS_SELECTOR, "tr.api-call.refused"):
            break
    rows = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, "tr.api-call")]
    assert rows[0][1:4] == ["200 OK", "3", "2"], rows
    assert rows[-1][1] == "429 Too Many Requests" and rows[-1][3] == "0" and int(rows[-1][5]) >= 1, rows
    assert all(row[1] == "200 OK" for row in rows[:-1]), rows
    assert not clipped(browser, "#api-calls td, code") and page_fits(browser)
    screenshot(browser, "demo-ratelimited.png", ROOT / "docs" / "img" / "demo-ratelimited.png")


def test_demo_stops_cleanly_with_its_redis_server(demo):
    url = demo.redis_url
    assert demo.stop() == 0
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    import socket

    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
