"""The optimistic WATCH/MULTI/EXEC helper: a user id counter, a market, retries."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
import redis

from django_redis_coord import InvalidLockArgument, InvalidLockArgumentType, TransactionConflict, optimistic
from django_redis_coord.core.transactions import Optimistic
from tests.support.procs import run_processes


# -- a user id counter ------------------------------------------------------------------------------
def make_register(client, **policy):
    @optimistic(client, "user_id_counter", **policy)
    def register(pipe, email: str, password: str) -> int:
        user_id = int(pipe.get("user_id_counter") or 0)
        pipe.multi()
        pipe.set(f"user::{user_id}::email", email)
        pipe.set(f"user::{user_id}::password", password)
        pipe.incr("user_id_counter")
        return user_id

    return register


def test_a_conflict_is_retried_and_the_result_returned(redis_client):
    redis_client.set("user_id_counter", 256)
    intruder = redis.Redis(connection_pool=redis_client.connection_pool)
    runs = []

    @optimistic(redis_client, "user_id_counter", backoff=0.0)
    def register(pipe, email):
        user_id = int(pipe.get("user_id_counter"))
        runs.append(user_id)
        if len(runs) == 1:
            intruder.incr("user_id_counter")  # client B changes the key between GET and EXEC
        pipe.multi()
        pipe.set(f"user::{user_id}::email", email)
        pipe.incr("user_id_counter")
        return user_id

    assert register("peter@spamer.com") == 257
    assert runs == [256, 257]
    assert redis_client.get("user::256::email") is None
    assert redis_client.get("user::257::email") == b"peter@spamer.com"
    assert int(redis_client.get("user_id_counter")) == 258
    stats = register.stats
    assert (stats.calls, stats.attempts, stats.conflicts, stats.failures) == (1, 2, 1, 0)


def _register_many(url: str, worker: int, count: int) -> tuple[list[tuple[int, str]], int, int]:
    register = make_register(redis.Redis.from_url(url), retries=200, backoff=0.0005, max_backoff=0.01)
    done = []
    for n in range(count):
        email = f"w{worker}-{n}@example.com"
        done.append((register(email, "secret"), email))
    return done, register.stats.attempts, register.stats.conflicts


def test_user_id_counter_across_processes_loses_no_update(redis_client, redis_url):
    results = run_processes(_register_many, [(redis_url, worker, 40) for worker in range(4)], timeout=120)
    registered = [item for done, _, _ in results for item in done]
    ids = sorted(user_id for user_id, _ in registered)
    assert ids == list(range(160)), "two registrations got the same id or an id was skipped"
    assert int(redis_client.get("user_id_counter")) == 160
    for user_id, email in registered:
        assert redis_client.get(f"user::{user_id}::email").decode() == email
    attempts = sum(a for _, a, _ in results)
    conflicts = sum(c for _, _, c in results)
    assert attempts == 160 + conflicts  # every conflict was retried, nothing else was


# -- a market ---------------------------------------------------------------------------------------------
SELLERS = ["s1", "s2", "s3"]
BUYERS = ["b1", "b2", "b3", "b4"]
ITEMS_PER_SELLER = 12
START_FUNDS = 400


def setup_market(client) -> dict[str, int]:
    prices = {}
    for seller in SELLERS:
        client.hset(f"users:{seller}", "funds", 0)
        for n in range(ITEMS_PER_SELLER):
            item = f"item{seller}{n}"
            client.sadd(f"inventory:{seller}", item)
            prices[item] = 10 + (n * 7) % 40
    for buyer in BUYERS:
        client.hset(f"users:{buyer}", "funds", START_FUNDS)
    return prices


def list_item(client):
    def list_one(pipe, itemid: str, sellerid: str, price: int):
        inventory = f"inventory:{sellerid}"
        pipe.watch(inventory)
        if not pipe.sismember(inventory, itemid):
            return None
        pipe.multi()
        pipe.zadd("market:", {f"{itemid}.{sellerid}": price})
        pipe.srem(inventory, itemid)
        return True

    return optimistic(client, retries=100, backoff=0.0005, max_backoff=0.01)(list_one)


def purchase_item(client):
    def purchase(pipe, buyerid: str, itemid: str, sellerid: str):
        buyer, seller = f"users:{buyerid}", f"users:{sellerid}"
        market_item = f"{itemid}.{sellerid}"
        pipe.watch(buyer, "market:")  # the buyer's funds or the market changed: start again
        funds = int(pipe.hget(buyer, "funds"))
        price = pipe.zscore("market:", market_item)
        if price is None or funds < price:
            return None
        pipe.multi()
        pipe.hincrby(buyer, "funds", -int(price))
        pipe.hincrby(seller, "funds", int(price))
        pipe.sadd(f"inventory:{buyerid}", itemid)
        pipe.zrem("market:", market_item)
        return int(price)

    return optimistic(client, retries=100, backoff=0.0005, max_backoff=0.02)(purchase)


def _seller(url: str, seller: str, prices: dict[str, int]) -> tuple[str, list[str], int]:
    client = redis.Redis.from_url(url)
    listing = list_item(client)
    listed = []
    for n in range(ITEMS_PER_SELLER):
        item = f"item{seller}{n}"
        if listing(item, seller, prices[item]):
            listed.append(item)
        time.sleep(0.002)
    return seller, listed, listing.stats.conflicts


def _buyer(url: str, buyer: str, seed: int) -> tuple[str, list[tuple[str, int]], int, int]:
    client = redis.Redis.from_url(url)
    purchase = purchase_item(client)
    rng = random.Random(seed)
    bought: list[tuple[str, int]] = []
    gave_up = 0
    stop_at = time.monotonic() + 8.0
    while time.monotonic() < stop_at:
        offers = client.zrange("market:", 0, -1)
        if not offers:
            if int(client.get("sellers_done") or 0) == len(SELLERS):
                break
            time.sleep(0.002)
            continue
        itemid, sellerid = rng.choice(offers).decode().split(".")
        try:
            price = purchase(buyer, itemid, sellerid)
        except TransactionConflict:
            gave_up += 1
            continue
        if price is not None:
            bought.append((itemid, price))
        elif int(client.hget(f"users:{buyer}", "funds")) < 10:
            break
    return buyer, bought, purchase.stats.conflicts, gave_up


def _market_role(url: str, role: str, name: str, prices: dict[str, int]):
    if role == "seller":
        outcome = _seller(url, name, prices)
        redis.Redis.from_url(url).incr("sellers_done")
        return outcome
    return _buyer(url, name, hash(name) & 0xFFFF)


def test_market_across_processes_conserves_funds_and_items(redis_client, redis_url):
    prices = setup_market(redis_client)
    roles = [("seller", s) for s in SELLERS] + [("buyer", b) for b in BUYERS]
    results = run_processes(_market_role, [(redis_url, role, name, prices) for role, name in roles], timeout=120)
    sellers = {r[0]: r for r in results if r[0] in SELLERS}
    buyers = {r[0]: r for r in results if r[0] in BUYERS}

    # Funds: nothing created or destroyed, and each account moved by exactly its trades.
    funds = {user: int(redis_client.hget(f"users:{user}", "funds")) for user in SELLERS + BUYERS}
    assert sum(funds.values()) == START_FUNDS * len(BUYERS)
    for buyer, (_, bought, _, _) in buyers.items():
        assert funds[buyer] == START_FUNDS - sum(price for _, price in bought)
        assert funds[buyer] >= 0
    all_bought = [item for _, bought, _, _ in buyers.values() for item, _ in bought]
    for seller in SELLERS:
        assert funds[seller] == sum(prices[i] for i in all_bought if i.startswith(f"item{seller}"))

    # Items: every item is in exactly one place (an inventory or the market), none is lost.
    places: dict[str, list[str]] = {item: [] for item in prices}
    for user in SELLERS + BUYERS:
        for item in redis_client.smembers(f"inventory:{user}"):
            places[item.decode()].append(user)
    for entry in redis_client.zrange("market:", 0, -1):
        places[entry.decode().split(".")[0]].append("market")
    assert all(len(where) == 1 for where in places.values()), {i: w for i, w in places.items() if len(w) != 1}
    assert len(all_bought) == len(set(all_bought)), "an item was sold twice"
    for buyer, (_, bought, _, _) in buyers.items():
        assert {i.encode() for i, _ in bought} == redis_client.smembers(f"inventory:{buyer}")
    listed = [item for _, items, _ in sellers.values() for item in items]
    assert sorted(listed) == sorted(prices), "every item was listed exactly once"
    assert all_bought, "nothing was bought: the market checked nothing"


# -- retries, backoff, failure ---------------------------------------------------------------------------
def test_conflicts_until_the_last_retry_raise_transaction_conflict(redis_client):
    intruder = redis.Redis(connection_pool=redis_client.connection_pool)
    policy = optimistic(redis_client, "hot", retries=3, backoff=0.01, max_backoff=0.02, jitter=False)

    def always_conflicting(pipe):
        pipe.get("hot")
        intruder.incr("hot")
        pipe.multi()
        pipe.set("result", "never")

    started = time.monotonic()
    with pytest.raises(TransactionConflict) as info:
        policy.run(always_conflicting)
    elapsed = time.monotonic() - started
    assert info.value.attempts == 4
    assert isinstance(info.value.__cause__, redis.WatchError)
    assert (policy.stats.calls, policy.stats.attempts, policy.stats.conflicts, policy.stats.failures) == (1, 4, 4, 1)
    assert [policy.delay(n) for n in (1, 2, 3)] == [0.01, 0.02, 0.02]
    assert elapsed >= 0.05  # the three backoffs ran
    assert redis_client.get("result") is None
    assert int(redis_client.get("hot")) == 4


def test_jittered_backoff_stays_within_its_exponential_cap(redis_client):
    policy = optimistic(redis_client, "k", backoff=0.001, max_backoff=0.05)
    for retry in range(1, 12):
        cap = min(0.05, 0.001 * 2 ** (retry - 1))
        delays = [policy.delay(retry) for _ in range(200)]
        assert all(0 <= d <= cap for d in delays)
        assert max(delays) > cap / 2  # spread over the range, not a constant


def test_a_function_that_writes_nothing_returns_without_exec(redis_client):
    redis_client.hset("users:poor", "funds", 5)
    policy = optimistic(redis_client, "users:poor")
    redis_client.config_resetstat()
    assert policy.run(lambda pipe: int(pipe.hget("users:poor", "funds")) >= 10 or None) is None
    assert "cmdstat_exec" not in redis_client.info("commandstats")
    assert policy.stats.attempts == 1


def test_a_function_may_execute_itself_and_errors_are_not_retried(redis_client):
    policy = optimistic(redis_client, "counter")

    def bump(pipe):
        value = int(pipe.get("counter") or 0)
        pipe.multi()
        pipe.set("counter", value + 1)
        return pipe.execute()

    assert policy.run(bump) == [True]
    assert policy.run(bump) == [True]
    assert int(redis_client.get("counter")) == 2

    def broken(pipe):
        pipe.get("counter")
        raise KeyError("boom")

    with pytest.raises(KeyError):
        policy.run(broken)
    assert policy.stats.attempts == 3
    # The watching connection went back to the pool, unwatched.
    assert redis_client.connection_pool._in_use_connections == set()


@pytest.mark.parametrize(
    "kwargs,error",
    [
        (dict(retries=-1), InvalidLockArgument),
        (dict(retries=1.5), InvalidLockArgumentType),
        (dict(retries=True), InvalidLockArgumentType),
        (dict(backoff=-0.1), InvalidLockArgument),
        (dict(backoff="fast"), InvalidLockArgumentType),
        (dict(backoff=float("inf")), InvalidLockArgument),
        (dict(backoff=0.5, max_backoff=0.1), InvalidLockArgument),
    ],
)
def test_bad_policy_arguments_are_typed_errors(redis_client, kwargs, error):
    with pytest.raises(error):
        optimistic(redis_client, "k", **kwargs)


def test_bad_keys_and_client_are_typed_errors(redis_client):
    with pytest.raises(InvalidLockArgument):
        optimistic(redis_client, "")
    with pytest.raises(InvalidLockArgumentType):
        optimistic(redis_client, 42)
    with pytest.raises(InvalidLockArgumentType):
        Optimistic(None, "k")
    assert redis_client.dbsize() == 0


# -- asyncio -------------------------------------------------------------------------------------------------
def test_asyncio_user_id_counter_with_concurrent_tasks(redis_server):
    async def main():
        client = redis_server.async_client()
        await client.flushall()

        @optimistic(client, "user_id_counter", retries=200, backoff=0.0005, max_backoff=0.01)
        async def register(pipe, email):
            user_id = int(await pipe.get("user_id_counter") or 0)
            await asyncio.sleep(0)  # let the other tasks interleave between read and write
            pipe.multi()
            pipe.set(f"user::{user_id}::email", email)
            pipe.incr("user_id_counter")
            return user_id

        async def worker(w):
            return [await register(f"t{w}-{n}") for n in range(15)]

        results = await asyncio.gather(*(worker(w) for w in range(6)))
        ids = sorted(i for result in results for i in result)
        counter = int(await client.get("user_id_counter"))
        emails = {(await client.get(f"user::{i}::email")).decode() for i in ids}
        await client.aclose()
        return ids, counter, emails, register.stats

    ids, counter, emails, stats = asyncio.run(main())
    assert ids == list(range(90)) and counter == 90
    assert emails == {f"t{w}-{n}" for w in range(6) for n in range(15)}
    assert stats.conflicts > 0  # the sleep between read and write guarantees interleaving
    assert stats.attempts == 90 + stats.conflicts


def test_asyncio_conflict_after_the_last_retry(redis_server):
    async def main():
        client = redis_server.async_client()
        intruder = redis_server.async_client()
        await client.flushall()
        policy = optimistic(client, "hot", retries=2, backoff=0.0)

        async def conflicting(pipe):
            await pipe.get("hot")
            await intruder.incr("hot")
            pipe.multi()
            pipe.set("result", "never")

        try:
            await policy.arun(conflicting)
        except TransactionConflict as exc:
            outcome = exc.attempts
        result = await client.get("result")
        await client.aclose()
        await intruder.aclose()
        return outcome, result, policy.stats

    attempts, result, stats = asyncio.run(main())
    assert attempts == 3 and result is None and stats.failures == 1
