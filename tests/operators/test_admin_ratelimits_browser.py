"""The admin's rate-limits page in a real headless Chromium (see tests/operators/test_admin_browser.py for how
the browser is found or installed).  At 1,280 and 1,920 px with the sidebar open, no heading wraps, every
cell shows whole and nothing scrolls sideways.  Its screenshot at 1,280 px goes to ``test-artifacts/`` and,
with ``DCOORD_UPDATE_DOCS_SCREENSHOT=1`` (or when missing), to ``docs/img/admin-ratelimits.png``."""

from __future__ import annotations

from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from django_redis_coord import RateLimit, SlidingWindowLimit
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

DOCS_SCREENSHOT = ROOT / "docs" / "img" / "admin-ratelimits.png"


def heading_lines(driver) -> dict[str, int]:
    """Each heading of the table with the number of lines its text takes."""
    return driver.execute_script(
        "var out = {};"
        "document.querySelectorAll('#result_list thead th').forEach(function (th) {"
        "  var range = document.createRange(); range.selectNodeContents(th);"
        "  var tops = new Set(Array.from(range.getClientRects()).map(function (r) { return Math.round(r.top); }));"
        "  if (th.textContent.trim()) out[th.textContent.trim()] = tops.size; });"
        "return out;")


def test_the_rate_limits_page_fits_at_1280_px_without_wrapping_its_headings(
    browser, live_server, settings, transactional_db, django_user_model, redis_client  # noqa: F811
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    settings.STATIC_ROOT = str(ADMIN_STATIC)
    operator = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    for codename in ("view_holder", "force_release_holder"):
        operator.user_permissions.add(Permission.objects.get(codename=codename))

    # Limits of the test app's views (their rates known), and core limits with long, odd names; all
    # per hour, so that each is still live when the page lists it, however slow the machine (a call
    # to a 3/m view was free again 20 s later, and its row was gone from a loaded run's page).
    client = Client()
    for name, times in (("busy", 3), ("calm", 1), ("customer-7f3c2a91-e5b4-4d0e-9a77-1c2f3e4d5b6a", 2)):
        for _ in range(times):
            client.get(f"/t/rl/hourly/{name}/")
    for _ in range(2):
        client.get("/t/rl/hourly-window/exports-2026-11/")
    RateLimit(redis_client, "partner-api:invoices:statement-2026-11:customer-7f3c2a91", "100/h", burst=5).hit()
    SlidingWindowLimit(redis_client, "mail:digest:7", "3/h").hit()
    RateLimit(redis_client, "search:" + "q" * 1100, "10/h").hit()   # named by its digest
    RateLimit(redis_client, b"bytes:\xff-name", "10/h").hit()       # not UTF-8: listed by its key

    page = live_server.url + reverse("admin:django_redis_coord_holder_ratelimits")
    browser.get(f"{live_server.url}{reverse('admin:login')}?next={reverse('admin:django_redis_coord_holder_ratelimits')}")
    browser.find_element(By.ID, "id_username").send_keys("operator")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD + Keys.ENTER)
    wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.ratelimit"), what="the limits")

    for width in WIDTHS:
        at_width(browser, width, page)
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.ratelimit")
        assert len(rows) == 8, [row.get_attribute("data-name") for row in rows]
        busy = browser.find_element(By.CSS_SELECTOR, 'tr.ratelimit[data-name="rl-hourly:busy"]').text
        assert "Token bucket (GCRA)" in busy and "3/h, burst 2" in busy
        lines = heading_lines(browser)
        assert set(lines) == {"Name", "Kind", "Rate", "Limit", "Used", "Remaining", "Free again in"}
        assert all(count == 1 for count in lines.values()), (width, lines)
        cut = clipped(browser, "#result_list td, #result_list th")
        assert not cut and page_fits(browser), (width, cut)
        geometry = browser.execute_script(
            "function box(e) { var r = e.getBoundingClientRect(); return [r.left, r.right]; }"
            "return {table: box(document.getElementById('result_list')),"
            " buttons: Array.from(document.querySelectorAll('#result_list input[type=submit]')).map(box)};")
        assert len(geometry["buttons"]) == 8, geometry
        assert all(0 <= left and right <= geometry["table"][1] for left, right in geometry["buttons"]), geometry
        screenshot(browser, f"admin-ratelimits-{width}.png", DOCS_SCREENSHOT if width == 1280 else None)

    # Reset the limit listed by its key, from the page.
    row = browser.find_element(By.CSS_SELECTOR, 'tr.ratelimit[data-name*=":dcoord:gcra:#"]')
    row.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_until(browser, lambda d: "Reset the rate limit" in d.find_element(By.CSS_SELECTOR, "ul.messagelist").text,
               what="the reset message")
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.ratelimit")) == 7
