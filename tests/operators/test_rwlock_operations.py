"""What operators see and do with read-write locks: the listing (kind ``rw``), ``manage.py locks``
(list, show, waiters, release one hold, the bulk release) and the admin pages, with the holds
taken by other OS processes; and what they refuse (hostile ids and forms, other kinds' names)."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from django_redis_coord import Lock, Semaphore
from django_redis_coord.core.holders import rwlock_holders, semaphore_holders
from django_redis_coord.core.listing import HolderListing, holder_id
from django_redis_coord.core.rwlock.sync import ReadWriteLock
from django_redis_coord.management.commands.locks import EXIT_CHANGED, EXIT_USAGE, HOLDER_JSON_SCHEMA
from tests.operators.test_admin import CHANGELIST, admin_users, client_for, snapshot
from tests.operators.test_admin_bulk import BULK, bulk_form
from tests.operators.test_locks_command import fails, run, validate, wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def users(django_user_model):
    return admin_users(django_user_model)


def readers_and_a_writer(spawn, redis_client, name: str, **kwargs):
    """Two reader processes holding ``name``, and a writer process queued behind them."""
    readers = [spawn(name, timeout=60, mode="read", label=f"reader {index}", **kwargs) for index in range(2)]
    writer = spawn(name, timeout=60, mode="write", label="writer", wait=False)
    wait_for(lambda: HolderListing(redis_client).waiters(name, "rw"))
    return readers, writer


def rw_url(view: str, name: str) -> str:
    return reverse(f"admin:django_redis_coord_holder_{view}", args=[holder_id("rw", name.encode())])


# -- the listing -----------------------------------------------------------------------------------
def test_the_listing_reads_readers_their_mode_and_count_and_the_queued_writer(redis_client, spawn):
    (first, second), writer = readers_and_a_writer(spawn, redis_client, "catalog")
    Lock(redis_client, "catalog:lock", timeout=60).acquire()
    listing = HolderListing(redis_client)
    holders = listing.holders(kind="rw")
    assert [(h.short_name, h.mode, h.fence, h.pid) for h in holders] == [
        ("catalog", "read", first.fence, first.pid), ("catalog", "read", second.fence, second.pid)]
    assert {(h.used, h.limit, h.usage, h.kind_summary) for h in holders} == {(2, None, "2 readers", "rw read")}
    assert [h.id for h in holders] == [f"{holder_id('rw', b'catalog')}.{h.fence}" for h in holders]
    assert {h.kind for h in listing.holders()} == {"rw", "lock"}
    [waiter] = listing.waiters("catalog", "rw")
    assert waiter.mode == "write" and waiter.label == "writer" and waiter.pid == writer.pid
    assert holders[0].role_details[0] == ("mode", "read") and holders[0].as_dict()["mode"] == "read"


# -- manage.py locks -------------------------------------------------------------------------------
def test_locks_list_show_and_waiters_show_the_mode_and_the_readers_count(redis_client, spawn):
    (first, second), writer = readers_and_a_writer(spawn, redis_client, "prices")
    out = run("list")
    rows = [line for line in out.splitlines() if line.startswith("prices")]
    assert len(rows) == 2 and all("rw read" in row and "2 readers" in row for row in rows)
    assert "2 holder(s): 0 lock(s), 0 semaphore permit(s), 2 read-write lock hold(s)" in out
    data = json.loads(run("list", "--json", "--kind", "rw"))
    for item in data:
        validate(item, HOLDER_JSON_SCHEMA)
    assert [(item["kind"], item["mode"], item["fence"]) for item in data] == [
        ("rw", "read", first.fence), ("rw", "read", second.fence)]
    shown = run("show", "prices")  # found without --kind: neither a lock nor a semaphore holds it
    assert shown.startswith("Read-write lock 'prices'") and "held by: 2 readers" in shown
    assert len(re.findall(r"^  mode +read$", shown, re.M)) == 2 and "waiting: 1" in shown
    waiters = run("waiters", "prices", "--kind", "rw")
    assert waiters.splitlines()[0].split()[:2] == ["#", "MODE"] and " write " in waiters.splitlines()[1]
    [waiter] = json.loads(run("waiters", "prices", "--kind", "rw", "--json"))
    assert waiter["mode"] == "write" and waiter["owner"]["pid"] == writer.pid
    assert json.loads(run("show", "prices", "--json"))["kind"] == "rw"


def test_locks_release_takes_readers_back_one_by_one_and_the_writer_gets_in(redis_client, spawn):
    (first, second), writer = readers_and_a_writer(spawn, redis_client, "stock")
    error = fails("release", "stock", "--kind", "rw", "--noinput")
    assert error.returncode == EXIT_USAGE and "has 2 holds" in str(error) and str(first.fence) in str(error)
    out = run("release", "stock", "--kind", "rw", "--fence", str(first.fence), "--noinput")
    assert f"Released Read-write lock 'stock' (read hold), fence {first.fence}" in out
    # The other reader still holds: the writer waits on, and the message says so.
    assert "1 caller still waiting behind the other holds." in out and "nobody" not in out
    assert first.finish() == "LOST"
    out = run("release", "stock", "--fence", str(second.fence), "--noinput")  # found without --kind
    assert "handed to the next waiter" in out
    assert writer.wait_held() > second.fence
    assert second.finish() == "LOST" and writer.finish() == "RELEASED"


def test_the_bulk_release_takes_the_holds_of_one_process(redis_client, spawn):
    stuck = spawn("feeds", timeout=60, mode="read", label="import feeds")
    other = spawn("feeds", timeout=60, mode="read", label="import feeds")
    dry = run("release", "--pid", str(stuck.pid), "--kind", "rw")
    assert "1 hold(s) match" in dry and "Dry run" in dry and len(HolderListing(redis_client).holder("feeds", "rw")) == 2
    out = run("release", "--pid", str(stuck.pid), "--kind", "rw", "--yes")
    assert "(read hold)" in out and "1 of 1 hold(s) released" in out
    assert [h.pid for h in HolderListing(redis_client).holder("feeds", "rw")] == [other.pid]
    assert stuck.finish() == "LOST" and other.finish() == "RELEASED"


def test_force_release_of_the_writer_lets_every_reader_queued_behind_it_in_at_once(redis_client, spawn):
    writer = spawn("ledger", timeout=60, mode="write", auto_renew=True)
    readers = [spawn("ledger", timeout=60, mode="read", wait=False) for _ in range(3)]
    wait_for(lambda: len(HolderListing(redis_client).waiters("ledger", "rw")) == 3)
    result = HolderListing(redis_client).force_release("ledger", "rw", expected_fence=writer.fence)
    assert result.released and result.handed_off
    fences = [reader.wait_held() for reader in readers]
    assert min(fences) > result.fence_after > writer.fence
    assert writer.expect("LOSS-SIGNAL") and writer.finish() == "LOST"
    assert [reader.finish() for reader in readers] == ["RELEASED"] * 3


def test_force_release_with_kind_rw_never_touches_another_kind_s_name(redis_client):
    lock = Lock(redis_client, "taken", timeout=60)
    lock.acquire()
    pool = Semaphore(redis_client, "pool", limit=2, timeout=60)
    pool.acquire()
    before = snapshot(redis_client)
    listing = HolderListing(redis_client)
    for name, fence in (("taken", lock.fence), ("pool", pool.fence), ("nothing", 1)):
        assert listing.holder(name, "rw") == []
        result = listing.force_release(name, "rw", expected_fence=fence)
        assert not result.released and result.was_free
    assert snapshot(redis_client) == before and lock.owned()
    # A semaphore's permits and a read-write lock's holds share the layout, not their records.
    shared = ReadWriteLock(redis_client, "both", timeout=60)
    assert shared.read.acquire()
    assert semaphore_holders(redis_client, "both") == [] and rwlock_holders(redis_client, "pool") == []
    assert listing.holder("both", "sem") == [] and [h.mode for h in listing.holder("both", "rw")] == ["read"]
    for fence in (True, "1", 1.0):
        with pytest.raises(Exception, match="expected_fence must be an int"):
            listing.force_release("taken", "rw", expected_fence=fence)


def test_locks_commands_refuse_hostile_names_and_escape_what_a_hold_says(redis_client):
    for args in (("show", "a:dcoord:rw:meta", "--kind", "rw"), ("waiters", "a:dcoord:b", "--kind", "rw"),
                 ("release", "a:dcoord:b", "--kind", "rw", "--fence", "1", "--noinput"),
                 ("show", "x" * (64 * 1024 + 1), "--kind", "rw")):
        assert fails(*args).returncode == EXIT_USAGE, args[:2]
    evil = ReadWriteLock(redis_client, "evil\x1b[2J", timeout=60, label="l\r\nforged\x1b]0;title\x07")
    assert evil.read.acquire()
    for out in (run("show", "evil\x1b[2J", "--kind", "rw"), run("list", "--kind", "rw"),
                run("release", "--label-prefix", "l\r", "--kind", "rw")):
        assert "\x1b" not in out and "\r" not in out and "\x07" not in out
        assert "evil\\x1b[2J" in out and "l\\r\\nforged" in out
    error = fails("release", "evil\x1b[2J", "--kind", "rw", "--fence", str(evil.read.fence + 1), "--noinput")
    assert error.returncode == EXIT_CHANGED and evil.read.owned()
    assert fails("release", "evil\x1b[2J", "--kind", "rw", "--fence", "-1", "--noinput").returncode == EXIT_CHANGED
    assert evil.read.owned()


# -- the admin -------------------------------------------------------------------------------------
def test_admin_list_detail_and_release_of_one_reader(users, redis_client, spawn):
    (first, second), writer = readers_and_a_writer(spawn, redis_client, "report:7")
    client = client_for(users["staff_release"])
    page = client.get(reverse(CHANGELIST), {"kind": "rw"}).content.decode()
    assert page.count("Read-write lock <span class=\"mode\">(read)</span>") == 2 and "2 readers" in page
    assert "<strong>Read-write locks</strong>" in page
    detail = client.get(rw_url("detail", "report:7")).content.decode()
    assert f"Read hold with fence {first.fence}" in detail and f"Read hold with fence {second.fence}" in detail
    assert "held by: <strong id=\"usage\">2 readers</strong>" in detail
    assert re.search(r'<td class="mode">write</td>', detail)
    confirm = client.get(rw_url("release", "report:7"), {"fence": first.fence}).content.decode()
    assert "read hold of the read-write lock" in confirm and str(first.fence) in confirm
    form = dict(re.findall(r'<input type="hidden" name="(fence|hold)" value="([^"]*)"', confirm))
    # Another reader's fence with this one's digest names no hold: nothing released.
    wrong = client.post(rw_url("release", "report:7"), {**form, "fence": second.fence}, follow=True)
    assert "Nothing released" in wrong.content.decode()
    assert len(HolderListing(redis_client).holder("report:7", "rw")) == 2
    done = client.post(rw_url("release", "report:7"), form, follow=True).content.decode()
    assert f"Released read hold of read-write lock “report:7” (fence {first.fence})" in done
    assert "1 caller still waiting behind the other holds." in done and "nobody" not in done
    assert first.finish() == "LOST"
    [left] = HolderListing(redis_client).holder("report:7", "rw")
    assert left.fence == second.fence
    form = dict(re.findall(r'<input type="hidden" name="(fence|hold)" value="([^"]*)"',
                           client.get(rw_url("release", "report:7")).content.decode()))
    assert form["fence"] == str(second.fence)  # the one hold left is the one confirmed
    assert "it went to the next waiter" in client.post(rw_url("release", "report:7"), form,
                                                       follow=True).content.decode()
    assert writer.wait_held() > second.fence and second.finish() == "LOST"


def test_admin_bulk_release_of_read_write_holds(users, redis_client, spawn):
    stuck = spawn("exports", timeout=60, mode="read", label="export batch")
    Lock(redis_client, "exports:lock", timeout=60, label="export batch").acquire()
    client = client_for(users["superuser"])
    page = client.get(reverse(BULK), {"label_prefix": "export", "kind": "rw"}).content.decode()
    [hold] = bulk_form(page)
    assert "Read-write lock (read)" in page and hold.startswith(holder_id("rw", b"exports") + " ")
    done = client.post(reverse(BULK), {"hold": hold}, follow=True).content.decode()
    assert "Released 1 hold: “exports”" in done and stuck.finish() == "LOST"
    assert redis_client.exists("exports:lock")


def test_admin_refuses_hostile_read_write_ids_and_forms(users, redis_client):
    shared = ReadWriteLock(redis_client, "guarded", timeout=60)
    assert shared.read.acquire()
    Lock(redis_client, "plain", timeout=60).acquire()
    client = client_for(users["superuser"])
    for name in (b"a:dcoord:rw:meta", b"x" * (64 * 1024 + 1)):
        for view in ("detail", "release"):
            url = reverse(f"admin:django_redis_coord_holder_{view}", args=[holder_id("rw", name)])
            assert client.get(url).status_code == 404, (view, name[:20])
    for fields in ({}, {"fence": "x", "hold": "0" * 32}, {"fence": str(shared.read.fence)},
                   {"fence": f"{shared.read.fence}.0", "hold": "0" * 32}):
        assert client.post(rw_url("release", "guarded"), fields).status_code == 400, fields
    before = snapshot(redis_client)
    # The right fence with a made-up digest, or a lock's name under the kind rw: nothing released.
    for url, fence in ((rw_url("release", "guarded"), shared.read.fence), (rw_url("release", "plain"), 1)):
        response = client.post(url, {"fence": str(fence), "hold": "0" * 32}, follow=True)
        assert "Nothing released" in response.content.decode()
    assert client.get(rw_url("detail", "plain")).status_code == 404  # a lock is no read-write lock
    [good] = bulk_form(client.get(reverse(BULK), {"pid": str(__import__("os").getpid()),
                                                  "kind": "rw"}).content.decode())
    id_, fence, digest = good.split()
    for hold in (f"{id_} {fence} {'f' * 32}", f"{holder_id('rw', b'plain')} {fence} {digest}",
                 f"{id_}.{fence} {fence} {digest}"):
        response = client.post(reverse(BULK), {"hold": hold}, follow=True)
        assert response.status_code in (200, 400)
        assert "Released" not in response.content.decode()
    assert snapshot(redis_client) == before and shared.read.owned()


def test_force_releases_leave_only_keys_that_expire(redis_client):
    from django_redis_coord.core.queue.rules import META_RETENTION_MS
    from tests.support.expiry import keys_without_expiry, longest_ttl

    endless = ReadWriteLock(redis_client, "endless", timeout=None)  # held for ever by a process that died
    assert endless.write.acquire()
    waiter = ReadWriteLock(redis_client, "endless", timeout=5)
    assert not waiter.read.acquire(blocking_timeout=0.05)  # queued, then gave up
    assert keys_without_expiry(redis_client) != []  # a hold without expiry keeps its keys
    listing = HolderListing(redis_client)
    assert listing.force_release("endless", "rw", expected_fence=endless.write.fence).released
    readers = [ReadWriteLock(redis_client, "pair", timeout=30) for _ in range(2)]
    for reader in readers:
        assert reader.read.acquire()
    assert listing.force_release("pair", "rw", expected_fence=readers[0].read.fence).released
    assert redis_client.zcard("pair") == 1 and listing.holders(kind="rw")[0].fence == readers[1].read.fence
    assert listing.force_release("pair", "rw", expected_fence=readers[1].read.fence).released
    assert listing.entries() == [] and not redis_client.exists("endless", "pair")
    assert keys_without_expiry(redis_client) == []
    assert longest_ttl(redis_client) <= META_RETENTION_MS
