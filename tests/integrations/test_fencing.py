"""Fenced writes: a holder paused past its TTL cannot overwrite what the newer holder wrote."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import contextmanager

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, models
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_redis_coord import fenced_update, lock
from django_redis_coord.core.exceptions import InvalidLockArgument, InvalidLockArgumentType
from django_redis_coord.integrations.fencing import afenced_get, afenced_set, afenced_update, fenced_get, fenced_set
from tests.support.procs import run_processes
from tests.testapp.models import Account


def stale_and_fresh(name: str) -> tuple[int, int]:
    """A holder whose lock expired while it was paused, and the holder that got in after it."""
    first = lock(name, timeout=0.2)
    assert first.acquire(blocking=False)
    stale = first.fence
    time.sleep(0.35)  # "paused" past the TTL
    second = lock(name, timeout=10)
    assert second.acquire(blocking=False), "the expired hold must not block the next holder"
    assert second.fence > stale
    return stale, second.fence


@pytest.mark.django_db
def test_stale_holder_cannot_overwrite_the_newer_holders_row(redis_client):
    account = Account.objects.create(name="a", balance=0)
    rows = Account.objects.filter(pk=account.pk)
    stale, fresh = stale_and_fresh("account:a")
    assert fenced_update(rows, fresh, balance=200) is True
    assert fenced_update(rows, stale, balance=100) is False
    account.refresh_from_db()
    assert (account.balance, account.fence) == (200, fresh)
    # The same holder may write again under its fence; a newer one still wins afterwards.
    assert fenced_update(rows, fresh, balance=250) is True
    assert Account.objects.get(pk=account.pk).balance == 250


@pytest.mark.django_db(transaction=True)
def test_fenced_update_async_and_custom_field(redis_client):
    account = Account.objects.create(name="b", balance=0)
    rows = Account.objects.filter(pk=account.pk)
    stale, fresh = stale_and_fresh("account:b")

    async def writes():
        return (
            await afenced_update(rows, fresh, field="version", balance=7),
            await afenced_update(rows, stale, field="version", balance=8),
        )

    assert asyncio.run(writes()) == (True, False)
    account.refresh_from_db()
    assert (account.balance, account.version, account.fence) == (7, fresh, 0)


@pytest.mark.django_db
def test_view_writes_with_its_lock_fence_and_the_paused_holder_is_refused(redis_client):
    Account.objects.create(name="v", balance=0)
    paused = lock("fenced:v", timeout=0.2)
    assert paused.acquire(blocking=False)
    time.sleep(0.35)  # paused past its TTL: the next request gets the lock
    assert Client().get("/t/fenced/v/", {"balance": 5}).content == b"applied"
    assert not fenced_update(Account.objects.filter(name="v"), paused.fence, balance=-1)
    row = Account.objects.get(name="v")
    assert row.balance == 5 and row.fence > paused.fence


def test_bad_fences_are_refused_before_any_write(redis_client):
    rows = Account.objects.none()
    cases = [
        (None, InvalidLockArgumentType),
        ("5", InvalidLockArgumentType),
        (True, InvalidLockArgumentType),
        (-1, InvalidLockArgument),
        (2**53, InvalidLockArgument),
    ]
    for fence, error in cases:
        with pytest.raises(error):
            fenced_update(rows, fence, balance=1)
        with pytest.raises(error):
            fenced_set("value", "x", fence, client=redis_client)
    with pytest.raises(InvalidLockArgument, match="version"):
        fenced_update(rows, 5, field="version", version=3)
    assert redis_client.dbsize() == 0


# -- the Redis-side fenced value -----------------------------------------------------------------
def test_fenced_set_refuses_a_stale_holder(redis_client):
    stale, fresh = stale_and_fresh("report")
    assert fenced_set("report:value", "fresh", fresh, client=redis_client)
    assert not fenced_set("report:value", "stale", stale, client=redis_client)
    assert fenced_get("report:value", client=redis_client) == (b"fresh", fresh)


def test_fenced_set_with_the_configured_client_and_prefix(redis_client, settings, redis_url):
    settings.DJANGO_REDIS_COORD = {"URL": redis_url, "KEY_PREFIX": "shop"}
    assert fenced_set("cart", "1", 10, ttl=30)
    assert not fenced_set("cart", "0", 9)
    assert fenced_get("cart") == (b"1", 10)
    assert redis_client.hget("shop:cart", "value") == b"1"
    assert 0 < redis_client.pttl("shop:cart") <= 30000

    async def scenario():
        return await afenced_set("cart", "2", 11), await afenced_set("cart", "x", 3), await afenced_get("cart")

    assert asyncio.run(scenario()) == (True, False, (b"2", 11))


def _paused_writer(name: str, pause: float):
    """Take the lock, compute, stall past the TTL, then try to write."""
    holder = lock(name, timeout=0.3)
    assert holder.acquire(blocking=True, blocking_timeout=10)
    fence = holder.fence
    time.sleep(pause)
    return fence, fenced_set(f"{name}:value", f"written by {fence}", fence)


def test_paused_process_is_fenced_out_by_the_next_process(redis_client):
    # The first process stalls for 1 s with a 0.3 s lock; the second starts 0.5 s later, finds
    # the lock expired, and writes at once.  The first one's late write must be refused.
    def staggered(name, pause, delay):
        time.sleep(delay)
        return _paused_writer(name, pause)

    results = run_processes(staggered, [("job", 1.0, 0.0), ("job", 0.0, 0.5)])
    (early_fence, early_ok), (late_fence, late_ok) = sorted(results, key=lambda r: r[0])
    assert early_fence < late_fence
    assert late_ok is True and early_ok is False
    assert fenced_get("job:value", client=redis_client) == (f"written by {late_fence}".encode(), late_fence)


def test_a_fenced_read_shuts_out_older_holders(redis_client):
    from django_redis_coord import StaleFenceError

    assert fenced_set("rmw", "v1", 10, client=redis_client)
    assert fenced_get("rmw", 12, client=redis_client) == (b"v1", 12)  # the newer holder reads
    # An older holder can neither read nor write any more, although the newer one has not written.
    assert not fenced_set("rmw", "stale", 11, client=redis_client)
    with pytest.raises(StaleFenceError) as info:
        fenced_get("rmw", 11, client=redis_client)
    assert (info.value.fence, info.value.highest) == (11, 12)
    assert fenced_set("rmw", "v2", 12, client=redis_client)
    assert fenced_get("rmw", client=redis_client) == (b"v2", 12)


def test_a_fenced_read_of_a_missing_key_leaves_a_record_that_expires(redis_client):
    assert fenced_get("rmw:new", 5, client=redis_client) == (None, 5)
    assert 0 < redis_client.pttl("rmw:new") <= 24 * 3600 * 1000  # not kept for ever if never written
    assert not fenced_set("rmw:new", "stale", 4, client=redis_client)  # still shuts out older holders
    assert fenced_set("rmw:new", "v", 5, client=redis_client)
    assert redis_client.pttl("rmw:new") == -1  # the write's own expiry (none) applies
    assert fenced_get("rmw:new", 6, client=redis_client) == (b"v", 6)
    assert redis_client.pttl("rmw:new") == -1  # a read of a stored value changes no expiry


# -- rows spread over several tables -------------------------------------------------------------
class FencedParent(models.Model):
    """Multi-table inheritance: the fence and the balance live in the parent's table."""

    fence = models.BigIntegerField(default=0)
    balance = models.IntegerField(default=0)

    class Meta:
        app_label = "testapp"


class FencedChild(FencedParent):
    note = models.CharField(max_length=20, default="")
    version = models.BigIntegerField(default=0)  # a fence column in the child's own table

    class Meta:
        app_label = "testapp"


class FencedSideChild(FencedParent):
    """A child whose own primary key is not its link to the parent: the two keys differ."""

    code = models.BigAutoField(primary_key=True)
    parent = models.OneToOneField(FencedParent, parent_link=True, on_delete=models.CASCADE, related_name="+")

    class Meta:
        app_label = "testapp"


class FencedOwner(models.Model):
    name = models.CharField(max_length=20)

    class Meta:
        app_label = "testapp"


class FencedEntry(models.Model):
    """A single-table row, filtered through a join on its owner."""

    owner = models.ForeignKey(FencedOwner, on_delete=models.CASCADE)
    fence = models.BigIntegerField(default=0)
    balance = models.IntegerField(default=0)

    class Meta:
        app_label = "testapp"


TABLE_MODELS = (FencedParent, FencedChild, FencedSideChild, FencedOwner, FencedEntry)


@pytest.fixture(scope="module")
def fence_tables(django_db_setup, django_db_blocker):
    """The tables of the models above (created with the test database, or here if it predates them)."""
    with django_db_blocker.unblock():
        existing = set(connection.introspection.table_names())
        missing = [model for model in TABLE_MODELS if model._meta.db_table not in existing]
        if missing:
            with connection.schema_editor() as editor:
                for model in missing:
                    editor.create_model(model)


class Race:
    """What :func:`newer_write_before_the_update` saw: the newer write's result, the block's SQL."""

    def __init__(self) -> None:
        self.newer: list[object] = []  # [result of the newer write] once it ran
        self.statements: list[str] = []  # the block's own statements (not the newer write's)
        self.injecting = False

    def updates(self) -> list[str]:
        return [sql for sql in self.statements if sql.lstrip().upper().startswith("UPDATE")]


@contextmanager
def newer_write_before_the_update(write, *, other_connection: bool = False):
    """Run ``write`` (the newer holder's write) just before the first UPDATE statement of the block.

    That is the moment a concurrent writer can slip in after the rows were chosen: the write
    lands, committed, before the block's UPDATE runs.  With ``other_connection`` it runs in a
    thread with its own database connection; otherwise on this connection (inside the test's
    transaction, which the UPDATE then sees just as it would see another connection's commit).
    """
    race = Race()

    def run_write() -> None:
        race.injecting = True
        try:
            race.newer.append(write())
        finally:
            race.injecting = False

    def in_thread() -> None:
        try:
            race.newer.append(write())
        finally:
            connection.close()

    def wrapper(execute, sql, params, many, context):
        if race.injecting:
            return execute(sql, params, many, context)
        if not race.newer and sql.lstrip().upper().startswith("UPDATE"):
            if other_connection:
                thread = threading.Thread(target=in_thread)
                thread.start()
                thread.join(30)
                assert race.newer, "the newer write did not finish"
            else:
                run_write()
        race.statements.append(sql % tuple(repr(p) for p in params) if params else sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield race


@pytest.mark.django_db(transaction=True)
def test_parent_table_fence_a_newer_write_between_the_key_read_and_the_update_wins(fence_tables):
    # The fence is in the parent's table: the keys are read first, then the parent is updated.
    # A newer holder writing (from another connection) between the two must not be overwritten.
    child = FencedChild.objects.create(fence=5, balance=0, note="orig")
    rows = FencedChild.objects.filter(pk=child.pk)
    with newer_write_before_the_update(lambda: fenced_update(rows, 20, balance=200), other_connection=True) as race:
        stale = fenced_update(rows, 10, balance=100)
    assert race.newer == [True], "the newer holder's write must have applied"
    assert stale is False, "the stale holder's write landed after the newer one"
    child.refresh_from_db()
    assert (child.fence, child.balance, child.note) == (20, 200, "orig")
    # The write is one UPDATE of the parent's table whose WHERE compares the fence.
    [sql] = race.updates()
    parent_table = FencedParent._meta.db_table
    assert sql.startswith(f'UPDATE "{parent_table}"') and f'"{parent_table}"."fence" <= 10' in sql
    assert "SELECT" not in sql.upper()


@pytest.mark.django_db
def test_parent_table_fence_same_rule_on_one_connection_and_without_a_race(fence_tables):
    child = FencedChild.objects.create(fence=5, note="orig")
    rows = FencedChild.objects.filter(note="orig")
    with newer_write_before_the_update(lambda: fenced_update(rows, 20, balance=200)) as race:
        assert fenced_update(rows, 10, balance=100) is False
    assert race.newer == [True]
    assert FencedParent.objects.filter(pk=child.pk, fence=20, balance=200).exists()
    # No race: the write applies, a same-fence write applies again, an older one is refused.
    assert fenced_update(rows, 30, balance=300) is True
    assert fenced_update(rows, 30, balance=301) is True
    assert fenced_update(rows, 29, balance=0) is False
    assert fenced_update(FencedChild.objects.filter(note="nobody"), 40, balance=1) is False
    child.refresh_from_db()
    assert (child.fence, child.balance) == (30, 301)


@pytest.mark.django_db
def test_child_table_fence_filtered_through_the_parent(fence_tables):
    # The fence ("version") is in the child's table; the filter needs the parent's table.
    child = FencedChild.objects.create(balance=7, note="orig", version=5)
    rows = FencedChild.objects.filter(balance=7)
    with newer_write_before_the_update(lambda: fenced_update(rows, 20, field="version", note="newer")) as race:
        stale = fenced_update(rows, 10, field="version", note="stale")
    assert race.newer == [True] and stale is False
    child.refresh_from_db()
    assert (child.version, child.note, child.fence) == (20, "newer", 0)
    [sql] = race.updates()
    child_table = FencedChild._meta.db_table
    assert sql.startswith(f'UPDATE "{child_table}"') and f'"{child_table}"."version" <= 10' in sql


@pytest.mark.django_db
def test_parent_link_that_is_not_the_primary_key(fence_tables):
    FencedParent.objects.create(fence=0)  # the child's own key and its parent's key now differ
    side = FencedSideChild.objects.create(fence=5, balance=1)
    other = FencedSideChild.objects.create(fence=5, balance=2)
    assert side.code != side.parent_id
    assert fenced_update(FencedSideChild.objects.filter(code=side.code), 10, balance=100) is True
    assert fenced_update(FencedSideChild.objects.filter(code=side.code), 9, balance=-1) is False
    side.refresh_from_db()
    other.refresh_from_db()
    assert (side.fence, side.balance) == (10, 100)
    assert (other.fence, other.balance) == (5, 2)  # only the chosen row was written


@pytest.mark.django_db
def test_values_on_another_table_than_the_fence_are_refused_with_nothing_written(fence_tables):
    child = FencedChild.objects.create(fence=5, balance=1, note="orig", version=5)
    rows = FencedChild.objects.filter(pk=child.pk)
    parent_table, child_table = FencedParent._meta.db_table, FencedChild._meta.db_table
    refused = [
        # fence in the parent's table, a value in the child's
        ({"note": "x"}, rf"'note' is a column of table '{child_table}'.*'fence' is in table '{parent_table}'"),
        ({"balance": 2, "note": "x"}, rf"'note' is a column of table '{child_table}'"),
        # fence in the child's table, a value in the parent's
        ({"field": "version", "balance": 2}, rf"'balance' is a column of table '{parent_table}'.*'{child_table}'"),
        ({"field": "missing", "balance": 2}, "no field 'missing'"),
        ({"balance": 2, "nope": 3}, "no field 'nope'"),
    ]
    for arguments, message in refused:
        with CaptureQueriesContext(connection) as queries:
            with pytest.raises(InvalidLockArgument, match=message):
                fenced_update(rows, 10, **arguments)
        assert queries.captured_queries == [], f"{arguments}: the database was queried before refusing"
    with pytest.raises(InvalidLockArgumentType, match="sliced"):
        fenced_update(FencedChild.objects.all()[:1], 10, balance=2)

    async def refused_async():
        with pytest.raises(InvalidLockArgument, match="'note' is a column"):
            await afenced_update(rows, 10, note="x")

    asyncio.run(refused_async())
    child.refresh_from_db()
    assert (child.fence, child.balance, child.note, child.version) == (5, 1, "orig", 5)


@pytest.mark.django_db
def test_single_table_rows_are_still_one_update(fence_tables):
    account = Account.objects.create(name="single", balance=0, fence=5)
    rows = Account.objects.filter(name="single")
    with newer_write_before_the_update(lambda: fenced_update(rows, 20, balance=200)) as race:
        stale = fenced_update(rows, 10, balance=100)
    assert race.newer == [True] and stale is False
    # Exactly the one statement it always was: the whole WHERE, the fence comparison included.
    assert len(race.statements) == 1, race.statements
    [sql] = race.statements
    table = Account._meta.db_table
    assert sql.startswith(f'UPDATE "{table}"') and f'"{table}"."fence" <= 10' in sql
    assert f'"{table}"."name" = ' in sql
    account.refresh_from_db()
    assert (account.fence, account.balance) == (20, 200)


@pytest.mark.django_db
def test_join_filter_puts_the_fence_in_the_update_itself(fence_tables):
    # A sub-select condition is not re-checked against the row the UPDATE writes (PostgreSQL reads
    # it once): the comparison must be in the UPDATE's own WHERE, not inside "id IN (SELECT ...)".
    owner = FencedOwner.objects.create(name="o")
    entry = FencedEntry.objects.create(owner=owner, fence=5)
    rows = FencedEntry.objects.filter(owner__name="o")
    with CaptureQueriesContext(connection) as queries:
        assert fenced_update(rows, 10, balance=100) is True
    [sql] = [query["sql"] for query in queries.captured_queries if query["sql"].startswith("UPDATE")]
    table = FencedEntry._meta.db_table
    assert f'"{table}"."fence" <= 10' in sql
    assert "SELECT" not in sql.upper(), sql
    assert fenced_update(rows, 9, balance=-1) is False
    entry.refresh_from_db()
    assert (entry.fence, entry.balance) == (10, 100)


@pytest.mark.django_db
def test_join_filter_on_a_backend_that_reads_the_keys_first(fence_tables, monkeypatch):
    # MySQL cannot select from the table it updates: Django reads the keys in a SELECT of their
    # own.  A newer write landing after that read must still win.
    monkeypatch.setattr(connection.features, "update_can_self_select", False)
    owner = FencedOwner.objects.create(name="mysql")
    entry = FencedEntry.objects.create(owner=owner, fence=5)
    rows = FencedEntry.objects.filter(owner__name="mysql")
    with newer_write_before_the_update(lambda: fenced_update(rows, 20, balance=200)) as race:
        stale = fenced_update(rows, 10, balance=100)
    assert race.newer == [True] and stale is False
    entry.refresh_from_db()
    assert (entry.fence, entry.balance) == (20, 200)


@pytest.mark.django_db(transaction=True)
def test_afenced_update_follows_the_same_rule(fence_tables):
    child = FencedChild.objects.create(fence=5, note="orig")
    rows = FencedChild.objects.filter(pk=child.pk)

    async def scenario():
        # The async ORM runs its queries in one worker thread: watch that thread's connection.
        watcher = newer_write_before_the_update(lambda: fenced_update(rows, 20, balance=200))
        race = await sync_to_async(watcher.__enter__)()
        try:
            stale = await afenced_update(rows, 10, balance=100)
        finally:
            await sync_to_async(watcher.__exit__)(None, None, None)
        after = await afenced_update(rows, 30, balance=300), await afenced_update(rows, 25, balance=0)
        return race, stale, after

    race, stale, after = asyncio.run(scenario())
    assert race.newer == [True] and stale is False
    assert after == (True, False)
    child.refresh_from_db()
    assert (child.fence, child.balance) == (30, 300)


def test_fenced_set_refuses_a_ttl_any_other_duration_refuses_before_writing(redis_client, async_redis):
    ten_years_and_a_day = 10 * 365 * 24 * 3600 + 86400
    for ttl in (1e300, float("inf"), float("nan"), ten_years_and_a_day, 0, -1):
        with pytest.raises(InvalidLockArgument):
            fenced_set("ttl:bad", "v", 5, client=redis_client, ttl=ttl)
        assert redis_client.exists("ttl:bad") == 0, ttl
    for ttl in ("30", True):
        with pytest.raises(InvalidLockArgumentType):
            fenced_set("ttl:bad", "v", 5, client=redis_client, ttl=ttl)

    async def scenario():
        client = async_redis()
        with pytest.raises(InvalidLockArgument):
            await afenced_set("ttl:bad", "v", 5, client=client, ttl=1e300)
        await client.aclose()

    asyncio.run(scenario())
    assert redis_client.exists("ttl:bad") == 0
    # The longest duration accepted anywhere is accepted here too.
    assert fenced_set("ttl:ok", "v", 5, client=redis_client, ttl=10 * 365 * 24 * 3600)
    assert redis_client.pttl("ttl:ok") > 0
