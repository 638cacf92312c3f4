"""Fenced writes: the protected resource itself refuses a holder whose lock has moved on.

A lock alone cannot stop a holder that was paused (GC, swap, a slow network) past its TTL from
writing after the next holder got in.  Every grant carries a fence token that is greater than
every fence issued before for that name, so the resource can compare: a write carrying a fence
lower than the last one it accepted comes from a stale holder and is refused.

* :func:`fenced_update` does it for a database row: the ``UPDATE ... SET fence = %s, ...`` that
  writes the row carries ``fence <= %s`` in its own ``WHERE``, on the table holding the fence
  column, so the comparison and the write are atomic in the database; it returns whether it
  applied.  The values must be columns of that same table (with multi-table inheritance, a
  parent's or a child's fields are refused).
* :func:`fenced_set` / :func:`fenced_get` do it for a value in Redis (one Lua script each,
  ``lua/fenced_set.lua`` and ``lua/fenced_get.lua``).  For a read-modify-write, read with your
  fence (``fenced_get(key, lock.fence)``): the read records it, so a stale holder's write cannot
  land between your read and your write.

A holder paused past its TTL cannot overwrite the newer holder's row::

    from django_redis_coord import fenced_update, lock

    first = lock("account:7", timeout=5)
    first.acquire()
    stale_fence = first.fence
    # ... first is paused for more than 5 s; its lock expires ...
    second = lock("account:7", timeout=5)
    second.acquire()
    fenced_update(Account.objects.filter(pk=7), second.fence, balance=200)   # True
    # first wakes up and writes what it computed before the pause:
    fenced_update(Account.objects.filter(pk=7), stale_fence, balance=100)    # False: refused

The model needs an integer column for the fence (``models.BigIntegerField(default=0)``: fences
are microsecond-scale integers, larger than 2^31).  A write with the same fence as the last one is
accepted: it is the same holder writing again (fences are never issued twice).

This module imports Django only when a row is updated; the Redis helpers work anywhere.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from ..core.arguments import check_number, to_ms
from ..core.exceptions import InvalidLockArgument, InvalidLockArgumentType, StaleFenceError
from ..core.keys import encode_name
from ..core.scripts import async_scripts, sync_scripts

#: How long the fence record a fenced read leaves on a key holding nothing yet is kept (ms), when
#: the reader never writes (a write sets the key's own expiry).
READ_RECORD_MS = 24 * 3600 * 1000

__all__ = ["fenced_update", "afenced_update", "fenced_set", "afenced_set", "fenced_get", "afenced_get"]

#: Fences are compared as Lua numbers (doubles) in Redis: exact below 2^53.
MAX_FENCE = 2**53 - 1


def check_fence(fence: object) -> int:
    """Refuse anything but a non-negative integer fence (``None`` means no hold)."""
    if fence is None:
        raise InvalidLockArgumentType("fence is None: the write is not made under a hold")
    if isinstance(fence, bool) or not isinstance(fence, int):
        raise InvalidLockArgumentType(f"fence must be an int, not {type(fence).__name__}")
    if fence < 0 or fence > MAX_FENCE:
        raise InvalidLockArgument(f"fence must be between 0 and 2**53 - 1, got {fence}")
    return fence


# -- database rows -------------------------------------------------------------------------------
def _check_update(queryset: Any, fence: int, field: str, values: dict[str, Any]) -> Any:
    """Validate a fenced update before any query; return the model whose table holds ``field``.

    Every name in ``values`` must be a column of that same table: the fence comparison and every
    write it guards then fit in one single-table ``UPDATE``.
    """
    from django.core.exceptions import FieldDoesNotExist

    check_fence(fence)
    if not isinstance(field, str) or not field:
        raise InvalidLockArgumentType("field must be the name of the fence column")
    if field in values:
        raise InvalidLockArgument(f"{field!r} is set to the fence; do not pass it among the values")
    if getattr(getattr(queryset, "query", None), "is_sliced", False):
        raise InvalidLockArgumentType("cannot update a sliced queryset: filter it instead")
    opts = queryset.model._meta

    def column(name: str, what: str) -> Any:
        try:
            found = opts.get_field(name)
        except FieldDoesNotExist:
            raise InvalidLockArgument(f"{queryset.model.__name__} has no field {name!r} ({what})") from None
        if not getattr(found, "concrete", False) or found.many_to_many or getattr(found, "column", None) is None:
            raise InvalidLockArgument(f"{queryset.model.__name__}.{name} is not a column ({what})")
        return found

    target = column(field, "the fence column").model._meta.concrete_model
    table = target._meta.db_table
    for name in values:
        owner = column(name, "a value to write").model._meta.concrete_model
        if owner is not target:
            raise InvalidLockArgument(
                f"{name!r} is a column of table {owner._meta.db_table!r}, but the fence {field!r} is in table "
                f"{table!r}: a fenced update writes only the table holding the fence, in the same UPDATE "
                f"that compares it (give {owner._meta.db_table!r} its own fence column and update it apart)"
            )
    return target


def _single_table(queryset: Any) -> bool:
    """Whether Django compiles ``queryset.update()`` to one UPDATE of one table with the whole WHERE.

    Django's own test (``SQLUpdateCompiler.pre_sql_setup``): one active table and no parent-table
    values (:func:`_check_update` allows none).  Otherwise it moves the filter into a sub-select
    (or, on MySQL, a SELECT run before), where a condition is not re-checked against the row the
    UPDATE writes.
    """
    query = queryset.query.clone()
    try:
        query.get_initial_alias()
        return int(query.count_active_tables()) == 1
    except AttributeError:  # Query internals changed: take the path that is safe everywhere
        return False


def _key_lookup(model: Any, target: Any) -> str:
    """The lookup giving, for a row of ``model``, the primary key of its row in ``target``'s table."""
    path = model._meta.get_path_to_parent(target)
    if all(step.join_field.primary_key for step in path):
        return "pk"
    return "__".join(step.join_field.name for step in path) + "__pk"


def _plan(queryset: Any, fence: int, field: str, values: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``(direct, keys, target)``: the queryset to update as it is, or the target primary keys' query."""
    from django.db import router

    target = _check_update(queryset, fence, field, values)
    if target is queryset.model._meta.concrete_model:
        direct = queryset.filter(**{f"{field}__lte": fence})
        if _single_table(direct):
            return direct, None, target
    # Read the keys where the UPDATE will run (the write database, not a replica).
    alias = getattr(queryset, "_db", None) or router.db_for_write(queryset.model)
    keys = queryset.using(alias).values_list(_key_lookup(queryset.model, target), flat=True)
    return None, keys, target


def _fenced_rows(target: Any, keys: list[Any], alias: str, field: str, fence: int) -> Any:
    """The rows of ``target``'s own table with those keys whose fence is not newer than ``fence``.

    No join and no parent-table value: Django compiles its ``update()`` to one single-table
    ``UPDATE ... WHERE pk IN (...) AND field <= fence`` on every backend.
    """
    return target._base_manager.using(alias).filter(pk__in=keys, **{f"{field}__lte": fence})


def fenced_update(queryset: Any, fence: int, field: str = "fence", **values: Any) -> bool:
    """Update the rows of ``queryset`` with ``values`` and ``field = fence``, unless a newer fence wrote.

    The comparison ``field <= fence`` is in the ``WHERE`` of the very ``UPDATE`` that writes each
    row, on the table holding ``field``: the compare-and-write is atomic in the database, without a
    transaction around it.  When ``queryset`` compiles to a single-table ``UPDATE`` that is all it
    runs.  When it does not (a filter joining other tables, ``field`` stored in a parent table
    with multi-table inheritance), the primary keys of the matching rows are read first and the
    ``UPDATE`` runs on the fence's table alone, ``WHERE pk IN (...) AND field <= fence``; the
    queryset's other conditions are then those of that read.

    Every name in ``values`` must be a column of the table holding ``field`` (with multi-table
    inheritance, fields of a parent or child table are refused with
    :class:`~django_redis_coord.exceptions.InvalidLockArgument`, as is an unknown field, before
    any query).  Returns True when at least one row was updated, False when every matching row
    carries a newer fence (or none matched).
    """
    direct, keys, target = _plan(queryset, fence, field, values)
    writes = {field: fence, **values}
    if direct is not None:
        return bool(direct.update(**writes) > 0)
    found = list(dict.fromkeys(keys))
    if not found:
        return False
    return bool(_fenced_rows(target, found, keys.db, field, fence).update(**writes) > 0)


async def afenced_update(queryset: Any, fence: int, field: str = "fence", **values: Any) -> bool:
    """The asyncio form of :func:`fenced_update` (``QuerySet.aupdate``), with the same rule."""
    direct, keys, target = _plan(queryset, fence, field, values)
    writes = {field: fence, **values}
    if direct is not None:
        return bool(await direct.aupdate(**writes) > 0)
    found = list(dict.fromkeys([key async for key in keys]))
    if not found:
        return False
    return bool(await _fenced_rows(target, found, keys.db, field, fence).aupdate(**writes) > 0)


# -- Redis values --------------------------------------------------------------------------------
Value = Union[str, bytes, int, float]


def _set_args(key: Union[str, bytes], value: Value, fence: int, ttl: Optional[float]) -> tuple[bytes, tuple]:
    raw = encode_name(key)
    check_fence(fence)
    if isinstance(value, bool) or not isinstance(value, (str, bytes, int, float)):
        raise InvalidLockArgumentType(f"value must be str, bytes or a number, not {type(value).__name__}")
    # The bounds of every duration (finite, > 0, at most ten years), checked before anything is written.
    check_number("ttl", ttl, allow_none=True, positive=True, lock_name=key)
    ttl_ms = to_ms(ttl) if ttl is not None else 0
    return raw, (fence, value, ttl_ms)


def _default_client(key: Union[str, bytes], asyncio: bool) -> tuple[Any, Union[str, bytes]]:
    from ..config.connection import get_async_client, get_client
    from ..config.settings import prefixed

    return (get_async_client() if asyncio else get_client()), prefixed(key)


def fenced_set(
    key: Union[str, bytes], value: Value, fence: int, *, client: Any = None, ttl: Optional[float] = None
) -> bool:
    """Store ``value`` at ``key`` unless a holder with a newer fence stored one; True when stored.

    ``key`` is a hash holding the value and the highest fence that wrote it.  Without ``client``
    the configured Redis and ``KEY_PREFIX`` are used (Django settings).  ``ttl`` (seconds) expires
    the value *and* its fence memory: after that, any fence is accepted again.  A ``ttl`` that is
    not a finite number of seconds above 0 and at most ten years raises
    :class:`~django_redis_coord.exceptions.InvalidLockArgument`
    (:class:`~django_redis_coord.exceptions.InvalidLockArgumentType` for a non-number) before
    anything is written.
    """
    if client is None:
        client, key = _default_client(key, asyncio=False)
    raw, args = _set_args(key, value, fence, ttl)
    script = sync_scripts.get(client, "fenced_set")
    return int(script((raw,), args, client=client)[0]) == 1


async def afenced_set(
    key: Union[str, bytes], value: Value, fence: int, *, client: Any = None, ttl: Optional[float] = None
) -> bool:
    """The asyncio form of :func:`fenced_set`."""
    if client is None:
        client, key = _default_client(key, asyncio=True)
    raw, args = _set_args(key, value, fence, ttl)
    script = async_scripts.get(client, "fenced_set")
    return int((await script((raw,), args, client=client))[0]) == 1


def _parse(reply: Any) -> tuple[Optional[bytes], Optional[int]]:
    value, fence = reply
    if isinstance(value, str):
        value = value.encode()
    return value, (int(fence) if fence is not None else None)


def _read_args(key: Union[str, bytes], fence: Optional[int]) -> bytes:
    raw = encode_name(key)
    if fence is not None:
        check_fence(fence)
    return raw


def _fenced_reply(key: Union[str, bytes], fence: int, reply: Any) -> tuple[Optional[bytes], Optional[int]]:
    accepted, value, highest = reply
    if not int(accepted):
        raise StaleFenceError(
            f"fence {fence} is older than {int(highest)}, already seen at {key!r}",
            fence=fence, highest=int(highest), lock_name=key,
        )
    return _parse((value or None, highest))


def fenced_get(
    key: Union[str, bytes], fence: Optional[int] = None, *, client: Any = None
) -> tuple[Optional[bytes], Optional[int]]:
    """``(value, fence)`` stored by :func:`fenced_set` (``(None, None)`` when nothing is).

    Pass the reader's ``fence`` for a read-modify-write: the read then records it, so that a
    stale holder's write can no longer land between this read and the reader's own write, and
    raises :class:`~django_redis_coord.exceptions.StaleFenceError` when a newer holder has already read or written.
    """
    if client is None:
        client, key = _default_client(key, asyncio=False)
    raw = _read_args(key, fence)
    if fence is None:
        return _parse(client.hmget(raw, "value", "fence"))
    script = sync_scripts.get(client, "fenced_get")
    return _fenced_reply(key, fence, script((raw,), (fence, READ_RECORD_MS), client=client))


async def afenced_get(
    key: Union[str, bytes], fence: Optional[int] = None, *, client: Any = None
) -> tuple[Optional[bytes], Optional[int]]:
    """The asyncio form of :func:`fenced_get`."""
    if client is None:
        client, key = _default_client(key, asyncio=True)
    raw = _read_args(key, fence)
    if fence is None:
        return _parse(await client.hmget(raw, "value", "fence"))
    script = async_scripts.get(client, "fenced_get")
    return _fenced_reply(key, fence, await script((raw,), (fence, READ_RECORD_MS), client=client))
