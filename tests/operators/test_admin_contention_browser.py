"""The admin's contention page in a real headless Chromium (see tests/operators/test_admin_browser.py for how
the browser is found or installed).  Its screenshot goes to ``test-artifacts/`` and, with
``DCOORD_UPDATE_DOCS_SCREENSHOT=1`` (or when missing), to ``docs/img/admin-contention.png``."""

from __future__ import annotations

import random
import time

import redis
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission
from django.test import override_settings
from django.urls import reverse

from django_redis_coord import lock
from django_redis_coord.config.metrics import configured_recorder
from django_redis_coord.metrics import HistoryRecorder, feed
from tests.operators.test_admin_browser import (  # noqa: F401  (browser and browser_binaries are fixtures)
    ADMIN_STATIC,
    PASSWORD,
    ROOT,
    WIDTHS,
    at_width,
    browser,
    browser_binaries,
    clipped,
    page_fits,
    screenshot,
    wait_until,
)
from tests.support.procs import run_processes

DOCS_SCREENSHOT = ROOT / "docs" / "img" / "admin-contention.png"
#: What each template's past hour looked like: (acquisitions a minute, contentions, wait, hold) scales.
PAST = {
    "orders:{pk}": (40, 6, 0.004, 0.120),
    "reports:{day}": (2, 1, 0.030, 8.0),
    "checkout:{user.pk}": (25, 0, 0.002, 0.045),
    "invoices:{customer.uuid}:statement-{month}:{format}": (3, 0, 0.001, 0.900),
}


def fill_the_past_hour(client: redis.Redis) -> None:
    """What the web processes would have written over the last hour, minute by minute."""
    now = time.time()
    rng = random.Random(7)
    for minutes_ago in range(59, 0, -1):
        history = HistoryRecorder(client, flush_every=3600, clock=lambda ago=minutes_ago: now - ago * 60)
        busy = 1.0 + (2.0 if 20 <= minutes_ago <= 28 else 0.0)  # a busy spell twenty-odd minutes ago
        for template, (acquisitions, contentions, wait, hold) in PAST.items():
            for _ in range(int(acquisitions * busy * rng.uniform(0.6, 1.2))):
                history.acquired(template, "lock", wait * busy * rng.lognormvariate(0, 0.8))
                history.released(template, "lock", hold * rng.lognormvariate(0, 0.5))
            for _ in range(int(contentions * busy * rng.uniform(0, 1.5))):
                history.contended(template, "lock", 0.0)
        if minutes_ago == 24:
            history.lost("orders:{pk}", "lock", None)
        history.flush()


def _contend(index: int) -> int:
    """In a forked web-like process: orders taken and refused against the other processes."""
    taken = 0
    for pk in range(20):
        held = lock(f"orders:{pk % 3}", timeout=5, template="orders:{pk}")
        if held.acquire(blocking=True, blocking_timeout=0.01):
            time.sleep(0.005)
            held.release()
            taken += 1
    history = configured_recorder("history")
    assert history is not None
    feed()
    history.flush()
    return taken


def test_operator_sees_contention_per_template(browser, live_server, settings, transactional_db,  # noqa: F811
                                               django_user_model, redis_client):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    settings.STATIC_ROOT = str(ADMIN_STATIC)
    operator = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_holder"))
    fill_the_past_hour(redis_client)
    with override_settings(DJANGO_REDIS_COORD={**django_settings.DJANGO_REDIS_COORD, "METRICS": ["history"]}):
        taken = run_processes(_contend, [(index,) for index in range(3)], timeout=120)
        assert sum(taken) > 0

        holders = reverse("admin:django_redis_coord_holder_changelist")
        browser.get(f"{live_server.url}{reverse('admin:login')}?next={holders}%3Frefresh%3D0")
        browser.find_element(By.ID, "id_username").send_keys("operator")
        browser.find_element(By.ID, "id_password").send_keys(PASSWORD + Keys.ENTER)
        browser.set_window_size(1280, 1180)
        wait_until(browser, lambda d: d.find_elements(By.ID, "contention-link"), what="the link on the holders page")
        browser.find_element(By.ID, "contention-link").click()
        wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "div.dcoord-template"), what="the charts")

        # The test's four templates, in order; a lock taken without a template in this process meanwhile
        # (a background thread an earlier test of this xdist worker left running) is "(untemplated)".
        sections = [section.get_attribute("data-template")
                    for section in browser.find_elements(By.CSS_SELECTOR, "div.dcoord-template")]
        assert [section for section in sections if section != "(untemplated)"] == [
                            "orders:{pk}", "reports:{day}", "checkout:{user.pk}",
                            "invoices:{customer.uuid}:statement-{month}:{format}"]
        header = browser.find_element(By.ID, "header")
        assert header.value_of_css_property("background-color") not in ("rgba(0, 0, 0, 0)", "transparent")
        orders = browser.find_element(By.CSS_SELECTOR, 'div.dcoord-template[data-template="orders:{pk}"]')
        assert int(orders.find_element(By.CSS_SELECTOR, "strong.contentions").text) > 0
        page = browser.current_url
        # At 1,280 and 1,920 px with the sidebar open: every template's name and figures whole, every
        # chart whole and inside the window, no sideways scrolling.
        for window in WIDTHS:
            at_width(browser, window, page)
            assert not clipped(browser, "div.dcoord-template h2, div.dcoord-template .figures, .dcoord-meta")
            assert page_fits(browser)
            geometry = browser.execute_script(
                "return {width: window.innerWidth,"
                " charts: Array.from(document.querySelectorAll('svg.dcoord-chart')).map(function (s) {"
                "   var r = s.getBoundingClientRect(); return [r.width, r.height, r.right]; }),"
                " lines: document.querySelectorAll('svg.dcoord-chart polyline.series').length,"
                " bars: document.querySelectorAll('svg.dcoord-chart rect.bar').length};"
            )
            assert len(geometry["charts"]) == 3 * len(sections), geometry  # three charts a template
            for width, height, right in geometry["charts"]:
                assert width >= 250 and height > 100 and right <= geometry["width"], geometry
            assert geometry["lines"] >= 16 and geometry["bars"] >= 30  # two percentiles of two charts, four templates
            screenshot(browser, f"admin-contention-{window}.png", DOCS_SCREENSHOT if window == 1280 else None)
