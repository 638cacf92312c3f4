"""The audit trail of the operator tools: a force release, a bulk release and a rate-limit reset
made in the admin are Django ``LogEntry`` rows (who, when, what), shown under "Recent actions" on
the admin index; the same made with ``manage.py`` is a record on the ``django_redis_coord``
logger naming the OS user.  And the admin index and sidebar list the three pages."""

from __future__ import annotations

import getpass
import io
import logging
import re

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_redis_coord import Lock
from django_redis_coord.core.listing import holder_id
from django_redis_coord.core.ratelimit import ratelimit_key
from django_redis_coord.models import Holder, RateLimit
from tests.operators.test_admin import admin_users, client_for, csrf_from, detail_url, release_url
from tests.operators.test_locks_bulk_release import fence_counter
from tests.operators.test_locks_command import run

pytestmark = pytest.mark.django_db

INDEX = "admin:index"
RATELIMITS = "admin:django_redis_coord_holder_ratelimits"
CONTENTION = "admin:django_redis_coord_holder_contention"
BULK = "admin:django_redis_coord_holder_bulk_release"


@pytest.fixture
def users(django_user_model):
    return admin_users(django_user_model)


def recent_actions(client: Client) -> str:
    """The "Recent actions" module of the admin index, as the user of ``client`` sees it."""
    html = client.get(reverse(INDEX)).content.decode()
    start = html.index('id="recent-actions-module"')
    return html[start:html.index("</div>", start)]


def force_release(client: Client, name: str) -> str:
    """Confirm and POST the force release of ``name`` as the admin's page does; the page after."""
    page = client.get(release_url(name)).content.decode()
    form = {"fence": re.search(r'name="fence" value="(\d+)"', page).group(1),
            "hold": re.search(r'name="hold" value="([^"]+)"', page).group(1),
            "csrfmiddlewaretoken": csrf_from(page)}
    return client.post(release_url(name), form, follow=True).content.decode()


# -- the admin's log ---------------------------------------------------------------------------
def test_a_force_release_is_a_log_entry_in_recent_actions_and_the_names_history(users, redis_client):
    operator = users["staff_release"]
    client = client_for(operator, enforce_csrf_checks=True)
    stuck = Lock(redis_client, "stuck:job", timeout=60)
    assert stuck.acquire(blocking=False)
    assert "None available" in recent_actions(client)
    before = timezone.now()
    assert "Released lock “stuck:job”" in force_release(client, "stuck:job")

    [entry] = LogEntry.objects.all()
    assert entry.user == operator and before <= entry.action_time <= timezone.now()
    assert entry.content_type == ContentType.objects.get_for_model(Holder)
    assert entry.object_id == holder_id("lock", b"stuck:job") and entry.action_flag == DELETION
    assert entry.object_repr == f"lock “stuck:job”, fence {stuck.fence}"
    assert f"fence counter moved to {fence_counter(redis_client, 'stuck:job')}" in entry.get_change_message()
    recent = recent_actions(client)
    assert "None available" not in recent and f"lock “stuck:job”, fence {stuck.fence}" in recent
    assert "Live holder" in recent  # the entry's type
    # The name's page (held again) shows who released what before.
    again = Lock(redis_client, "stuck:job", timeout=60)
    assert again.acquire(blocking=False)
    page = client.get(detail_url("stuck:job")).content.decode()
    history = page[page.index('id="admin-history"'):]
    assert "operator" in history and f"fence {stuck.fence}" in history
    # Another user's index lists only their own actions, as the admin does.
    assert "None available" in recent_actions(client_for(users["superuser"]))


def test_a_release_that_finds_the_hold_changed_logs_nothing(users, redis_client):
    client = client_for(users["staff_release"])
    first = Lock(redis_client, "moved:on", timeout=60)
    assert first.acquire(blocking=False)
    page = client.get(release_url("moved:on")).content.decode()
    form = {"fence": first.fence, "hold": re.search(r'name="hold" value="([^"]+)"', page).group(1)}
    first.release()
    assert Lock(redis_client, "moved:on", timeout=60).acquire(blocking=False)  # another hold, another fence
    assert "Nothing released" in client.post(release_url("moved:on"), form, follow=True).content.decode()
    assert not LogEntry.objects.exists()


def test_a_bulk_release_logs_each_hold_it_released(users, redis_client):
    operator = users["staff_release"]
    client = client_for(operator)
    held = [Lock(redis_client, f"nightly:{n}", timeout=60, label="nightly import") for n in range(2)]
    for lock in held:
        assert lock.acquire(blocking=False)
    assert Lock(redis_client, "weekly:0", timeout=60, label="weekly import").acquire(blocking=False)
    page = client.get(reverse(BULK), {"label_prefix": "nightly"}).content.decode()
    holds = re.findall(r'name="hold" value="([^"]+)"', page)
    assert len(holds) == 2
    assert "Released 2 holds" in client.post(reverse(BULK), {"hold": holds}, follow=True).content.decode()

    entries = LogEntry.objects.order_by("object_repr")
    assert [entry.object_repr for entry in entries] == [f"lock “nightly:{n}”, fence {lock.fence}"
                                                        for n, lock in enumerate(held)]
    assert {entry.object_id for entry in entries} == {holder_id("lock", f"nightly:{n}".encode()) for n in range(2)}
    assert all(entry.user == operator and entry.action_flag == DELETION for entry in entries)
    assert all("Force released by filter" in entry.get_change_message() for entry in entries)
    recent = recent_actions(client)
    assert all(f"lock “nightly:{n}”" in recent for n in range(2)) and "weekly" not in recent


def test_a_rate_limit_reset_is_a_log_entry_in_recent_actions(users, redis_client):
    operator = users["staff_release"]
    for _ in range(2):
        Client().get("/t/rl/gcra/busy/")
    assert redis_client.exists(ratelimit_key("rl:busy"))
    client = client_for(operator)
    before = timezone.now()
    after = client.post(reverse(RATELIMITS), {"name": "rl:busy"}, follow=True).content.decode()
    assert "Reset the rate limit" in after and not redis_client.exists(ratelimit_key("rl:busy"))

    [entry] = LogEntry.objects.all()
    assert entry.user == operator and before <= entry.action_time <= timezone.now()
    assert entry.content_type == ContentType.objects.get_for_model(RateLimit)
    assert (entry.object_id, entry.object_repr, entry.action_flag) == ("rl:busy", "rate limit “rl:busy”", DELETION)
    assert "gcra" in entry.get_change_message()
    recent = recent_actions(client)
    assert "rate limit “rl:busy”" in recent and "Rate limit" in recent
    # A reset of an idle limit changes nothing and logs nothing.
    client.post(reverse(RATELIMITS), {"name": "rl:idle"})
    assert LogEntry.objects.count() == 1


# -- the commands' log -------------------------------------------------------------------------
@pytest.fixture
def audit_log(caplog):
    caplog.set_level(logging.INFO, logger="django_redis_coord")
    return caplog


def audit_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django_redis_coord" and hasattr(r, "os_user")]


def test_locks_release_logs_who_released_what(redis_client, audit_log):
    held = Lock(redis_client, "jobs:stuck", timeout=60, label="stuck job")
    assert held.acquire(blocking=False)
    run("release", "jobs:stuck", "--noinput")
    [record] = audit_records(audit_log)
    assert record.levelno == logging.INFO and record.os_user == getpass.getuser()
    assert record.command == "locks release" and "'jobs:stuck'" in record.target
    message = record.getMessage()
    assert f"Force released Lock 'jobs:stuck', fence {held.fence}" in message and "stuck job" in message
    assert f"fence counter moved to {fence_counter(redis_client, 'jobs:stuck')}" in message
    assert f"by OS user {getpass.getuser()!r}" in message


def test_a_bulk_release_logs_each_hold_and_a_dry_run_nothing(redis_client, audit_log):
    held = [Lock(redis_client, f"batch:{n}", timeout=60, label="nightly batch") for n in range(2)]
    for lock in held:
        assert lock.acquire(blocking=False)
    run("release", "--label-prefix", "nightly")  # a dry run
    assert audit_records(audit_log) == []
    run("release", "--label-prefix", "nightly", "--yes")
    records = audit_records(audit_log)
    assert sorted(r.target.split(",")[0] for r in records) == ["Lock 'batch:0'", "Lock 'batch:1'"]
    for record in records:
        assert record.os_user == getpass.getuser() and "by filter: label starting with 'nightly'" in record.getMessage()


def test_ratelimits_reset_logs_who_reset_which_limit(redis_client, audit_log):
    Client().get("/t/rl/gcra/busy/")
    call_command("ratelimits", "reset", "rl:busy", "--noinput", stdout=io.StringIO())
    [record] = audit_records(audit_log)
    assert (record.os_user, record.command, record.target) == (getpass.getuser(), "ratelimits reset", "rl:busy")
    assert "Reset the rate limit 'rl:busy' (gcra" in record.getMessage()


# -- the admin index and sidebar ---------------------------------------------------------------
PAGES = {"Live holders": "/admin/django_redis_coord/holder/", "Rate limits": "/admin/django_redis_coord/ratelimit/",
         "Contention": "/admin/django_redis_coord/contention/"}


def entries(html: str, where: str) -> dict[str, str]:
    """The app's model entries (name -> link) in the element with id ``where``."""
    start = html.index(f'id="{where}"')
    block = html[start:]
    section = block[block.index('class="app-django_redis_coord'):]
    section = section[:section.index("</table>")]
    return dict((name, link) for link, name in re.findall(r'<th scope="row"[^>]*>\s*<a href="([^"]+)"[^>]*>([^<]+)</a>',
                                                          section))


def test_the_index_and_sidebar_list_the_three_pages_for_those_allowed(users, redis_client):
    for who in ("staff_view", "staff_release", "superuser"):
        client = client_for(users[who])
        assert entries(client.get(reverse(INDEX)).content.decode(), "content-main") == PAGES, who
        assert entries(client.get(PAGES["Rate limits"]).content.decode(), "nav-sidebar") == PAGES, who
        for link in PAGES.values():
            assert client.get(link).status_code == 200, (who, link)
    assert reverse(RATELIMITS) == PAGES["Rate limits"] and reverse(CONTENTION) == PAGES["Contention"]
    plain = client_for(users["staff_no_perm"])
    assert "django_redis_coord" not in plain.get(reverse(INDEX)).content.decode()
    for link in PAGES.values():
        assert plain.get(link).status_code == 403
    assert client_for().get(PAGES["Contention"]).status_code == 302  # to the login page


def test_the_current_page_is_marked_in_the_sidebar(users, redis_client):
    client = client_for(users["staff_view"])
    for name, link in PAGES.items():
        html = client.get(link).content.decode()
        current = re.findall(r'<tr class="model-\w+ current-model">\s*<th scope="row"[^>]*>\s*<a href="([^"]+)"', html)
        assert current == [link], (name, current)


def test_the_first_addresses_lead_to_the_pages(users, redis_client):
    client = client_for(users["staff_view"])
    for old, new in (("holder/ratelimits/", "ratelimit/"), ("holder/contention/", "contention/")):
        response = client.get(f"/admin/django_redis_coord/{old}?minutes=15")
        assert response.status_code == 302 and response["Location"] == f"/admin/django_redis_coord/{new}?minutes=15"
