"""A typed user module: the public names the README and docs use, as a project would use them.

Never run: tests/test_typing.py has mypy check it with ``--strict``.
"""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio

import django_redis_coord.asyncio as coord_asyncio
from django_redis_coord import (
    CoordError,
    DurableLock,
    HolderInfo,
    IdentityLock,
    Lock,
    LockError,
    LockLostError,
    QuorumUnavailable,
    Redlock,
    Semaphore,
    TransactionConflict,
    aget_or_set,
    fenced_get,
    fenced_set,
    get_or_set,
    holders,
    lock,
    lock_holder,
    lock_holders,
    locked,
    optimistic,
    semaphore,
)
from django_redis_coord.exceptions import ReplicationNotAcknowledged, UnsupportedCacheBackend
from django_redis_coord.testing import RedisServer, settings_for


def close_month(client: redis.Redis) -> int | None:
    with Lock(client, "invoices:close-month", timeout=30, auto_renew=True) as held:
        held.ensure_valid()
        fence: int | None = held.fence
    return fence


def thumbnails(client: redis.Redis) -> bool:
    permits = Semaphore(client, "thumbnails", limit=4, timeout=30)
    if not permits.acquire(blocking=True, blocking_timeout=5):
        return False
    try:
        return permits.valid
    finally:
        permits.release()


def report(masters: list[redis.Redis]) -> None:
    try:
        with Redlock(masters, "report", timeout=10):
            pass
    except QuorumUnavailable as exc:
        print(sorted(exc.failures))
    except LockLostError:
        pass


def payouts(client: redis.Redis) -> int:
    try:
        with DurableLock(client, "payouts", timeout=30, replicas=1) as held:
            return held.confirm()
    except ReplicationNotAcknowledged as exc:
        return exc.acknowledged


def who_holds(client: redis.Redis, name: str) -> list[str]:
    holder: HolderInfo | None = lock_holder(client, name)
    everyone: list[HolderInfo] = lock_holders(client, name) + holders.semaphore_holders(client, name)
    return [info.masked_token for info in everyone] + ([holder.name] if holder else [])


def identity(client: redis.Redis) -> bool:
    return IdentityLock(client, "import").acquire("worker-1", timeout=60)


async def crawl(client: redis.asyncio.Redis) -> int | None:
    async with coord_asyncio.Lock(client, "crawl", timeout=30) as held:
        await held.extend(10)
    async with coord_asyncio.Semaphore(client, "crawler", limit=8, timeout=30) as permits:
        fence = permits.fence
    async with coord_asyncio.DurableLock(client, "payouts", timeout=30):
        pass
    holder = await coord_asyncio.async_lock_holder(client, "crawl")
    return fence if holder is None else holder.fence


def django_glue() -> None:
    with lock("orders", timeout=5):
        pass
    with semaphore("exports", 2):
        pass
    fenced_set("stock", b"5", fence=3)
    print(fenced_get("stock"))

    with locked("order:7"):
        pass


def top_products() -> list[str]:
    def query() -> list[str]:
        return ["tea", "coffee"]

    try:
        return get_or_set("top-products", query, 300, cache="default", lock_timeout=10, wait_timeout=5)
    except UnsupportedCacheBackend:
        return query()


async def rates() -> dict[str, float]:
    async def fetch() -> dict[str, float]:
        return {"EUR": 1.0}

    fetched: dict[str, float] = await aget_or_set("rates", fetch, 60)
    products: list[str] = await aget_or_set("top-products", top_products, None, version=2)
    return fetched if products else {}


def bump(client: redis.Redis) -> None:
    @optimistic(client, "counter")
    def increment(pipe: redis.client.Pipeline) -> None:
        pipe.multi()
        pipe.incr("counter")

    try:
        increment()
    except TransactionConflict as exc:
        print(exc.attempts)
    except (LockError, CoordError):
        raise


def private_server() -> dict[str, object]:
    with RedisServer() as server:
        asyncio.run(crawl(server.async_client()))
        return settings_for(server, KEY_PREFIX="test")
