# Generated from tests/core/test_ratelimit_twin_aio.py by `python3 dev.py twins`: edit that file, not this one.
"""The rate limits' promises that hold alike for a thread and an asyncio task, written once: the
sync tests (test_ratelimit_twin_sync.py) are generated from these asyncio ones (docs/twins.md).
What only one side promises stays in test_ratelimit.py or test_async_ratelimit.py."""

from __future__ import annotations

import time

import pytest

from django_redis_coord import RateLimit, SlidingWindowLimit
from django_redis_coord.core.side.sync import sleep
from django_redis_coord.exceptions import CostTooHigh
from tests.support.side.sync import run


def test_gcra_admits_the_burst_then_refuses_until_the_next_slot(sync_redis):
    def scenario():
        client = sync_redis()
        limit = RateLimit(client, "api:1", "2/s", burst=3)
        assert (limit.peek()).remaining == 3
        replies = [limit.hit() for _ in range(4)]
        assert [r.allowed for r in replies] == [True, True, True, False]
        assert [r.remaining for r in replies] == [2, 1, 0, 0]
        assert all(r.limit == 3 for r in replies)
        refused = replies[-1]
        # The next slot opens one interval (0.5 s) after the first admission.
        assert 0 < refused.retry_after <= 0.5
        assert refused.retry_after == pytest.approx(replies[0].server_time + 0.5 - refused.server_time, abs=2e-6)
        assert refused.reset_after == pytest.approx(replies[0].server_time + 1.5 - refused.server_time, abs=2e-6)
        sleep(refused.retry_after)
        assert (limit.hit()).allowed
        with pytest.raises(CostTooHigh):
            limit.hit(cost=4)
        assert limit.reset() is True
        assert (limit.hit(cost=3)).remaining == 0
        client.close()

    run(scenario())


def test_the_window_admits_count_per_period_and_says_when_the_oldest_leaves(sync_redis):
    def scenario():
        client = sync_redis()
        limit = SlidingWindowLimit(client, "win:1", "3/s")
        first = limit.hit()
        sleep(0.2)
        second = limit.hit(cost=2)
        assert second.remaining == 0
        refused = limit.hit()
        assert not refused.allowed and refused.limit == 3
        assert not (limit.peek()).allowed
        assert 0 < client.pttl(limit.key) <= 1000
        # The first unit leaves the window one period after it was admitted.
        assert refused.retry_after == pytest.approx(first.server_time + 1 - refused.server_time, abs=2e-6)
        # Two units wait for the second admission to leave.
        peeked = limit.peek(cost=2)
        assert peeked.retry_after == pytest.approx(second.server_time + 1 - peeked.server_time, abs=2e-6)
        sleep(refused.retry_after)
        assert (limit.hit()).allowed and not (limit.hit()).allowed
        assert limit.reset() is True and (limit.peek()).remaining == 3
        client.close()

    run(scenario())


def test_a_slot_that_would_open_after_the_wait_is_not_reserved(sync_redis):
    def scenario():
        client = sync_redis()
        limit = RateLimit(client, "late", "1/m", burst=1)
        limit.hit()
        before = client.get(limit.key)
        started = time.monotonic()
        reply = limit.acquire(wait=30)
        assert not reply.allowed and reply.retry_after > 30 and reply.waited == 0
        assert time.monotonic() - started < 30  # it did not wait for a slot it could not get
        assert client.get(limit.key) == before
        client.close()

    run(scenario())
