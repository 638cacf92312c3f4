"""Rate limits (sync): rates, GCRA and the sliding window, exactness across processes on server
time, clock independence, retrying at ``retry_after``, waiting in arrival order without polling,
key expiry and hostile names."""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path

import pytest
import redis

from benchmarks.common import CommandMonitor
from django_redis_coord import (
    CostTooHigh,
    InvalidLockArgument,
    InvalidLockArgumentType,
    InvalidRate,
    Rate,
    RateLimit,
    SlidingWindowLimit,
    parse_rate,
)
from django_redis_coord.core.keys import key_slot
from django_redis_coord.core.ratelimit import ratelimit_key, window_key
from tests.support.procs import run_processes

US = 1_000_000


def in_threads(target, args_list) -> None:
    """Run ``target(*args)`` in one thread per ``args``, and wait for all of them."""
    threads = [threading.Thread(target=target, args=args) for args in args_list]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# -- rates ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, count, period", [
    ("100/m", 100, 60), ("10/s", 10, 1), ("5/30s", 5, 30), ("1000/h", 1000, 3600), ("20/5m", 20, 300),
    ("1/d", 1, 86400), (" 7/2min ", 7, 120), ("3/second", 3, 1), ("2/hours", 2, 3600), ("01/02s", 1, 2),
])
def test_rates_are_parsed(text, count, period):
    assert parse_rate(text) == Rate(count, period) == Rate.parse(text)


@pytest.mark.parametrize("text", [
    "", "100", "/m", "100/", "100/x", "0/m", "100/0s", "-1/s", "1.5/s", "100/ m", "100 per minute", "10/s/s",
    "100/M", "1e3/s", "100/ms", "10000000/s",
])
def test_bad_rate_strings_raise_a_value_error_that_says_what_is_expected(text):
    with pytest.raises(InvalidRate) as raised:
        parse_rate(text)
    assert isinstance(raised.value, ValueError)
    if text != "10000000/s":  # over the highest rate: says so
        assert "expected '<count>/<period>' such as '100/m'" in str(raised.value)
    else:
        assert "at most 1000000 per second" in str(raised.value)


UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def documented_units() -> dict[str, list[str]]:
    """The table of units in docs/ratelimits.md: unit -> its spellings."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "ratelimits.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (second|minute|hour|day) \| (.+) \|$", text, re.M)
    return {unit: re.findall(r"`([a-z]+)`", spellings) for unit, spellings in rows}


def test_one_rule_for_units_the_parser_its_message_and_the_docs_say_the_same():
    documented = documented_units()
    assert set(documented) == set(UNIT_SECONDS)
    message = str(pytest.raises(InvalidRate, parse_rate, "5/fortnight").value)
    spelled = {spelling for spellings in documented.values() for spelling in spellings}
    assert set(re.findall(r"[a-z]+", message.partition("in lower case:")[2])) == spelled
    for unit, spellings in documented.items():
        for spelling in spellings:
            assert parse_rate(f"5/{spelling}") == Rate(5, UNIT_SECONDS[unit]), spelling
            assert parse_rate(f"5/2{spelling}") == Rate(5, 2 * UNIT_SECONDS[unit]), spelling
            with pytest.raises(InvalidRate):
                parse_rate(f"5/{spelling.upper()}" if len(spelling) > 1 else f"5/{spelling}x")


def test_a_rate_that_is_not_a_string_is_a_type_error(redis_client):
    with pytest.raises(InvalidLockArgumentType):
        RateLimit(redis_client, "x", 100)  # type: ignore[arg-type]


def test_rates_print_in_their_short_form():
    assert [str(parse_rate(t)) for t in ("100/m", "10/sec", "5/30s", "1/day", "3/2h")] == [
        "100/m", "10/s", "5/30s", "1/d", "3/7200s"]


# -- GCRA -------------------------------------------------------------------------------------------
def test_gcra_admits_the_burst_then_refuses_until_the_next_slot(redis_client):
    limit = RateLimit(redis_client, "api:1", "2/s", burst=3)
    replies = [limit.hit() for _ in range(4)]
    assert [r.allowed for r in replies] == [True, True, True, False]
    assert [r.remaining for r in replies] == [2, 1, 0, 0]
    assert all(r.limit == 3 for r in replies)
    refused = replies[-1]
    # The next slot opens one interval (0.5 s) after the first admission.
    assert 0 < refused.retry_after <= 0.5
    assert refused.retry_after == pytest.approx(replies[0].server_time + 0.5 - refused.server_time, abs=2e-6)
    assert refused.reset_after == pytest.approx(replies[0].server_time + 1.5 - refused.server_time, abs=2e-6)
    time.sleep(refused.retry_after)
    assert limit.hit().allowed


def test_the_default_burst_is_the_rate_count(redis_client):
    limit = RateLimit(redis_client, "api:2", "5/m")
    assert limit.burst == 5
    assert [limit.hit().allowed for _ in range(6)] == [True] * 5 + [False]


def test_weighted_calls_count_their_cost(redis_client):
    limit = RateLimit(redis_client, "api:3", "10/m", burst=10)
    assert limit.hit(cost=7).remaining == 3
    refused = limit.hit(cost=4)
    assert not refused.allowed and refused.remaining == 3
    assert limit.hit(cost=3).allowed


def test_peek_counts_nothing(redis_client):
    limit = RateLimit(redis_client, "api:4", "1/m", burst=2)
    assert limit.peek().allowed and limit.peek().remaining == 2
    assert redis_client.exists(limit.key) == 0
    limit.hit()
    limit.hit()
    peeked = limit.peek()
    assert not peeked.allowed and peeked.remaining == 0 and peeked.retry_after > 59
    assert limit.peek(cost=2).retry_after > peeked.retry_after


def test_reset_forgets_every_call(redis_client):
    limit = RateLimit(redis_client, "api:5", "1/h", burst=1)
    assert limit.reset() is False
    assert limit.hit().allowed and not limit.hit().allowed
    assert limit.reset() is True
    assert limit.hit().allowed


@pytest.mark.parametrize("make", [
    lambda c: RateLimit(c, "cost", "10/s", burst=4), lambda c: SlidingWindowLimit(c, "cost", "4/s"),
], ids=["gcra", "window"])
def test_a_cost_above_the_capacity_is_a_clear_typed_error(redis_client, make):
    limit = make(redis_client)
    with pytest.raises(CostTooHigh, match="cost 5 is above the limit's capacity of 4"):
        limit.hit(cost=5)
    with pytest.raises(CostTooHigh):
        limit.peek(cost=5)
    with pytest.raises(InvalidLockArgument, match="at least 1"):
        limit.hit(cost=0)
    with pytest.raises(InvalidLockArgumentType):
        limit.hit(cost=1.5)
    assert redis_client.keys("*") == []


def test_bad_bursts_and_waits_are_refused(redis_client):
    with pytest.raises(InvalidLockArgument):
        RateLimit(redis_client, "b", "1/s", burst=0)
    with pytest.raises(InvalidLockArgumentType):
        RateLimit(redis_client, "b", "1/s", burst="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidLockArgument):
        RateLimit(redis_client, "b", "1/s").acquire(wait=-1)
    with pytest.raises(InvalidLockArgument):
        RateLimit(redis_client, "b", "1/d", burst=10**9)  # ten years to refill


# -- keys -----------------------------------------------------------------------------------------------
def test_the_gcra_key_expires_when_the_limit_is_full_again(redis_client):
    limit = RateLimit(redis_client, "exp:1", "20/s", burst=4)
    for _ in range(3):
        reply = limit.hit()
    pttl = redis_client.pttl(limit.key)
    # The documented bound: at most burst x interval (0.2 s) after the last admission.
    assert 0 < pttl <= 200 and pttl <= reply.reset_after * 1000 + 1  # (PX is rounded up to the ms)
    time.sleep(reply.reset_after + 0.01)
    assert redis_client.exists(limit.key) == 0
    assert limit.peek().remaining == 4


def test_the_window_key_expires_a_period_after_the_last_admission(redis_client):
    limit = SlidingWindowLimit(redis_client, "exp:2", "3/s")
    limit.hit()
    time.sleep(0.3)
    reply = limit.hit()
    assert 0 < redis_client.pttl(limit.key) <= 1000 and reply.reset_after == 1.0
    limit.hit()
    limit.hit()  # refused: no new expiry
    assert redis_client.pttl(limit.key) <= 1000
    time.sleep(1.01)
    assert redis_client.exists(limit.key) == 0


HOSTILE = ["*", "{tag}x", "}{", "{}", "a}b", "\0nul", "]] redis.call('FLUSHALL') --[[", "ключ", b"\xff\xfe\x00",
           "api:{user.pk}"]


@pytest.mark.parametrize("name", HOSTILE + ["x" * 5000], ids=repr)
def test_hostile_names_get_their_own_key_in_their_slot(redis_client, name):
    redis_client.set("canary", "1")
    raw = name.encode("utf-8", "surrogatepass") if isinstance(name, str) else name
    for make, key_of in ((lambda: RateLimit(redis_client, name, "2/m"), ratelimit_key),
                         (lambda: SlidingWindowLimit(redis_client, name, "2/m"), window_key)):
        limit = make()
        assert limit.key == key_of(name) and key_slot(limit.key) == key_slot(raw)
        assert len(limit.key) < 1100  # a long name is named by its digest
        assert [limit.hit().allowed for _ in range(3)] == [True, True, False]
        assert redis_client.exists(limit.key) == 1
    assert redis_client.get("canary") == b"1"
    assert len(redis_client.keys("*")) == 3


def test_names_that_differ_are_different_limits(redis_client):
    keys = {ratelimit_key(n) for n in ("a", "{a}", "{a}b", "a}b", "x" * 5000, "x" * 5001)}
    assert len(keys) == 6
    assert ratelimit_key("api:42") == b"{api:42}:dcoord:gcra"
    assert ratelimit_key("{t}x") == b"{t}:dcoord:gcra:{t}x"
    assert window_key("api:42") == b"{api:42}:dcoord:window"


def test_a_name_with_the_reserved_marker_is_refused(redis_client):
    with pytest.raises(InvalidLockArgument, match="reserved marker"):
        RateLimit(redis_client, "{x}:dcoord:gcra", "1/s")


# -- the sliding window ------------------------------------------------------------------------------
def test_the_window_admits_count_per_period_and_says_when_the_oldest_leaves(redis_client):
    limit = SlidingWindowLimit(redis_client, "win:1", "3/s")
    first = limit.hit()
    time.sleep(0.2)
    second = limit.hit(cost=2)
    assert second.remaining == 0
    refused = limit.hit()
    assert not refused.allowed and refused.limit == 3
    # The first unit leaves the window one period after it was admitted.
    assert refused.retry_after == pytest.approx(first.server_time + 1 - refused.server_time, abs=2e-6)
    # Two units wait for the second admission to leave.
    peeked = limit.peek(cost=2)
    assert peeked.retry_after == pytest.approx(second.server_time + 1 - peeked.server_time, abs=2e-6)
    time.sleep(refused.retry_after)
    assert limit.hit().allowed and not limit.hit().allowed


# -- exactness across processes (server time) ----------------------------------------------------------
def _hammer(url: str, kind: str, name: str, rate: str, burst: int, threads: int, end: float, offset: float):
    """Decide as fast as ``threads`` threads can until the server's clock passes ``end``; the
    server times (µs) of the admissions and of the first and last decisions.  ``offset``: seconds
    added to this process's ``time.time`` (the limits must not care)."""
    if offset:
        real = time.time
        time.time = lambda: real() + offset  # type: ignore[assignment]
    admitted: list[int] = []
    decided: list[int] = []
    guard = threading.Lock()

    def loop() -> None:
        client = redis.Redis.from_url(url)
        limit = RateLimit(client, name, rate, burst) if kind == "gcra" else SlidingWindowLimit(client, name, rate)
        mine, first, last = [], None, 0
        while True:
            reply = limit.hit()
            at = round(reply.server_time * US)
            first = at if first is None else first
            last = at
            if reply.allowed:
                mine.append(at)
            if reply.server_time >= end:
                break
        with guard:
            admitted.extend(mine)
            decided.extend((first, last))
        client.close()

    in_threads(loop, [()] * threads)
    return admitted, min(decided), max(decided)


def hammer(redis_client, url, kind, rate, burst, processes, threads, seconds, offsets=(0.0,)):
    """Admissions (server µs, sorted), first and last decision (µs) of ``processes`` x ``threads``."""
    sec, usec = redis_client.time()
    end = sec + usec / US + seconds + 0.5  # the processes start within the half second
    name = f"exact:{kind}:{len(offsets)}"
    args = [(url, kind, name, rate, burst, threads, end, offsets[i % len(offsets)]) for i in range(processes)]
    results = run_processes(_hammer, args, timeout=seconds + 60)
    admitted = sorted(at for result in results for at in result[0])
    return admitted, min(r[1] for r in results), max(r[2] for r in results)


def check_gcra(admitted, first, last, count, period, burst):
    """By every admission instant t: admitted <= burst + rate * (t - t0), t0 the first admission
    (the run started no later); over the run at least 0.99 x (burst + rate * T)."""
    rate = count / period
    t0 = admitted[0]
    for n, at in enumerate(admitted, 1):
        assert n <= burst + rate * (at - t0) / US + 1e-9, (n, (at - t0) / US)
    expected = burst + rate * (last - first) / US
    assert len(admitted) >= 0.99 * expected, (len(admitted), expected)
    return len(admitted) / expected


def check_window(admitted, first, last, count, period):
    """No window (t - period, t] holds more than ``count`` admissions; the run admitted at least
    0.99 x count per period it lasted, counting a last part of a period only past its first tenth
    (the limit was asked for more all along: the count of each period is taken at its start)."""
    window = round(period * US)
    start = 0
    for end, at in enumerate(admitted):
        while admitted[start] <= at - window:
            start += 1
        assert end - start + 1 <= count, ((at - admitted[0]) / US, end - start + 1)
    periods = (last - first) / window
    expected = count * (int(periods) + (periods % 1 > 0.1))
    assert len(admitted) >= 0.99 * expected, (len(admitted), expected)
    return len(admitted) / expected


GCRA_RUN = ("200/s", 50)
WINDOW_RUN = "100/s"


def test_gcra_is_exact_across_processes_on_server_time(redis_client, redis_url):
    """8 processes x 4 threads for 3 s (the 16 x 4 x 10 s run is the slow test below)."""
    admitted, first, last = hammer(redis_client, redis_url, "gcra", *GCRA_RUN, processes=8, threads=4, seconds=3)
    check_gcra(admitted, first, last, 200, 1, 50)


def test_the_sliding_window_is_exact_across_processes_on_server_time(redis_client, redis_url):
    admitted, first, last = hammer(redis_client, redis_url, "window", WINDOW_RUN, 0, processes=8, threads=4,
                                   seconds=3)
    check_window(admitted, first, last, 100, 1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gcra", "window"])
def test_the_full_exactness_run_16_processes_4_threads_10_seconds(redis_client, redis_url, kind):
    if kind == "gcra":
        admitted, first, last = hammer(redis_client, redis_url, "gcra", *GCRA_RUN, processes=16, threads=4,
                                       seconds=10)
        share = check_gcra(admitted, first, last, 200, 1, 50)
    else:
        admitted, first, last = hammer(redis_client, redis_url, "window", WINDOW_RUN, 0, processes=16, threads=4,
                                       seconds=10)
        share = check_window(admitted, first, last, 100, 1)
    print(f"{kind}: admitted {len(admitted)} in {(last - first) / US:.2f} s, {share:.4f} of the most allowed")


@pytest.mark.parametrize("kind", ["gcra", "window"])
def test_client_clocks_two_seconds_off_change_nothing(redis_client, redis_url, kind):
    """The same run with each client process's ``time.time`` 2 s ahead or behind admits the same."""
    runs = []
    for offsets in ((0.0,), (2.0, -2.0)):
        runs.append(hammer(redis_client, redis_url, kind, GCRA_RUN[0] if kind == "gcra" else WINDOW_RUN,
                           GCRA_RUN[1], processes=4, threads=2, seconds=2, offsets=offsets))
    shares = [
        check_gcra(admitted, first, last, 200, 1, 50) if kind == "gcra" else check_window(admitted, first, last, 100, 1)
        for admitted, first, last in runs
    ]
    # Both admitted all but at most 1% of what the limit allows (and never more, checked above).
    assert shares[1] == pytest.approx(shares[0], abs=0.01)


# -- retrying at retry_after ---------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda c, name: RateLimit(c, name, "50/s", burst=2), lambda c, name: SlidingWindowLimit(c, name, "50/s"),
], ids=["gcra", "window"])
def test_a_client_retrying_at_retry_after_is_admitted(redis_server, make):
    """Six clients, each alone on its limit (another client would take the slot it waits for),
    retry 30 times each exactly ``retry_after`` after a refusal."""
    tries = []

    def client(name: str) -> None:
        connection = redis_server.client()
        limit = make(connection, name)
        retries = admitted = 0
        while retries < 30:
            reply = limit.hit()
            if reply.allowed:
                continue
            time.sleep(reply.retry_after)
            retries += 1
            admitted += limit.hit().allowed
        tries.append((retries, admitted))
        connection.close()

    in_threads(client, [(f"retry:{i}",) for i in range(6)])
    retries, admitted = sum(r for r, _ in tries), sum(a for _, a in tries)
    assert retries == 180 and admitted >= 0.99 * retries, (admitted, retries)


# -- waiting for a reserved slot -----------------------------------------------------------------------
def _wait_in_line(url: str, name: str, callers: int, start: float):
    """``callers`` threads, each acquiring once on 10/s (burst 1) with up to 30 s of waiting; for
    each: server time of its decision, its slot (decision + waited), and server time after it woke."""
    out = []
    guard = threading.Lock()

    def call() -> None:
        client = redis.Redis.from_url(url)
        limit = RateLimit(client, name, "10/s", burst=1)
        while client.time()[0] < start:  # line up: all threads ask within the same moment
            time.sleep(0.01)
        reply = limit.acquire(wait=30)
        sec, usec = client.time()
        with guard:
            out.append((reply.allowed, reply.server_time, reply.server_time + reply.waited, sec + usec / US))
        client.close()

    in_threads(call, [()] * callers)
    return out


def test_100_waiting_callers_are_admitted_in_arrival_order_at_the_rate_one_script_call_each(
    redis_client, redis_url, redis_server
):
    name = "line"
    RateLimit(redis_client, "warm-up", "10/s").peek()  # the script is loaded: no NOSCRIPT below
    start = redis_client.time()[0] + 2
    with CommandMonitor(redis_server) as monitor:
        results = run_processes(_wait_in_line, [(redis_url, name, 25, start)] * 4, timeout=90)
    calls = sorted(call for result in results for call in result)
    assert len(calls) == 100 and all(allowed for allowed, *_ in calls)
    # Arrival order (the server's decision times) is admission order, one slot every 0.1 s.
    slots = [slot for _, _, slot, _ in calls]
    assert slots == sorted(slots)
    # GCRA with burst 1: each slot is one interval after the one before, or the decision itself when
    # that one had passed (a caller a loaded machine let ask late has nothing to wait for).
    for (_, decided, slot, _), before in zip(calls[1:], slots):
        assert slot == pytest.approx(max(decided, before + 0.1), abs=2e-6)
    # The callers that waited in line (asked before the slot ahead of theirs): at 10/s.
    first = next(i for i in range(len(calls)) if all(d <= s for (_, d, _, _), s in zip(calls[i + 1:], slots[i:])))
    assert len(slots) - first >= 90, first
    rate = (len(slots) - 1 - first) / (slots[-1] - slots[first])
    assert rate == pytest.approx(10, rel=0.01)
    # Each caller woke at its slot, not before (server time).
    assert all(woke >= slot for _, _, slot, woke in calls)
    # No polling: one script call per admission, the reservation included.
    scripted = monitor.counts.pop("EVALSHA", 0) + monitor.counts.pop("EVAL", 0)
    assert scripted == 100
    assert set(monitor.counts) <= {"TIME"}, monitor.counts  # the test's own clock readings


def test_a_slot_that_would_open_after_the_wait_is_not_reserved(redis_client):
    limit = RateLimit(redis_client, "late", "1/m", burst=1)
    limit.hit()
    before = redis_client.get(limit.key)
    started = time.monotonic()
    reply = limit.acquire(wait=30)
    assert not reply.allowed and reply.retry_after > 30 and reply.waited == 0
    assert time.monotonic() - started < 30  # it did not wait for a slot it could not get
    assert redis_client.get(limit.key) == before


class _Interrupted(Exception):
    pass


def _interrupt(signum, frame):
    raise _Interrupted


def test_an_interrupted_wait_gives_the_slot_back(redis_client):
    limit = RateLimit(redis_client, "interrupted", "1/10s", burst=1)
    limit.hit()
    held = redis_client.get(limit.key)
    previous = signal.signal(signal.SIGALRM, _interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(_Interrupted):
            limit.acquire(wait=30)  # its slot opens in 10 s
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert redis_client.get(limit.key) == held  # as before the reservation


def test_a_slot_given_back_under_a_later_reservation_stays_unused(redis_client):
    limit = RateLimit(redis_client, "stacked", "1/10s", burst=1)
    limit.hit()
    args = limit.decide_args(1, 30, peek=False)
    first, first_tat = limit.decision(limit.do_decide(args), args)  # reserved: 10 s from now
    second, second_tat = limit.decision(limit.do_decide(args), args)  # on top of it: 20 s from now
    assert 0 < first.waited < second.waited
    assert limit.do_cancel(limit.cancel_args(first_tat, 1)) is False  # the later one keeps its place
    assert int(redis_client.get(limit.key)) == second_tat
    assert limit.do_cancel(limit.cancel_args(second_tat, 1)) is True
    assert int(redis_client.get(limit.key)) == first_tat


def test_each_decision_is_one_script_call(redis_client, redis_server):
    gcra, window = RateLimit(redis_client, "calls", "5/s"), SlidingWindowLimit(redis_client, "calls", "5/s")
    gcra.peek()
    window.peek()
    with CommandMonitor(redis_server) as monitor:
        for limit in (gcra, window):
            for _ in range(7):
                limit.hit()
            limit.peek(cost=2)
        gcra.acquire(wait=0.5)
    assert monitor.counts == {"EVALSHA": 17}
