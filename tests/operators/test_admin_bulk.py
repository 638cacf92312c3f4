"""The admin's bulk force release (admin_bulk.py): permissions, the confirmation page, what it
releases across processes, and hostile input."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from django_redis_coord import Lock
from django_redis_coord.core.listing import holder_id
from django_redis_coord.testing.server import free_port
from tests.operators.test_admin import CHANGELIST, admin_users, client_for, csrf_from, snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def users(django_user_model):
    return admin_users(django_user_model)


BULK = "admin:django_redis_coord_holder_bulk_release"


def bulk_form(html: str) -> list[str]:
    return re.findall(r'<input type="hidden" name="hold" value="([^"]+)">', html)


@pytest.mark.parametrize(
    "who, status",
    [("anonymous", "login"), ("non_staff_with_perm", "login"), ("staff_no_perm", 403), ("staff_view", 403),
     ("staff_release", 200), ("superuser", 200)],
)
def test_bulk_release_permission_matrix(users, redis_client, who, status):
    lock = Lock(redis_client, "matrix", timeout=60, label="batch")
    lock.acquire()
    client = client_for(users.get(who))
    page = client.get(reverse(BULK), {"label_prefix": "batch"})
    if status == "login":
        assert page.status_code == 302 and page["Location"].startswith(reverse("admin:login"))
    else:
        assert page.status_code == status
    form = bulk_form(client_for(users["superuser"]).get(reverse(BULK), {"label_prefix": "batch"}).content.decode())
    assert len(form) == 1
    response = client.post(reverse(BULK), {"hold": form})
    assert response.status_code == (302 if status in ("login", 200) else 403)
    assert lock.owned() == (status != 200)
    listed = client.get(reverse(CHANGELIST)).content.decode()
    assert ('id="bulk-release-link"' in listed) == (status == 200)


def test_bulk_release_lists_then_releases_only_the_confirmed_holds_of_other_processes(users, redis_client, spawn):
    chosen = [spawn(f"batch:{i}", timeout=3, label=f"nightly {i}", host="web-9", auto_renew=True) for i in range(2)]
    others = [spawn("batch:here", timeout=3, label="nightly here", auto_renew=True),
              spawn("other", timeout=3, label="weekly", host="web-9", auto_renew=True)]
    client = client_for(users["staff_release"], enforce_csrf_checks=True)
    before = snapshot(redis_client)
    page = client.get(reverse(BULK), {"host": "web-9", "label_prefix": "nightly"})
    html = page.content.decode()
    assert page.status_code == 200
    assert re.findall(r'<tr class="bulk-row" data-name="([^"]+)"', html) == ["batch:0", "batch:1"]
    assert "2 holds match host &#x27;web-9&#x27; and label starting with &#x27;nightly&#x27;" in html
    form = bulk_form(html)
    assert len(form) == 2 and all(redis_client.get(f"batch:{i}").decode() not in html for i in range(2))
    assert snapshot(redis_client).keys() == before.keys()  # the GET changed nothing
    assert client.post(reverse(BULK), {"hold": form}).status_code == 403  # no CSRF token
    assert all(redis_client.exists(f"batch:{i}") for i in range(2))
    response = client.post(reverse(BULK), {"hold": form, "csrfmiddlewaretoken": csrf_from(html)}, follow=True)
    assert response.redirect_chain[-1][0] == reverse(CHANGELIST)
    assert "Released 2 holds: “batch:0”, “batch:1”" in response.content.decode()
    for index, holder in enumerate(chosen):
        holder.expect("LOSS-SIGNAL", timeout=5)
        assert holder.finish() == "LOST"
        assert int(redis_client.hget(Lock(redis_client, f"batch:{index}").keys.meta, "fence")) > holder.fence
    for holder in others:
        assert holder.finish() == "RELEASED"


def test_bulk_release_leaves_a_hold_that_changed_alone(users, redis_client):
    first = Lock(redis_client, "moving", timeout=60, label="batch")
    first.acquire()
    client = client_for(users["superuser"])
    form = bulk_form(client.get(reverse(BULK), {"label_prefix": "batch"}).content.decode())
    first.release()
    second = Lock(redis_client, "moving", timeout=60, label="batch")
    second.acquire()
    response = client.post(reverse(BULK), {"hold": form}, follow=True)
    assert "1 hold had already ended or changed: left alone." in response.content.decode()
    assert second.owned()
    # The right fence with another hold's digest is no confirmation either.
    id_, fence, _ = bulk_form(client.get(reverse(BULK), {"label_prefix": "batch"}).content.decode())[0].split()
    client.post(reverse(BULK), {"hold": f"{id_} {fence} {'0' * 32}"})
    assert second.owned()


@pytest.mark.parametrize(
    "params, message",
    [
        ({"older_than": "-5m"}, "not a duration"),
        ({"older_than": "1e999"}, "not a duration"),
        ({"older_than": "99999999999d"}, "longer than ten years"),
        ({"older_than": "9" * 100_000}, "longer than 1000 characters"),
        ({"label_prefix": "x" * 100_000}, "longer than 1000 characters"),
        ({"pid": "12abc"}, "pid must be a process id"),
        ({"pid": "9" * 30}, "pid must be a process id"),
        ({"kind": "mutex", "host": "h"}, "unknown kind"),
        ({"kind": "lock"}, "choose holds by host, pid, label prefix or age"),
    ],
)
def test_bulk_release_refuses_bad_filters(users, redis_client, params, message):
    Lock(redis_client, "bystander", timeout=60, label="x").acquire()
    before = snapshot(redis_client)
    response = client_for(users["superuser"]).get(reverse(BULK), params)
    html = response.content.decode()
    assert response.status_code == 400
    assert message.lower() in html.lower() and 'id="bulk-error"' in html and "confirm-bulk-release" not in html
    assert snapshot(redis_client) == before


def test_bulk_release_refuses_hostile_posts(users, redis_client, settings):
    lock = Lock(redis_client, "target", timeout=60, label="batch")
    lock.acquire()
    client = client_for(users["superuser"])
    [good] = bulk_form(client.get(reverse(BULK), {"label_prefix": "batch"}).content.decode())
    id_, fence, digest = good.split()
    outside = holder_id("lock", b"other-site:target")
    for fields in (
        {},
        {"hold": ""},
        {"hold": f"{id_} {fence}"},
        {"hold": f"{id_} -{fence} {digest}"},
        {"hold": f"{id_} {fence} {digest.upper()}"},
        {"hold": f"not-an-id! {fence} {digest}"},
        {"hold": f"{holder_id('lock', b'a:dcoord:b')} 1 {digest}"},
        {"hold": [good] * 201},
        {"hold": good + " extra"},
    ):
        response = client.post(reverse(BULK), fields)
        assert response.status_code == 400, fields
        assert lock.owned()
    settings.DJANGO_REDIS_COORD = {**settings.DJANGO_REDIS_COORD, "KEY_PREFIX": "shop"}
    assert client.post(reverse(BULK), {"hold": f"{outside} 1 {digest}"}).status_code == 400
    settings.DJANGO_REDIS_COORD = {key: value for key, value in settings.DJANGO_REDIS_COORD.items()
                                   if key != "KEY_PREFIX"}
    # More fields than Django accepts in one request: refused before the view reads any.
    assert client.post(reverse(BULK), {"hold": [good] * 1500}).status_code == 400
    # A GET never releases, whatever it carries; other methods are not allowed.
    assert client.get(reverse(BULK), {"hold": good, "label_prefix": "batch"}).status_code == 200
    assert client.put(reverse(BULK), {"hold": good}).status_code == 405
    assert client.delete(reverse(BULK)).status_code == 405
    assert lock.owned()
    response = client.post(reverse(BULK), {"hold": good}, follow=True)
    assert "Released 1 hold: “target”" in response.content.decode() and not lock.owned()


def test_bulk_release_without_redis_is_a_503(users, settings):
    settings.DJANGO_REDIS_COORD = {"URL": f"redis://127.0.0.1:{free_port()}/0",
                                   "CLIENT_OPTIONS": {"socket_connect_timeout": 1}}
    client = client_for(users["superuser"])
    assert client.get(reverse(BULK), {"label_prefix": "x"}).status_code == 503
    form = {"hold": f"{holder_id('lock', b'x')} 1 {'0' * 32}"}
    assert client.post(reverse(BULK), form).status_code == 503


def test_bulk_release_lists_at_most_its_limit(users, redis_client, monkeypatch):
    from django_redis_coord.admin import bulk as admin_bulk

    monkeypatch.setattr(admin_bulk, "BULK_LIMIT", 3)
    locks = [Lock(redis_client, f"many:{i}", timeout=60, label="many") for i in range(5)]
    for lock in locks:
        lock.acquire()
    client = client_for(users["superuser"])
    html = client.get(reverse(BULK), {"label_prefix": "many"}).content.decode()
    assert "5 holds match label starting with &#x27;many&#x27;; the first 3 are listed" in html
    form = bulk_form(html)
    assert len(form) == 3
    assert client.post(reverse(BULK), {"hold": form + form[:1]}).status_code == 400  # over the limit
    client.post(reverse(BULK), {"hold": form})
    assert [lock.owned() for lock in locks] == [False, False, False, True, True]
