"""The admin page of live holders: permissions, what it shows, what it hides, force release."""

from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from django_redis_coord import Lock, Semaphore
from django_redis_coord.admin.holders import HolderAdmin
from django_redis_coord.core.listing import HolderListing, holder_id
from django_redis_coord.testing.server import free_port

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_redis_coord_holder_changelist"


def lock_id(name: str) -> str:
    return holder_id("lock", name.encode())


def detail_url(name: str, kind: str = "lock") -> str:
    return reverse("admin:django_redis_coord_holder_detail", args=[holder_id(kind, name.encode())])


def release_url(name: str, kind: str = "lock") -> str:
    return reverse("admin:django_redis_coord_holder_release", args=[holder_id(kind, name.encode())])


def make_user(django_user_model, username: str, *, staff: bool, perms: tuple = (), superuser: bool = False):
    # No password (force_login): hashing one per user would dominate the run time.
    user = django_user_model.objects.create_user(username, password=None, is_staff=staff, is_superuser=superuser)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="django_redis_coord",
                                                         codename=codename))
    return user


@pytest.fixture
def users(django_user_model):
    return admin_users(django_user_model)


def admin_users(django_user_model) -> dict:
    """One user per row of the permission matrix."""
    return {
        "staff_no_perm": make_user(django_user_model, "plain", staff=True),
        "non_staff_with_perm": make_user(django_user_model, "outsider", staff=False, perms=("view_holder",)),
        "staff_view": make_user(django_user_model, "viewer", staff=True, perms=("view_holder",)),
        "staff_release": make_user(django_user_model, "operator", staff=True,
                                   perms=("view_holder", "force_release_holder")),
        "superuser": make_user(django_user_model, "root", staff=True, superuser=True),
    }


def client_for(user=None, **kwargs) -> Client:
    client = Client(**kwargs)
    if user is not None:
        client.force_login(user)
    return client


def wait_for_waiters(client, name: str, kind: str = "lock", timeout: float = 20.0) -> list:
    listing = HolderListing(client)
    stop_at = time.monotonic() + timeout
    while not (waiters := listing.waiters(name, kind)):
        if time.monotonic() > stop_at:
            raise AssertionError(f"nobody queued for {name!r}")
        time.sleep(0.02)
    return waiters


def snapshot(client) -> dict:
    """Every key with its type and serialized value (expiry times left out: they tick), but of
    what a queued waiter rewrites each time it refreshes its place (every lease, in its own
    process), only what must not change: the waiters' tokens, and the meta without its arrival
    counter ``seq``."""
    state = {}
    for key in client.keys("*"):
        if key.endswith(b":waiters"):
            state[key] = sorted(client.hkeys(key))
        elif key.endswith(b":meta"):
            state[key] = {field: value for field, value in client.hgetall(key).items() if field != b"seq"}
        else:
            state[key] = (client.type(key), client.dump(key))
    return state


# -- permissions -------------------------------------------------------------------------------
def test_the_page_is_where_the_admin_expects_it():
    assert reverse(CHANGELIST) == "/admin/django_redis_coord/holder/"


@pytest.mark.parametrize(
    "who, status",
    [
        ("anonymous", "login"),
        ("non_staff_with_perm", "login"),
        ("staff_no_perm", 403),
        ("staff_view", 200),
        ("staff_release", 200),
        ("superuser", 200),
    ],
)
def test_permission_matrix_of_the_list_and_detail(users, redis_client, who, status):
    Lock(redis_client, "matrix", timeout=60).acquire()
    client = client_for(users.get(who))
    for url in (reverse(CHANGELIST), detail_url("matrix")):
        response = client.get(url)
        if status == "login":
            assert response.status_code == 302
            assert response["Location"].startswith(reverse("admin:login"))
        else:
            assert response.status_code == status
            if status == 200:
                assert b"matrix" in response.content


@pytest.mark.parametrize(
    "who, status",
    [
        ("anonymous", "login"),
        ("non_staff_with_perm", "login"),
        ("staff_no_perm", 403),
        ("staff_view", 403),
        ("staff_release", 200),
        ("superuser", 200),
    ],
)
def test_permission_matrix_of_force_release(users, redis_client, who, status):
    lock = Lock(redis_client, "matrix", timeout=60)
    lock.acquire()
    client = client_for(users.get(who))
    response = client.get(release_url("matrix"))
    if status == "login":
        assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    else:
        assert response.status_code == status
    if status != 200:
        response = client.post(release_url("matrix"), {"fence": lock.fence})
        assert response.status_code in (302, 403)
        if response.status_code == 302:
            assert response["Location"].startswith(reverse("admin:login"))
        assert lock.owned()


def test_admin_index_lists_the_page_only_for_those_allowed(users):
    assert b"/admin/django_redis_coord/holder/" in client_for(users["staff_view"]).get("/admin/").content
    assert b"Live holders" in client_for(users["superuser"]).get("/admin/").content
    assert b"/admin/django_redis_coord/holder/" not in client_for(users["staff_no_perm"]).get("/admin/").content


def test_the_release_button_needs_its_own_permission(users, redis_client):
    Lock(redis_client, "buttons", timeout=60).acquire()
    viewer = client_for(users["staff_view"]).get(reverse(CHANGELIST)).content.decode()
    operator = client_for(users["staff_release"]).get(reverse(CHANGELIST)).content.decode()
    assert "release-link" not in viewer and "buttons" in viewer
    assert 'class="button release-link"' in operator
    assert "release-link" not in client_for(users["staff_view"]).get(detail_url("buttons")).content.decode()
    operator_detail = client_for(users["staff_release"]).get(detail_url("buttons")).content.decode()
    assert 'class="deletelink release-link"' in operator_detail  # in a submit-row, as the change form's


# -- what the list shows -----------------------------------------------------------------------
def test_list_shows_a_holder_of_another_process(users, spawn):
    holder = spawn("reports:nightly", timeout=60, label="nightly report")
    html = client_for(users["staff_view"]).get(reverse(CHANGELIST)).content.decode()
    assert "reports:nightly" in html
    assert str(holder.fence) in html and f"pid {holder.pid}" in html and "nightly report" in html
    assert 'http-equiv="refresh" content="5"' in html
    assert re.search(r'data-ttl-ms="\d+"', html)


def test_search_kind_filter_and_usage(users, redis_client):
    Lock(redis_client, "invoice*42", timeout=60).acquire()
    Lock(redis_client, "invoice-7", timeout=60).acquire()
    pool = Semaphore(redis_client, "exports", limit=3, timeout=60)
    pool.acquire()
    pool.acquire()
    client = client_for(users["staff_view"])
    rows = lambda html: re.findall(r'<tr class="holder-row" data-name="([^"]+)" data-kind="(\w+)"', html)  # noqa: E731
    html = client.get(reverse(CHANGELIST)).content.decode()
    assert rows(html) == [("exports", "sem"), ("exports", "sem"), ("invoice*42", "lock"), ("invoice-7", "lock")]
    assert html.count("2/3") == 2
    assert rows(client.get(reverse(CHANGELIST), {"q": "E*4"}).content.decode()) == [("invoice*42", "lock")]
    assert rows(client.get(reverse(CHANGELIST), {"q": "INVOICE"}).content.decode()) == [
        ("invoice*42", "lock"), ("invoice-7", "lock")]
    assert rows(client.get(reverse(CHANGELIST), {"kind": "sem"}).content.decode()) == [("exports", "sem")] * 2
    nothing = client.get(reverse(CHANGELIST), {"q": "zzz"}).content.decode()
    assert "No live holder matches." in nothing


def test_pagination(users, redis_client, monkeypatch):
    monkeypatch.setattr(HolderAdmin, "list_per_page", 2)
    for i in range(5):
        Lock(redis_client, f"page-{i}", timeout=60).acquire()
    client = client_for(users["staff_view"])
    names = lambda response: re.findall(r'data-name="([^"]+)"', response.content.decode())  # noqa: E731
    assert names(client.get(reverse(CHANGELIST))) == ["page-0", "page-1"]
    assert names(client.get(reverse(CHANGELIST), {"p": 3})) == ["page-4"]
    page = client.get(reverse(CHANGELIST), {"p": 2}).content.decode()
    assert "5 held names" in page and 'class="this-page">2<' in page


def test_auto_refresh_can_be_turned_off(users):
    html = client_for(users["staff_view"]).get(reverse(CHANGELIST), {"refresh": 0}).content.decode()
    assert 'http-equiv="refresh"' not in html and "Auto-refresh is off" in html


def test_tokens_are_masked_in_every_page(users, redis_client, spawn):
    spawn("secret:job", timeout=60)
    waiter = spawn("secret:job", timeout=60, wait=False)
    pool = Semaphore(redis_client, "secret:pool", limit=2, timeout=60)
    pool.acquire()
    wait_for_waiters(redis_client, "secret:job")
    tokens = [redis_client.get("secret:job").decode()]
    tokens += [t.decode() for t in redis_client.zrange("secret:pool", 0, -1)]
    lock_queue = [w.token.decode() for w in HolderListing(redis_client).waiters("secret:job")]
    assert len(lock_queue) == 1 and waiter.pid
    tokens += lock_queue
    client = client_for(users["superuser"])
    pages = [
        client.get(reverse(CHANGELIST)),
        client.get(detail_url("secret:job")),
        client.get(detail_url("secret:pool", "sem")),
        client.get(release_url("secret:job")),
        client.get(release_url("secret:pool", "sem"), {"fence": pool.fence}),
    ]
    for response in pages:
        assert response.status_code == 200
        html = response.content.decode()
        for token in tokens:
            assert token not in html
    assert tokens[0][:4] + "…" in pages[1].content.decode()


def test_detail_page(users, redis_client, spawn):
    holder = spawn("orders:sync", timeout=60, label="sync")
    waiter = spawn("orders:sync", timeout=60, wait=False)
    wait_for_waiters(redis_client, "orders:sync")
    html = client_for(users["staff_view"]).get(detail_url("orders:sync")).content.decode()
    assert str(holder.fence) in html and str(holder.pid) in html and "sync" in html
    assert "Waiting (1)" in html and str(waiter.pid) in html


def test_times_are_in_the_sites_time_zone_to_the_second(users, redis_client, settings):
    from django.utils import timezone

    settings.TIME_ZONE = "Asia/Kolkata"
    held = Lock(redis_client, "nightly", timeout=60)
    held.acquire()
    [holder] = HolderListing(redis_client).holder("nightly", "lock")
    html = client_for(users["staff_view"]).get(detail_url("nightly")).content.decode()
    shown = re.search(r'<span class="acquired-at">([^<]*)</span>', html).group(1)
    assert shown == timezone.localtime(holder.acquired_at).strftime("%Y-%m-%d %H:%M:%S IST")


def test_a_label_that_is_the_view_is_shown_once(users, redis_client):
    """``@locked``'s default label is its view's dotted path: "label / view" would say it twice."""
    for name, label in (("export", "shop.views.export"), ("report", "monthly report")):
        held = Lock(redis_client, name, timeout=60, label=label)
        held.view = "shop.views.export"
        held.acquire()
    html = client_for(users["staff_view"]).get(reverse(CHANGELIST)).content.decode()
    assert re.findall(r'<div class="sub label-view">([^<]*)</div>', html) == [
        "shop.views.export", "monthly report / shop.views.export"]


def test_detail_of_a_free_or_unknown_holder_is_404(users):
    client = client_for(users["staff_view"])
    response = client.get(detail_url("nobody"))
    assert response.status_code == 404 and b"Nobody holds this lock now." in response.content
    assert client.get("/admin/django_redis_coord/holder/not-an-id!/").status_code == 404


def test_redis_unavailable_is_a_503_page(users, settings):
    settings.DJANGO_REDIS_COORD = {"URL": f"redis://127.0.0.1:{free_port()}/0",
                                   "CLIENT_OPTIONS": {"socket_connect_timeout": 1}}
    response = client_for(users["staff_view"]).get(reverse(CHANGELIST))
    assert response.status_code == 503 and b"could not be read" in response.content


def test_key_prefix_is_stripped_from_names(users, redis_client, settings, redis_url):
    settings.DJANGO_REDIS_COORD = {"URL": redis_url, "KEY_PREFIX": "shop"}
    Lock(redis_client, "shop:orders", timeout=60).acquire()
    Lock(redis_client, "blog:orders", timeout=60).acquire()
    html = client_for(users["staff_view"]).get(reverse(CHANGELIST)).content.decode()
    assert re.findall(r'data-name="([^"]+)"', html) == ["orders"]


# -- nothing changes on GET --------------------------------------------------------------------
def test_get_never_changes_state(users, redis_client, spawn):
    holder = spawn("frozen", timeout=60)
    spawn("frozen", timeout=60, wait=False)
    pool = Semaphore(redis_client, "frozen-pool", limit=1, timeout=60)
    pool.acquire()
    wait_for_waiters(redis_client, "frozen")
    before = snapshot(redis_client)
    client = client_for(users["superuser"])
    for url, params in [
        (reverse(CHANGELIST), {}),
        (reverse(CHANGELIST), {"q": "frozen", "kind": "lock", "p": "1"}),
        (detail_url("frozen"), {}),
        (detail_url("frozen-pool", "sem"), {}),
        (release_url("frozen"), {}),
        (release_url("frozen"), {"fence": holder.fence}),
        (release_url("frozen-pool", "sem"), {"fence": pool.fence}),
        (release_url("frozen-pool", "sem"), {}),
    ]:
        assert client.get(url, params).status_code in (200, 302)
        assert client.head(url, params).status_code in (200, 302)
    assert snapshot(redis_client) == before


# -- force release -----------------------------------------------------------------------------
def csrf_from(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def test_force_release_with_confirmation_and_csrf(users, redis_client, spawn):
    old = spawn("stuck:job", timeout=60)
    client = client_for(users["staff_release"], enforce_csrf_checks=True)
    page = client.get(release_url("stuck:job"))
    html = page.content.decode()
    assert page.status_code == 200 and "Yes, force release" in html and str(old.fence) in html
    # Without the CSRF token nothing happens.
    assert client.post(release_url("stuck:job"), {"fence": old.fence}).status_code == 403
    assert redis_client.exists("stuck:job") == 1
    form = {"fence": old.fence, "hold": re.search(r'name="hold" value="([^"]+)"', html).group(1)}
    response = client.post(release_url("stuck:job"), {**form, "csrfmiddlewaretoken": csrf_from(html)},
                           follow=True)
    assert response.redirect_chain[-1][0] == reverse(CHANGELIST)
    text = response.content.decode()
    assert "Released lock “stuck:job”" in text and "nobody was waiting" in text
    assert redis_client.exists("stuck:job") == 0
    assert int(redis_client.hget(Lock(redis_client, "stuck:job").keys.meta, "fence")) > old.fence
    assert old.finish() == "LOST"


def test_force_release_hands_off_to_the_next_waiter(users, redis_client, spawn):
    old = spawn("queue:job", timeout=60)
    heir = spawn("queue:job", timeout=60, wait=False)
    wait_for_waiters(redis_client, "queue:job")
    client = client_for(users["superuser"])
    response = client.post(release_url("queue:job"), confirmed_form(client, "queue:job"), follow=True)
    assert "it went to the next waiter" in response.content.decode()
    assert heir.wait_held() > old.fence
    assert old.finish() == "LOST" and heir.finish() == "RELEASED"


def test_force_release_of_a_changed_hold_does_nothing(users, redis_client):
    lock = Lock(redis_client, "changed", timeout=60)
    lock.acquire()
    client = client_for(users["superuser"])
    form = confirmed_form(client, "changed")
    response = client.post(release_url("changed"), {**form, "fence": lock.fence - 1}, follow=True)
    assert "Nothing released" in response.content.decode()
    assert lock.owned()
    response = client.get(release_url("changed"), {"fence": lock.fence - 1}, follow=True)
    assert "already ended or changed" in response.content.decode()


def test_force_release_of_a_semaphore_permit(users, redis_client):
    pool = Semaphore(redis_client, "permits", limit=2, timeout=60)
    pool.acquire()
    first = pool.fence
    pool.acquire()
    second = pool.fence
    client = client_for(users["superuser"])
    page = client.get(release_url("permits", "sem"), {"fence": first}).content.decode()
    assert str(first) in page and "semaphore permit" in page
    # The id of one permit (as manage.py locks list --json gives it) opens its semaphore's page.
    permit_id = HolderListing(redis_client).holder("permits", "sem")[0].id
    assert client.get(reverse("admin:django_redis_coord_holder_detail", args=[permit_id])).status_code == 200
    client.post(release_url("permits", "sem"), confirmed_form(client, "permits", "sem", fence=first))
    assert [h.fence for h in pool.holders()] == [second]


def confirmed_form(client, name: str, kind: str = "lock", **params) -> dict:
    """The fields of the confirmation page's form, as the browser would post them."""
    html = client.get(release_url(name, kind), params).content.decode()
    return dict(re.findall(r'<input type="hidden" name="(fence|hold)" value="([^"]*)"', html))


def test_force_release_needs_the_confirmed_holds_identity(users, redis_client):
    lock = Lock(redis_client, "identity", timeout=60)
    lock.acquire()
    client = client_for(users["superuser"])
    # A POST that does not name the confirmed hold releases nothing, whoever holds the lock.
    for fields in ({}, {"fence": ""}, {"fence": "x"}, {"fence": str(lock.fence)}):
        response = client.post(release_url("identity"), fields)
        assert response.status_code == 400, fields
        assert lock.owned()
    form = confirmed_form(client, "identity")
    assert form["fence"] == str(lock.fence) and form["hold"]
    for fields in ({"hold": form["hold"]}, {"fence": form["fence"], "hold": ""}):
        assert client.post(release_url("identity"), fields).status_code == 400, fields
        assert lock.owned()
    # The right fence with another hold's digest: the hold changed, nothing released.
    response = client.post(release_url("identity"), {**form, "hold": "0" * len(form["hold"])}, follow=True)
    assert "Nothing released" in response.content.decode()
    assert lock.owned()
    client.post(release_url("identity"), form)
    assert not lock.owned()


def test_ids_of_names_no_primitive_may_have_are_not_found(users, redis_client):
    client = client_for(users["superuser"])
    for name in (b"a:dcoord:lock:meta", b"x" * (64 * 1024 + 1)):
        for view in ("detail", "release"):
            url = reverse(f"admin:django_redis_coord_holder_{view}", args=[holder_id("lock", name)])
            assert client.get(url).status_code == 404, (view, name[:20])
        url = reverse("admin:django_redis_coord_holder_release", args=[holder_id("lock", name)])
        assert client.post(url, {"fence": "1", "hold": "0" * 32}).status_code == 404


# -- what a hold is for --------------------------------------------------------------------------
def test_leaders_and_tasks_show_their_role_and_a_leader_its_term(users, redis_client):
    from django_redis_coord import Leader

    leader = Leader(redis_client, "scheduler", 10, label="beat")
    assert leader.campaign(blocking_timeout=5)
    task = Lock(redis_client, "report:7", timeout=60, label="celery shop.tasks.report[abc] running")
    task.holder_fields = {"role": "task", "task": "shop.tasks.report", "task_id": "abc", "state": "running",
                          "key": "report:7"}
    task.acquire()
    try:
        client = client_for(users["staff_view"])
        html = client.get(reverse(CHANGELIST)).content.decode()
        cells = dict(re.findall(r'data-name="([^"]+)".*?<div class="sub role"[^>]*>([^<]*)</div>', html, re.S))
        assert cells == {"report:7": "task", "scheduler": "leader"}
        assert 'title="task running"' in html
        assert f'title="term {leader.term} (the fence)"' in html
        detail = client.get(detail_url("scheduler")).content.decode()
        assert '<tr class="record-role"><th scope="row">role</th><td>leader</td>' in detail
        assert f'<tr class="record-term"><th scope="row">term</th><td>{leader.term}</td>' in detail
        detail = client.get(detail_url("report:7")).content.decode()
        for key, value in (("task", "shop.tasks.report"), ("task_id", "abc"), ("key", "report:7"),
                           ("state", "running")):
            assert f'<tr class="record-{key}"><th scope="row">{key}</th><td>{value}</td>' in detail, key
    finally:
        leader.resign()
