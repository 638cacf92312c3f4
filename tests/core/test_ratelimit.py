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
def test_the_window_compares_a_calls_cost_with_what_remains(redis_client):
    """A call of cost 2 with two units of "3/m" in the window is refused (2 + 2 > 3), and counts
    nothing; a call of cost 1 then fits."""
    limit = SlidingWindowLimit(redis_client, "weighted", "3/m")
    assert limit.hit().allowed and limit.hit().allowed
    assert not limit.peek(cost=2).allowed
    refused = limit.hit(cost=2)
    assert not refused.allowed and refused.remaining == 1 and refused.retry_after > 0
    assert redis_client.zcard(limit.key) == 2
    admitted = limit.hit()
    assert admitted.allowed and admitted.remaining == 0
    assert not limit.hit().allowed and redis_client.zcard(limit.key) == 3


# -- exactness across processes (server time) ----------------------------------------------------------
def _hammer(url: str, kind: str, name: str, rate: str, burst: int, threads: int, end: float):
    """Decide as fast as ``threads`` threads can until the server's clock passes ``end``; the
    server times (µs) of the admissions and of the refusals."""
    admitted: list[int] = []
    refused: list[int] = []
    guard = threading.Lock()

    def loop() -> None:
        client = redis.Redis.from_url(url)
        limit = RateLimit(client, name, rate, burst) if kind == "gcra" else SlidingWindowLimit(client, name, rate)
        mine, theirs = [], []
        while True:
            reply = limit.hit()
            (mine if reply.allowed else theirs).append(round(reply.server_time * US))
            if reply.server_time >= end:
                break
        with guard:
            admitted.extend(mine)
            refused.extend(theirs)
        client.close()

    in_threads(loop, [()] * threads)
    return admitted, refused


def hammer(redis_client, url, kind, rate, burst, processes, threads, seconds):
    """Admissions and refusals (server µs, each sorted) of ``processes`` x ``threads``."""
    sec, usec = redis_client.time()
    end = sec + usec / US + seconds + 0.5  # the processes start within the half second
    name = f"exact:{kind}"
    args = [(url, kind, name, rate, burst, threads, end) for _ in range(processes)]
    results = run_processes(_hammer, args, timeout=seconds + 60)
    admitted = sorted(at for result in results for at in result[0])
    refused = sorted(at for result in results for at in result[1])
    assert admitted and refused  # the limit was asked for more than it admits
    return admitted, refused


def _in_server_order(admitted, refused):
    """Every decision as (server µs, allowed), in server order; an admission before a refusal of
    the same microsecond (the order most favourable to the refusal: the check stays exact)."""
    return sorted([(at, True) for at in admitted] + [(at, False) for at in refused], key=lambda e: (e[0], not e[1]))


def check_gcra(admitted, refused, count, period, burst):
    """Exact both ways, on the server's clock: by every admission instant t, admitted <= burst +
    rate * (t - t0), t0 the first admission (the run started no later); and every refusal came
    when the bucket was full: by the algorithm's definition (ITU-T I.371's virtual scheduling),
    replayed over the admissions before it, the call's slot had not opened yet.  Nothing here
    depends on how fast the machine asked."""
    rate = count / period
    t0 = admitted[0]
    for n, at in enumerate(admitted, 1):
        assert n <= burst + rate * (at - t0) / US + 1e-9, (n, (at - t0) / US)
    interval = round(period * US / count)
    tolerance = burst * interval
    tat = 0
    for at, allowed in _in_server_order(admitted, refused):
        if allowed:
            tat = max(tat, at) + interval
        else:
            assert max(tat, at) + interval - tolerance > at, ("refused with room", (at - t0) / US)


def check_window(admitted, refused, count, period):
    """Exact both ways: no window (t - period, t] holds more than ``count`` admissions, and every
    refusal at t came when the window (t - period, t] held ``count`` already."""
    window = round(period * US)
    start = 0
    for end, at in enumerate(admitted):
        while admitted[start] <= at - window:
            start += 1
        assert end - start + 1 <= count, ((at - admitted[0]) / US, end - start + 1)
    start = 0
    recent: list[int] = []
    for at, allowed in _in_server_order(admitted, refused):
        if allowed:
            recent.append(at)
            continue
        while start < len(recent) and recent[start] <= at - window:
            start += 1
        held = len(recent) - start
        assert held >= count, ("refused with room", (at - admitted[0]) / US, held)


GCRA_RUN = ("200/s", 50)
WINDOW_RUN = "100/s"


def test_gcra_is_exact_across_processes_on_server_time(redis_client, redis_url):
    """8 processes x 4 threads for 3 s (the 16 x 4 x 10 s run is the slow test below)."""
    admitted, refused = hammer(redis_client, redis_url, "gcra", *GCRA_RUN, processes=8, threads=4, seconds=3)
    check_gcra(admitted, refused, 200, 1, 50)


def test_the_sliding_window_is_exact_across_processes_on_server_time(redis_client, redis_url):
    admitted, refused = hammer(redis_client, redis_url, "window", WINDOW_RUN, 0, processes=8, threads=4, seconds=3)
    check_window(admitted, refused, 100, 1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gcra", "window"])
def test_the_full_exactness_run_16_processes_4_threads_10_seconds(redis_client, redis_url, kind):
    if kind == "gcra":
        admitted, refused = hammer(redis_client, redis_url, "gcra", *GCRA_RUN, processes=16, threads=4, seconds=10)
        check_gcra(admitted, refused, 200, 1, 50)
    else:
        admitted, refused = hammer(redis_client, redis_url, "window", WINDOW_RUN, 0, processes=16, threads=4,
                                   seconds=10)
        check_window(admitted, refused, 100, 1)


def _decisions(make, offsets, monkeypatch):
    """Five decisions (four hits, then a peek) on the limit ``make()`` gives, each made while the
    client's clock (``time.time``, ``time.time_ns``) is off by the next of ``offsets`` seconds;
    each told as what a client sees: admitted, remaining, and the instants (server seconds) when
    a refused call's slot opens, counted from the first admission, and when the limit is free
    again, counted from the first admission (GCRA) or the latest one (the window)."""
    real_time, real_ns = time.time, time.time_ns
    limit, told, first, latest = make(), [], 0.0, 0.0
    for index, offset in enumerate(offsets):
        monkeypatch.setattr(time, "time", lambda offset=offset: real_time() + offset)
        monkeypatch.setattr(time, "time_ns", lambda offset=offset: real_ns() + round(offset * 1e9))
        reply = limit.hit() if index < 4 else limit.peek()
        monkeypatch.setattr(time, "time", real_time)
        monkeypatch.setattr(time, "time_ns", real_ns)
        if reply.allowed and index < 4:
            first = first or reply.server_time
            latest = reply.server_time
        opens = None if reply.allowed else round(reply.server_time + reply.retry_after - first, 5)
        free = reply.server_time + reply.reset_after - (first if isinstance(limit, RateLimit) else latest)
        told.append((reply.allowed, reply.remaining, opens, round(free, 5)))
    return told


@pytest.mark.parametrize("kind", ["gcra", "window"])
def test_client_clocks_two_seconds_off_change_nothing(redis_client, monkeypatch, kind):
    """The same decisions, made with the client's clock right each time, or 2 s ahead and 2 s
    behind in turn, tell the same: every instant is the server's, none the client's."""
    def make(name):
        return lambda: (RateLimit(redis_client, name, "5/h", burst=3) if kind == "gcra"
                        else SlidingWindowLimit(redis_client, name, "3/h"))

    right = _decisions(make("clock:right"), [0.0] * 5, monkeypatch)
    off = _decisions(make("clock:off"), [2.0, -2.0, 2.0, -2.0, 2.0], monkeypatch)
    assert off == right
    # And what the limit promises: three admitted, then refused until a slot opens (GCRA: one
    # interval, 720 s, after the first admission; the window: when the first unit leaves, 3600 s).
    opens, free = (720.0, 2160.0) if kind == "gcra" else (3600.0, 3600.0)
    assert right == [(True, 2, None, free if kind == "window" else 720.0),
                     (True, 1, None, free if kind == "window" else 1440.0),
                     (True, 0, None, free), (False, 0, opens, free), (False, 0, opens, free)]


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


# -- a give-back sent twice (a resend after a lost reply) --------------------------------------------------
def _slots_apart(slots, interval):
    """The smallest gap (seconds) between two of ``slots`` (server seconds), and whether every two
    are at least ``interval`` apart: the bound of a burst-1 GCRA limit."""
    ordered = sorted(slots)
    gap = min(later - earlier for earlier, later in zip(ordered, ordered[1:]))
    return gap, gap >= interval - 2e-6


def test_a_give_back_run_twice_does_not_give_away_the_slot_reserved_in_between(redis_client):
    """The cancel script run a second time with the same arguments (as a client resends it after a
    lost reply), after another caller reserved the slot the first run gave back, ending at the very
    TAT the cancel compares with: the second run changes nothing."""
    limit = RateLimit(redis_client, "twice", "1/10s", burst=1)
    first = limit.hit()
    args = limit.decide_args(1, 60, peek=False)
    _, written = limit.decision(limit.do_decide(args), args)  # reserved, 10 s ahead
    cancel = limit.cancel_args(written, 1)
    assert limit.do_cancel(cancel) is True  # given back
    other, other_tat = limit.decision(limit.do_decide(args), args)  # another caller takes that slot
    assert other_tat == written  # the TAT the cancel compares with, written by someone else
    assert limit.do_cancel(cancel) is True  # the resend: the outcome of the first run, nothing done
    third, third_tat = limit.decision(limit.do_decide(args), args)
    gap, apart = _slots_apart([first.server_time, other.server_time + other.waited,
                               third.server_time + third.waited], 10)
    assert apart, f"two admissions {gap:.6f} s apart on a 1/10s, burst-1 limit"
    assert third_tat == other_tat + 10 * US
    # The cancel's record is in the limit's slot and expires once the TAT it guards has passed
    # (plus a second): at most the reservation's wait plus the refill time, here 21 s.
    (record,) = redis_client.keys("*:dcoord:ratelimit-cancel:*")
    assert key_slot(record) == key_slot(limit.key)
    assert 0 < redis_client.pttl(record) <= 21_000


def test_a_give_back_resent_by_redis_py_after_a_lost_reply_gives_away_nothing(redis_server, redis_client):
    """The same through redis-py's own retry: the reply of the give-back is lost (the connection
    drops once the script has run, after another caller reserved the slot it gave back) and the
    client sends the call again."""
    from redis.backoff import NoBackoff
    from redis.connection import Connection
    from redis.retry import Retry

    between: list = []
    sent: list = []

    class LostReply(Connection):
        def send_command(self, *args, **kwargs):
            sent.append(args[0])
            return super().send_command(*args, **kwargs)

        def read_response(self, *args, **kwargs):
            response = super().read_response(*args, **kwargs)
            if between:
                between.pop()()  # another caller, on another connection, while the reply is on its way
                self.disconnect()
                raise redis.ConnectionError("the reply was lost")
            return response

    client = redis.Redis.from_url(redis_server.url, connection_class=LostReply, retry=Retry(NoBackoff(), 1))
    limit = RateLimit(client, "lost-reply", "1/10s", burst=1)
    others = RateLimit(redis_client, "lost-reply", "1/10s", burst=1)
    limit.do_cancel(limit.cancel_args(1, 1))  # the script is loaded (a call that finds nothing to give back)
    first = limit.hit()
    args = limit.decide_args(1, 60, peek=False)
    _, written = limit.decision(limit.do_decide(args), args)  # reserved, 10 s ahead
    reserved = []
    between.append(lambda: reserved.append(others.decision(others.do_decide(args), args)))
    del sent[:]
    assert limit.do_cancel(limit.cancel_args(written, 1)) is True
    assert sent.count("EVALSHA") == 2 and not between  # sent twice: the reply lost, then the resend
    (other, other_tat), = reserved
    assert other_tat == written
    third, third_tat = others.decision(others.do_decide(args), args)
    gap, apart = _slots_apart([first.server_time, other.server_time + other.waited,
                               third.server_time + third.waited], 10)
    assert apart, f"two admissions {gap:.6f} s apart on a 1/10s, burst-1 limit"
    assert third_tat == other_tat + 10 * US
    client.close()


# -- a rate shrunk below what its window holds ---------------------------------------------------------------
def test_remaining_is_never_negative_after_the_rate_shrinks(redis_client):
    """``remaining`` is what would still be admitted now: none, not a negative count, when the
    window holds more than a smaller rate allows (the rate of a name changed under a live limit)."""
    for _ in range(8):
        assert SlidingWindowLimit(redis_client, "shrunk", "10/m").hit().allowed
    smaller = SlidingWindowLimit(redis_client, "shrunk", "2/m")
    scores = [score for _, score in redis_client.zrange(smaller.key, 0, -1, withscores=True)]
    for reply, leaving in ((smaller.peek(), scores[6]), (smaller.hit(), scores[6]), (smaller.peek(cost=2), scores[7])):
        assert not reply.allowed and reply.remaining == 0 and reply.limit == 2
        # In when the units beyond what it leaves room for have left the window.
        assert reply.retry_after == pytest.approx(leaving / US + 60 - reply.server_time, abs=2e-6)
    for _ in range(8):
        assert RateLimit(redis_client, "shrunk", "10/m", burst=10).hit().allowed
    reply = RateLimit(redis_client, "shrunk", "2/m", burst=2).peek()
    assert not reply.allowed and reply.remaining == 0


# -- the sliding window's edge -------------------------------------------------------------------------------
#: Blocks the server until its clock reaches ARGV[1] (µs): the script sent next runs right after.
_PLACE = """
-- Units one a microsecond from one window before a moment LEAD µs from now, then wait for that
-- moment, all on the server (no client delay between placing them and the decision after this).
-- Placing them took longer than the lead (a loaded machine): again, with twice the lead.
-- A server whose clock stands still while a command runs (Valkey reads TIME once for a script or a
-- whole MULTI/EXEC) would never reach the moment: there the units go one window before the moment
-- the clock shows, which the decision that follows reads too, or later.
local key, lead, window, units = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end
local function place(at)
  redis.call('DEL', key)
  for first = 0, units - 1, 1000 do
    local args = {}
    for k = first, math.min(first + 999, units - 1) do
      args[#args + 1] = string.format('%.0f', at - window + k)
      args[#args + 1] = 'unit:' .. k
    end
    redis.call('ZADD', key, unpack(args))
  end
end
local start = clock()
local at = start + lead
place(at)
local now = clock()
if now == start then
  place(start)
  return string.format('%.0f', start)
end
while now >= at do
  lead = lead * 2
  at = now + lead
  place(at)
  now = clock()
end
repeat now = clock() until now >= at
return string.format('%.0f', at)
"""


def test_a_unit_exactly_one_window_old_no_longer_counts(redis_client):
    """The window of a decision at ``now`` is ``(now - period, now]``: a unit admitted exactly one
    period before the decision has left it, one admitted a microsecond later has not.  Units are
    placed one every microsecond around the edge of a decision made at a moment set in advance,
    in one transaction with the decision (the server places them and waits for the moment, 50 ms
    ahead or more, then decides): one unit sits exactly on the edge whatever the client's speed."""
    from django_redis_coord.core.scripts import sync_scripts

    limit = SlidingWindowLimit(redis_client, "edge", "3/h")
    window = 3600 * US
    limit.peek()  # the script is loaded
    args = limit.decide_args(1, peek=True)
    units = 10_000  # one a microsecond: 10 ms past the moment
    with redis_client.pipeline() as pipe:  # MULTI/EXEC: nothing runs between the two scripts
        pipe.eval(_PLACE, 1, limit.key, 50_000, window, units)
        sync_scripts.get(redis_client, "ratelimit_window")((limit.key,), args, client=pipe)
        placed, raw = pipe.execute()
    at = int(placed)
    now = round(limit.reply(raw, args).server_time * US)
    edge = now - at  # the unit admitted exactly one window before the decision
    assert 0 <= edge < units - 1, edge  # the decision came right after the moment
    assert redis_client.zscore(limit.key, f"unit:{edge}") is None  # exactly one window old: gone
    assert redis_client.zscore(limit.key, f"unit:{edge + 1}") == at - window + edge + 1  # a µs younger: counted
    assert int(raw.split()[3]) == redis_client.zcard(limit.key) == units - edge - 1
