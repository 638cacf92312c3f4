"""The admin page of live holders in a real headless Chromium, driven with Selenium.

The browser (Debian's ``chromium`` and ``chromium-driver``) is looked for at the usual paths; when
it is missing and the suite runs as root on a machine with ``apt-get``, it is installed (bounded
in time).  Only when no browser can be found or installed is the test skipped, with the reason
spelled out in the summary.  Screenshots go to ``test-artifacts/`` (not versioned); with
``DCOORD_UPDATE_DOCS_SCREENSHOT=1`` those of the full list and of a holder's page, at 1,280 px
with the sidebar open, also replace the committed ``docs/img/admin-holders.png`` and
``docs/img/admin-holder-detail.png``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Optional
from urllib.parse import quote

import django
import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from django_redis_coord import Leader, Lock, Semaphore
from django_redis_coord.core.listing import HolderListing, holder_id

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_SCREENSHOT = ROOT / "docs" / "img" / "admin-holders.png"
DOCS_DETAIL_SCREENSHOT = ROOT / "docs" / "img" / "admin-holder-detail.png"
#: Set to refresh the committed screenshot of the docs (otherwise only test-artifacts/ is written).
DOCS_SCREENSHOT_ENV = "DCOORD_UPDATE_DOCS_SCREENSHOT"
ADMIN_STATIC = Path(django.__file__).parent / "contrib" / "admin" / "static"
INSTALL_TIMEOUT = 900
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1500,1000",
]
PASSWORD = "operator-pass-1234"
#: The widths every page must be readable at with the admin's sidebar open: a common laptop, a desktop.
WIDTHS = (1280, 1920)


def find_browser() -> Optional[tuple[str, str]]:
    """(chromium, chromedriver) paths, or None."""
    browsers = ["/usr/bin/chromium", "/usr/bin/chromium-browser", shutil.which("chromium"),
                shutil.which("chromium-browser")]
    drivers = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver", shutil.which("chromedriver")]
    browser = next((b for b in browsers if b and os.access(b, os.X_OK)), None)
    driver = next((d for d in drivers if d and os.access(d, os.X_OK)), None)
    return (browser, driver) if browser and driver else None


def install_browser() -> str:
    """Install Debian's chromium and chromium-driver when possible; returns what happened."""
    apt = shutil.which("apt-get")
    if apt is None:
        return "apt-get is not available"
    if os.geteuid() != 0:
        return "not running as root, cannot apt-get install chromium chromium-driver"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    deadline = time.monotonic() + INSTALL_TIMEOUT
    for args in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "chromium", "chromium-driver"]):
        remaining = deadline - time.monotonic()
        try:
            result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=max(remaining, 1))
        except subprocess.TimeoutExpired:
            return f"{' '.join(args[:2])} did not finish within {INSTALL_TIMEOUT} s"
        if result.returncode != 0:
            return f"{' '.join(args[:2])} failed: {(result.stderr or result.stdout).strip()[-500:]}"
    return "installed chromium and chromium-driver with apt-get"


def skip_loudly(message: str) -> None:
    message = "BROWSER TEST NOT RUN: " + message
    warnings.warn(message, stacklevel=2)
    pytest.skip(message)


@pytest.fixture(scope="session")
def browser_binaries() -> tuple[str, str]:
    found = find_browser()
    if found is None:
        outcome = install_browser()
        found = find_browser()
        if found is None:
            skip_loudly(f"no headless Chromium and chromedriver found or installable ({outcome})")
    try:
        import selenium  # noqa: F401
    except ImportError:
        skip_loudly("selenium is not installed (pip install -e '.[test]')")
    assert found is not None
    return found


@pytest.fixture
def browser(browser_binaries):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = browser_binaries
    profile = tempfile.mkdtemp(prefix="dcoord-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def rows(driver) -> list[tuple[str, str]]:
    """The holder rows of the page shown, read again from the start when the page is replaced while
    they are read (the list refreshes itself: on a loaded machine, reading the rows one by one can
    outlast the page, and the rows of the page that went are stale)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(10):
        try:
            return [
                (row.get_attribute("data-name"), row.text)
                for row in driver.find_elements(By.CSS_SELECTOR, "tr.holder-row")
            ]
        except StaleElementReferenceException:
            continue
    raise AssertionError("the holder rows were replaced ten times while they were read")


def wait_until(driver, predicate, timeout: float = 20.0, what: str = "the page"):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # A row read while the page is being replaced (a search submitted, an auto-refresh) goes
    # stale: it is read again at the next poll.
    waiting = WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,))
    return waiting.until(lambda d: predicate(d), message=what)


def screenshot(driver, name: str, docs: Optional[Path] = None) -> Path:
    """The window's screenshot in test-artifacts/; also ``docs`` when asked (or when it is missing)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), f"could not save {path}"
    assert path.stat().st_size > 10_000
    if docs is not None and (os.environ.get(DOCS_SCREENSHOT_ENV) or not docs.exists()):
        docs.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, docs)
    return path


def at_width(driver, width: int, url: str) -> None:
    """``url`` in a window ``width`` px wide, with the admin's navigation sidebar open."""
    driver.set_window_size(width, 1000)
    driver.get(url)
    driver.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'true');")
    driver.get(url)
    sidebar = driver.execute_script(
        "var nav = document.getElementById('nav-sidebar'), main = document.getElementById('main');"
        "return {open: main.classList.contains('shifted'), width: nav ? nav.getBoundingClientRect().width : 0,"
        " inner: window.innerWidth};")
    assert sidebar["open"] and sidebar["width"] > 200 and sidebar["inner"] == width, sidebar


def clipped(driver, selector: str) -> list[str]:
    """The text of each element matching ``selector`` that shows less than its content (its
    scroll width beyond its client width: cut, or spilling over its neighbours)."""
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(function (e) {"
        "  return [e.textContent.trim(), e.scrollWidth, e.clientWidth]; });", selector)
    assert found, f"nothing matches {selector}"
    return [f"{text!r} ({scroll} px in {client} px)" for text, scroll, client in found if scroll > client]


def clipped_column(driver, header: str) -> list[str]:
    """:func:`clipped` for the cells of the list's column whose heading starts with ``header``."""
    index = driver.execute_script(
        "var header = arguments[0];"
        "return Array.from(document.querySelectorAll('#result_list thead th')).findIndex(function (th) {"
        "  return th.textContent.trim().toLowerCase().startsWith(header); });", header.lower())
    assert index >= 0, f"no column {header}"
    return clipped(driver, f"tr.holder-row > :nth-child({index + 1})")


def page_fits(driver) -> bool:
    """No sideways scrolling: the page is no wider than the window."""
    return driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth;")


def test_operator_finds_a_holder_and_sees_it_go(
    browser, live_server, settings, transactional_db, django_user_model, redis_client, spawn
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    settings.STATIC_ROOT = str(ADMIN_STATIC)  # the live server serves the admin's CSS from here
    settings.TIME_ZONE = "UTC"
    operator = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    for codename in ("view_holder", "force_release_holder"):
        operator.user_permissions.add(Permission.objects.get(codename=codename))

    # Holders in other OS processes, plus a few held here, as on a busy site.
    report = spawn("reports:nightly", timeout=300, label="nightly report")
    sync = spawn("orders:sync", timeout=300, label="orders sync")
    heir = spawn("orders:sync", timeout=300, label="orders sync", wait=False)
    Lock(redis_client, "cache:rebuild", label="cache rebuild").acquire()
    exports = Semaphore(redis_client, "exports:csv", limit=3, timeout=300, label="csv export")
    exports.acquire()
    exports.acquire()
    # A holder whose thread name and label are longer than a column: wrapped, never cut, never wider.
    long_thread = "celery-catalogue-import-ForkPoolWorker-3-ThreadPoolExecutor-0_12-supplier-feed-2026-11"
    taker = threading.Thread(name=long_thread, target=Lock(
        redis_client, "imports:catalogue", timeout=300, label="catalogue import for the supplier feed (full refresh)",
        thread_local=False).acquire)
    taker.start()
    taker.join()
    # Long names and owners on other hosts, a read hold of a read-write lock, a @locked view's hold
    # (whose label is its view): the page shows each whole.
    statement = "invoices:customer-7f3c2a91-e5b4-4d0e-9a77-1c2f3e4d5b6a:statement-2026-11"
    spawn(statement, timeout=300, label="monthly statement", host="web-7f9c4d-2x8kq.eu-west-1.compute.internal")
    spawn(statement, timeout=300, label="statement e-mail", host="worker-5d8b7-kq2zt.eu-west-1.compute.internal",
          wait=False)
    spawn("catalogue:prices", timeout=300, label="price import", mode="read")
    view = Lock(redis_client, "shop.views.download_invoices", timeout=300, label="shop.views.download_invoices")
    view.view = "shop.views.download_invoices"
    view.acquire()
    # A leader (its role and term shown) and a unique task's run, as the operator tools show them.
    # Its lease outlives any stall of a loaded machine (a 3 s one was lost, and its term changed
    # under the page): the term the page shows must be the leader's.
    leader = Leader(redis_client, "beat:scheduler", 30, label="celery beat")  # renewed every 10 s
    assert leader.campaign(blocking_timeout=5)
    task = Lock(redis_client, "report:2026-11-26", timeout=300,
                label="celery shop.tasks.build_report[5f1c…] running")
    task.holder_fields = {"role": "task", "task": "shop.tasks.build_report", "state": "running",
                          "key": "report:2026-11-26"}
    task.acquire()

    listing = HolderListing(redis_client)
    for name in ("orders:sync", statement):
        wait_until(browser, lambda _, name=name: listing.waiters(name, "lock"), what=f"the waiter of {name}")
    changelist = live_server.url + reverse("admin:django_redis_coord_holder_changelist")
    browser.get(f"{live_server.url}{reverse('admin:login')}?next={reverse('admin:django_redis_coord_holder_changelist')}"
                "%3Frefresh%3D0")
    browser.find_element(By.ID, "id_username").send_keys("operator")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD + Keys.ENTER)
    browser.set_window_size(1280, 900)

    # The list: the holder of the other process is there, with its pid and fence.
    wait_until(browser, lambda d: any(name == "reports:nightly" for name, _ in rows(d)), what="the holder row")
    wait_until(browser, lambda d: any(name == "orders:sync" and " 1 " in text for name, text in rows(d)),
               what="the waiter of orders:sync")
    listed = dict(rows(browser))
    assert str(report.pid) in listed["reports:nightly"] and str(report.fence) in listed["reports:nightly"]
    assert "nightly report" in listed["reports:nightly"]
    assert "2/3" in listed["exports:csv"]
    role = browser.find_element(By.CSS_SELECTOR, 'tr.holder-row[data-name="beat:scheduler"] .role')
    assert role.text == "leader" and role.get_attribute("title") == f"term {leader.term} (the fence)"
    assert str(leader.term) in listed["beat:scheduler"]
    task_role = browser.find_element(By.CSS_SELECTOR, 'tr.holder-row[data-name="report:2026-11-26"] .role')
    assert task_role.text == "task" and task_role.get_attribute("title") == "task running"
    header = browser.find_element(By.ID, "header")
    assert header.value_of_css_property("background-color") not in ("rgba(0, 0, 0, 0)", "transparent"), (
        "the admin stylesheet did not load"
    )
    owner = browser.find_element(By.CSS_SELECTOR, 'tr.holder-row[data-name="imports:catalogue"] td.owner')
    assert long_thread in owner.text
    assert browser.find_element(
        By.CSS_SELECTOR, 'tr.holder-row[data-name="shop.views.download_invoices"] .label-view').text == view.view
    # At 1,280 and 1,920 px, sidebar open, every name, fence, owner and label is shown whole (they
    # wrap), KIND takes no more room than NAME, every Release button is inside the window and
    # clear of the table's edge, and nothing scrolls sideways.
    for width in WIDTHS:
        at_width(browser, width, changelist + "?refresh=0")
        cut = {column: clipped_column(browser, column) for column in ("name", "fence", "owner", "kind")}
        cut.update({cells: clipped(browser, cells) for cells in ("tr.holder-row .label-view", "#result_list thead th")})
        assert not any(cut.values()), (width, {where: cells for where, cells in cut.items() if cells})
        geometry = browser.execute_script(
            "function box(e) { var r = e.getBoundingClientRect(); return [r.left, r.right, r.width]; }"
            "return {width: window.innerWidth, table: box(document.getElementById('result_list')),"
            " name: box(document.querySelector('tr.holder-row > :nth-child(1)')),"
            " kind: box(document.querySelector('tr.holder-row > :nth-child(2)')),"
            " buttons: Array.from(document.querySelectorAll('a.release-link')).map(box)};"
        )
        assert len(geometry["buttons"]) == len(rows(browser)) and page_fits(browser), (width, geometry)
        assert geometry["kind"][2] <= geometry["name"][2], (width, geometry)
        table_right = geometry["table"][1]
        for left, right, button_width in geometry["buttons"]:
            assert button_width > 0 and 0 <= left and right <= table_right - 8, (width, geometry)
        screenshot(browser, f"admin-holders-{width}.png", DOCS_SCREENSHOT if width == 1280 else None)

    # A holder's page and its release confirmation, at both widths: the name, the fence and the
    # owner whole, the time in the site's time zone to the second.
    detail = live_server.url + reverse("admin:django_redis_coord_holder_detail",
                                       args=[holder_id("lock", statement.encode())])
    for width in WIDTHS:
        at_width(browser, width, detail)
        assert statement in browser.find_element(By.TAG_NAME, "h1").text
        assert "statement e-mail" in browser.find_element(By.ID, "waiters").text
        assert not clipped(browser, "#content h1, .holder-detail td, .holder-detail code, #waiters td")
        assert page_fits(browser)
        acquired = browser.find_element(By.CSS_SELECTOR, ".holder-detail .acquired-at").text
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", acquired), acquired
        release = browser.find_element(By.CSS_SELECTOR, ".submit-row a.release-link")
        assert release.get_attribute("class") == "deletelink release-link"
        screenshot(browser, f"admin-holder-detail-{width}.png", DOCS_DETAIL_SCREENSHOT if width == 1280 else None)
        release.click()
        wait_until(browser, lambda d: d.find_elements(By.ID, "confirm-release"), what="the confirmation page")
        assert not clipped(browser, "#content h1, #content-main li, #content-main code") and page_fits(browser)
        screenshot(browser, f"admin-holder-release-{width}.png")

    # Search for it.
    at_width(browser, 1280, changelist + "?refresh=0")
    search = browser.find_element(By.ID, "searchbar")
    search.send_keys("NIGHTLY" + Keys.ENTER)
    wait_until(browser, lambda d: [name for name, _ in rows(d)] == ["reports:nightly"], what="the search result")
    assert "1 held name" in browser.find_element(By.ID, "result-count").text
    screenshot(browser, "admin-holders-search.png")

    # Watch it disappear: the holder releases in its own process; the page refreshes by itself.
    browser.get(changelist + "?q=nightly&refresh=1")
    wait_until(browser, lambda d: [name for name, _ in rows(d)] == ["reports:nightly"], what="the holder row")
    assert report.finish() == "RELEASED"
    wait_until(browser, lambda d: d.find_elements(By.ID, "no-holders") and not rows(d), timeout=30,
               what="the row to disappear after the release")
    screenshot(browser, "admin-holders-released.png")

    # Force release from the page: confirmation, POST, the waiter takes over.
    browser.get(changelist + "?q=orders&refresh=0")
    wait_until(browser, lambda d: [name for name, _ in rows(d)] == ["orders:sync"], what="orders:sync")
    assert str(sync.pid) in dict(rows(browser))["orders:sync"]
    browser.find_element(By.CSS_SELECTOR, "tr.holder-row a.release-link").click()
    wait_until(browser, lambda d: d.find_elements(By.ID, "confirm-release"), what="the confirmation page")
    assert str(sync.fence) in browser.page_source
    browser.find_element(By.ID, "confirm-release").click()
    wait_until(browser, lambda d: "Released lock" in d.page_source, what="the success message")
    heir_fence = heir.wait_held()
    assert heir_fence > sync.fence
    browser.get(changelist + "?q=orders&refresh=0")
    wait_until(browser, lambda d: any(str(heir.pid) in text for _, text in rows(d)), what="the new holder")
    assert str(heir_fence) in dict(rows(browser))["orders:sync"]
    assert sync.finish() == "LOST"
    screenshot(browser, "admin-holders-force-released.png")

    # Release by filter: the form, the list of what matches, the confirmation.
    browser.get(changelist + "?refresh=0")
    browser.find_element(By.ID, "bulk-release-link").click()
    wait_until(browser, lambda d: d.find_elements(By.ID, "bulk-filters"), what="the filter form")
    browser.find_element(By.ID, "id_label_prefix").send_keys("leader")  # depose a stuck leader
    browser.find_element(By.ID, "bulk-preview").click()
    wait_until(browser, lambda d: d.find_elements(By.ID, "confirm-bulk-release"), what="the matching holds")
    matched = [row.get_attribute("data-name") for row in browser.find_elements(By.CSS_SELECTOR, "tr.bulk-row")]
    assert matched == ["beat:scheduler"]
    matched_terms = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "tr.bulk-row td code")]
    assert matched_terms == [str(leader.term)]
    screenshot(browser, "admin-holders-bulk-release.png")
    browser.find_element(By.ID, "confirm-bulk-release").click()
    wait_until(browser, lambda d: "Released 1 hold" in d.page_source, what="the bulk release's message")
    names = [name for name, _ in rows(browser)]
    assert "report:2026-11-26" in names and "orders:sync" in names
    # The deposed term is gone from the list.  The leader campaigns again once its renewal finds the
    # term ended (within a third of its lease): by the time the page shows, it may lead a new term already.
    deposed = int(matched_terms[0])
    terms = [re.fullmatch(r"term (\d+) \(the fence\)", role.get_attribute("title") or "") for role in
             browser.find_elements(By.CSS_SELECTOR, 'tr.holder-row[data-name="beat:scheduler"] .role')]
    assert all(term is not None and int(term[1]) > deposed for term in terms), terms
    # The leader's next renewal fails: its term ends, and (campaigning again, alone) it leads a new one.
    wait_until(browser, lambda d: leader.term is not None and leader.term > deposed, timeout=120, what="a new term")
    leader.resign()
    task.release()


def log_in(driver, live_server, user: str, next_url: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(f"{live_server.url}{reverse('admin:login')}?next={next_url}")
    driver.find_element(By.ID, "id_username").send_keys(user)
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD + Keys.ENTER)


def as_ms(text: str) -> int:
    """A duration as the page writes it (``850ms``, ``12.3s``, ``5m03s``, ``2h05m``) in milliseconds."""
    units = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
    parts = re.findall(r"([0-9.]+)(ms|d|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return round(sum(float(number) * units[unit] for number, unit in parts))


#: The TTL of the hold that ends while the page is open (seconds).
SHORT_TTL = 20


def test_times_count_on_between_refreshes(browser, live_server, settings, transactional_db, django_user_model,
                                          redis_client):
    """With auto-refresh off, "held for" counts up and the time left down; a hold that ends while
    the page is open says "expired" (not "expired left"), and its "held for" stops there."""
    settings.STATIC_ROOT = str(ADMIN_STATIC)
    operator = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_holder"))
    # One hold that outlives the test, one that ends on its TTL while the page is open (long enough
    # for the page to load first on a loaded machine: the test waits for it, never less).
    Lock(redis_client, "countdown:long", timeout=600, auto_renew=False).acquire()
    short = Lock(redis_client, "countdown:short", timeout=SHORT_TTL, auto_renew=False)
    short.acquire()
    changelist = reverse("admin:django_redis_coord_holder_changelist") + "?q=countdown&refresh=0"
    log_in(browser, live_server, "operator", quote(changelist))

    def cell(name: str, which: str) -> str:
        """The time cell's "held for" (``.held``: its text before the line below) or its line below (``.sub``)."""
        return browser.execute_script(
            "var cell = document.querySelector(arguments[0]).cloneNode(true), below = cell.querySelector('.sub');"
            "if (arguments[1] === '.sub') return below.textContent.replace(/\\s+/g, ' ').trim();"
            "below.remove(); return cell.textContent.trim();",
            f'tr.holder-row[data-name="{name}"] td.time', which)

    wait_until(browser, lambda d: len(rows(d)) == 2, what="the two holds")
    assert browser.execute_script("return document.querySelector('meta[http-equiv=refresh]') === null")
    first_held, first_left = as_ms(cell("countdown:long", ".held")), cell("countdown:long", ".sub")
    assert first_left.endswith(" left"), first_left
    # "held for" counts up, the time left down (by the page's script: the page is never reloaded).
    wait_until(browser, lambda d: as_ms(cell("countdown:long", ".held")) >= first_held + 1500,
               what="'held for' counting up")
    left = cell("countdown:long", ".sub")
    assert left.endswith(" left") and as_ms(left.removesuffix(" left")) < as_ms(first_left.removesuffix(" left"))
    # The short hold ends: "expired", and "held for" stops where its TTL ran out.
    wait_until(browser, lambda d: cell("countdown:short", ".sub") == "expired", timeout=90,
               what="the short hold's 'expired'")
    stopped = as_ms(cell("countdown:short", ".held"))
    long_then = as_ms(cell("countdown:long", ".held"))
    wait_until(browser, lambda d: as_ms(cell("countdown:long", ".held")) >= long_then + 1500, what="time passing")
    assert as_ms(cell("countdown:short", ".held")) == stopped and cell("countdown:short", ".sub") == "expired"
    # It stopped at its TTL: held for + left as the server read them (to the page's 0.1 s).
    assert abs(stopped - SHORT_TTL * 1000) <= 100, stopped
    screenshot(browser, "admin-holders-countdown.png")


DOCS_INDEX_SCREENSHOT = ROOT / "docs" / "img" / "admin-index.png"
#: The app's entries on the admin index and in its sidebar, with their pages.
ENTRIES = {"Contention": "/admin/django_redis_coord/contention/", "Live holders": "/admin/django_redis_coord/holder/",
           "Rate limits": "/admin/django_redis_coord/ratelimit/"}


def app_entries(driver, where: str) -> dict[str, str]:
    """The app's entries (name -> path) in the element ``where`` (the index's content, the sidebar)."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f"{where} .app-django_redis_coord th[scope=row] a")
    return {link.text: link.get_attribute("pathname") for link in found}


def test_the_admin_index_lists_the_pages_and_the_operators_recent_actions(
    browser, live_server, settings, transactional_db, django_user_model, redis_client
):
    """The index lists Live holders, Rate limits and Contention; a force release and a rate-limit
    reset made in the admin show under "Recent actions"; the sidebar lists the three pages too."""
    from selenium.webdriver.common.by import By

    settings.STATIC_ROOT = str(ADMIN_STATIC)
    operator = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    for codename in ("view_holder", "force_release_holder"):
        operator.user_permissions.add(Permission.objects.get(codename=codename))
    stuck = Lock(redis_client, "orders:sync", timeout=600, label="orders sync")
    stuck.acquire()
    for _ in range(2):
        urllib.request.urlopen(f"{live_server.url}/t/rl/gcra/busy/").close()  # a live rate limit

    log_in(browser, live_server, "operator", reverse("admin:index"))
    wait_until(browser, lambda d: d.find_elements(By.ID, "recent-actions-module"), what="the admin index")
    assert app_entries(browser, "#content-main") == ENTRIES
    assert "None available" in browser.find_element(By.ID, "recent-actions-module").text

    # A force release, confirmed on its page.
    browser.get(live_server.url + reverse("admin:django_redis_coord_holder_release",
                                          args=[holder_id("lock", b"orders:sync")]))
    browser.find_element(By.ID, "confirm-release").click()
    wait_until(browser, lambda d: "Released lock" in d.page_source, what="the release's message")
    # A rate-limit reset, from the page the index links to.
    browser.get(live_server.url + reverse("admin:index"))
    browser.find_element(By.LINK_TEXT, "Rate limits").click()
    busy = 'tr.ratelimit[data-name="rl:busy"] td.reset form'
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, busy), what="the busy limit's reset")
    assert app_entries(browser, "#nav-sidebar") == ENTRIES
    current = browser.find_elements(By.CSS_SELECTOR, "#nav-sidebar .current-model th a")
    assert [link.text for link in current] == ["Rate limits"]
    browser.find_element(By.CSS_SELECTOR, busy).submit()
    wait_until(browser, lambda d: "Reset the rate limit" in d.page_source, what="the reset's message")

    browser.set_window_size(1280, 800)  # the index has no sidebar
    browser.get(live_server.url + reverse("admin:index"))
    recent = browser.find_element(By.ID, "recent-actions-module").text
    assert f"lock “orders:sync”, fence {stuck.fence}" in recent and "rate limit “rl:busy”" in recent, recent
    assert "Live holder" in recent and "Rate limit" in recent  # each entry's type
    assert app_entries(browser, "#content-main") == ENTRIES and page_fits(browser)
    screenshot(browser, "admin-index-1280.png", DOCS_INDEX_SCREENSHOT)
