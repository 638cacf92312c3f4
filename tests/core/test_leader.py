"""Leader election: campaigns, terms, hand-off, loss and re-campaign, against real redis-servers;
the failover tests run contenders as separate OS processes and kill or pause the leader."""

from __future__ import annotations

import asyncio
import os
import queue
import random
import signal
import threading
import time
from typing import Any, Optional

import pytest
import redis

import django_redis_coord
import django_redis_coord.asyncio
from django_redis_coord import Leader, lock_holder
from django_redis_coord.asyncio import Leader as AsyncLeader
from django_redis_coord.core.leader.sync import _campaigning, _resign_all
from django_redis_coord.core.listing import HolderListing
from tests.safety.checkers import check_exclusion, check_fences, check_lost_updates, extract_holds
from tests.safety.history import FAIL, OK, History, Recorder
from tests.safety.workloads import Resource
from tests.support.procs import CTX
from tests.test_twins import public_api

LEASE = 0.5


def wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    stop_at = time.monotonic() + timeout
    while time.monotonic() < stop_at:
        if predicate():
            return True
        time.sleep(0.005)
    return bool(predicate())


class Terms:
    """What the callbacks of one leader saw: ``("elected" | "revoked", term, monotonic instant)``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, float]] = []

    def elected(self, term: int) -> None:
        self.events.append(("elected", term, time.monotonic()))

    def revoked(self, term: int) -> None:
        self.events.append(("revoked", term, time.monotonic()))

    def of(self, kind: str) -> list[int]:
        return [term for what, term, _ in self.events if what == kind]


def leader_with(client: Any, name: str, terms: Terms, lease: float = LEASE, **options: Any) -> Leader:
    return Leader(client, name, lease, on_elected=terms.elected, on_revoked=terms.revoked, **options)


# -- the API --------------------------------------------------------------------------------------
def test_exported_lazily_and_as_an_asyncio_twin_with_the_same_public_api():
    assert "Leader" in django_redis_coord.__all__ and "Leader" in django_redis_coord.asyncio.__all__
    assert django_redis_coord.Leader is Leader
    assert public_api(Leader) == public_api(AsyncLeader)
    assert set(public_api(Leader)) >= {"campaign", "resign", "is_leader", "term", "__init__"}
    assert hasattr(Leader, "__enter__") and hasattr(AsyncLeader, "__aenter__")


def test_bad_arguments_are_refused_before_anything_is_sent(redis_client):
    with pytest.raises(TypeError):
        Leader(redis_client, "election", on_elected="not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Leader(redis_client, "election", recampaign=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Leader(redis_client, "election", lease=0)
    assert redis_client.dbsize() == 0


# -- election, hand-off, callbacks --------------------------------------------------------------
def test_one_leader_and_resign_hands_off_at_once_in_fifo_order(redis_server):
    clients = [redis_server.client() for _ in range(3)]
    terms = [Terms() for _ in range(3)]
    # Those in line refresh their places every 7.5 s: only the published grant can elect the next
    # one before its first refresh.
    a, b, c = (leader_with(client, "election", seen, lease=30, waiter_lease=30)
               for client, seen in zip(clients, terms))
    assert b.lock.refresh_interval == 7.5
    try:
        assert a.campaign(blocking_timeout=2) and a.is_leader
        assert terms[0].of("elected") == [a.term]
        b_queued_from = time.monotonic()
        assert not b.campaign(blocking=False)
        assert wait_for(lambda: lock_holder(clients[0], "election").waiters == 1)
        assert not c.campaign(blocking_timeout=0.05)
        assert wait_for(lambda: lock_holder(clients[0], "election").waiters == 2)
        assert not b.is_leader and not c.is_leader

        # The holder record marks a leader, with its term as the fence.
        holder = lock_holder(clients[0], "election")
        assert holder.label == "leader" and holder.extra["role"] == "leader"
        assert holder.fence == a.term and holder.pid == os.getpid()

        first = a.term
        resigned_at = time.monotonic()
        a.resign()
        assert not a.is_leader and a.term == first  # the term stays readable, for fenced writes
        assert b.campaign(blocking_timeout=1)  # the head of the line
        elected_at = terms[1].events[0][2]
        assert resigned_at < elected_at < b_queued_from + b.lock.refresh_interval, "a published grant, not a refresh"
        assert not c.is_leader and b.term > first
        b.resign()
        assert c.campaign(blocking_timeout=1) and c.term > b.term
        c.resign()
        # Each callback once per term, revoked after elected.
        for seen, leader in zip(terms, (a, b, c)):
            assert [what for what, _, _ in seen.events] == ["elected", "revoked"]
            assert seen.of("elected") == seen.of("revoked") == [leader.term]
        assert lock_holder(clients[0], "election") is None
    finally:
        for leader in (a, b, c):
            leader.resign()


def test_a_lost_term_is_revoked_and_the_leader_campaigns_again(redis_client):
    terms = Terms()
    leader = leader_with(redis_client, "election", terms)
    try:
        assert leader.campaign(blocking_timeout=2)
        first = leader.term
        redis_client.delete("election")  # the hold is gone (as after a failover that lost the key)
        assert wait_for(lambda: len(terms.of("elected")) == 2, timeout=3)
        assert terms.of("revoked") == [first]
        second = terms.of("elected")[1]
        assert second > first and leader.term == second and leader.is_leader
        assert [what for what, _, _ in terms.events] == ["elected", "revoked", "elected"]
    finally:
        leader.resign()
    assert terms.of("revoked") == [first, second]


def test_without_recampaign_a_lost_leader_stays_out_until_it_campaigns_again(redis_client):
    terms = Terms()
    leader = leader_with(redis_client, "election", terms, recampaign=False)
    try:
        assert leader.campaign(blocking_timeout=2)
        redis_client.delete("election")
        assert wait_for(lambda: terms.of("revoked") == [leader.term], timeout=3)
        assert not leader.is_leader
        time.sleep(LEASE)
        assert len(terms.of("elected")) == 1 and lock_holder(redis_client, "election") is None
        assert leader.campaign(blocking_timeout=2) and len(terms.of("elected")) == 2
    finally:
        leader.resign()


def test_with_block_campaigns_in_the_background_and_resigns_on_exit(redis_client):
    terms = Terms()
    with leader_with(redis_client, "election", terms, label="beat") as leader:
        assert leader.campaign(blocking_timeout=2)
        assert lock_holder(redis_client, "election").label == "leader: beat"
        assert leader in _campaigning
        # What `manage.py locks list` and the admin page read: a lock, labelled, its fence the term.
        (listed,) = HolderListing(redis_client).holders()
        assert (listed.name, listed.kind, listed.fence) == ("election", "lock", leader.term)
        assert listed.label == "leader: beat" and listed.extra == {"role": "leader"}
    assert terms.of("revoked") == [leader.term] and lock_holder(redis_client, "election") is None
    assert leader not in _campaigning


def test_interpreter_exit_resigns_campaigning_leaders(redis_client):
    follower_terms = Terms()
    leader = leader_with(redis_client, "election", Terms())
    follower = leader_with(redis_client, "election", follower_terms)
    try:
        assert leader.campaign(blocking_timeout=2)
        follower.campaign(blocking=False)
        assert wait_for(lambda: lock_holder(redis_client, "election").waiters == 1)
        _resign_all()  # what atexit runs
        assert not leader.is_leader and not follower.is_leader
        assert lock_holder(redis_client, "election") is None  # the follower left the line too
        assert follower_terms.events == [] or follower_terms.of("elected") == follower_terms.of("revoked")
    finally:
        leader.resign()
        follower.resign()


def test_a_callback_that_fails_stops_nothing(redis_client, caplog):
    def broken(term: int) -> None:
        raise RuntimeError("boom")

    leader = Leader(redis_client, "election", LEASE, on_elected=broken, on_revoked=broken)
    assert leader.campaign(blocking_timeout=2) and leader.is_leader
    leader.resign()
    assert lock_holder(redis_client, "election") is None
    assert sum("boom" in str(record.exc_info) for record in caplog.records) == 2


# -- asyncio -----------------------------------------------------------------------------------
def test_asyncio_twin_elects_hands_off_revokes_and_campaigns_again(async_redis):
    async def scenario() -> None:
        client = async_redis()
        seen: list[tuple[str, str, int]] = []

        def callbacks(who: str) -> dict[str, Any]:
            async def revoked(term: int) -> None:
                await asyncio.sleep(0)
                seen.append((who, "revoked", term))

            return {"on_elected": lambda term: seen.append((who, "elected", term)), "on_revoked": revoked}

        a = AsyncLeader(client, "election", LEASE, **callbacks("a"))
        b = AsyncLeader(client, "election", LEASE, **callbacks("b"))
        assert await a.campaign(blocking_timeout=2)
        assert not await b.campaign(blocking_timeout=0.05)
        await a.resign()
        # Elected at once: the release handed the lease to b inside Redis (no refresh, no poll).
        handed_to = await client.get("election")
        assert await b.campaign(blocking_timeout=5) and handed_to == b.lock.local.token
        assert b.term > a.term and not a.is_leader
        first = b.term
        await client.delete("election")  # lost: revoked, then elected again
        stop_at = time.monotonic() + 3
        while len([s for s in seen if s[:2] == ("b", "elected")]) < 2 and time.monotonic() < stop_at:
            await asyncio.sleep(0.01)
        assert b.is_leader and b.term > first
        async with AsyncLeader(client, "election", LEASE, label="beat") as c:
            assert not await c.campaign(blocking_timeout=0.05)
            await b.resign()
            assert await c.campaign(blocking_timeout=1)
            holder = await django_redis_coord.asyncio.async_lock_holder(client, "election")
            assert holder.label == "leader: beat" and holder.extra["role"] == "leader" and holder.fence == c.term
        assert not c.is_leader and await client.exists("election") == 0
        assert seen == [("a", "elected", a.term), ("a", "revoked", a.term), ("b", "elected", first),
                        ("b", "revoked", first), ("b", "elected", b.term), ("b", "revoked", b.term)]
        await client.aclose()

    asyncio.run(scenario())


def test_asyncio_leader_steps_down_when_its_loop_shuts_down(redis_server):
    revoked: list[int] = []

    async def lead() -> Optional[int]:
        leader = AsyncLeader(redis_server.async_client(), "election", LEASE, on_revoked=revoked.append)
        assert await leader.campaign(blocking_timeout=2)
        return leader.term  # asyncio.run() cancels the campaign task: it resigns on its way out

    term = asyncio.run(lead())
    assert revoked == [term]
    assert lock_holder(redis_server.client(), "election") is None


# -- failover across processes --------------------------------------------------------------------
def _contender(url: str, name: str, lease: float, events: Any) -> None:
    """One contender process: campaign, report each election and revocation, resign on SIGTERM.

    (Not a multiprocessing Event: setting one waits for every process that waited on it, and a
    killed one never answers.)"""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client = redis.Redis.from_url(url)
    pid = os.getpid()

    leader = Leader(client, name, lease,
                    on_elected=lambda term: events.put(("elected", pid, term, time.monotonic_ns())),
                    on_revoked=lambda term: events.put(("revoked", pid, term, time.monotonic_ns())))
    leader.campaign(blocking=False)
    while not stop.wait(0.05):
        pass
    leader.resign()


def _async_contender(url: str, name: str, lease: float, events: Any) -> None:
    """:func:`_contender` with the asyncio Leader: the campaign is a task of this process's event
    loop, and the callbacks run on it (``on_revoked`` as a coroutine)."""
    import redis.asyncio

    pid = os.getpid()

    async def revoked(term: int) -> None:
        events.put(("revoked", pid, term, time.monotonic_ns()))

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        client = redis.asyncio.Redis.from_url(url)
        leader = AsyncLeader(client, name, lease, on_revoked=revoked,
                             on_elected=lambda term: events.put(("elected", pid, term, time.monotonic_ns())))
        await leader.campaign(blocking=False)
        await stop.wait()
        await leader.resign()
        await client.aclose()

    asyncio.run(main())


def failover_latencies(url: str, name: str, lease: float, trials: int, contenders: int = 3,
                       contender: Any = _contender) -> list[float]:
    """SIGKILL the leader of ``contenders`` processes ``trials`` times (a new contender replaces
    each victim); for each, the seconds from the kill to the next election (the callback's instant)
    and the seconds the killed leader's hold still had in Redis, read right after the kill (nothing
    renews it any more).  ``contender`` is what each process runs (:func:`_contender`, or
    :func:`_async_contender`).

    A loaded machine may stall a leader past its lease: it loses its term by design, and the term
    goes to whoever campaigns first (itself again, or another).  A kill around such a change does
    not kill the leader it meant to, so that trial counts for nothing: a revocation, or an election
    made before the kill and reported after it, voids it, and the next one starts from the leader
    with the highest term once the elections have settled."""
    observer = redis.Redis.from_url(url)
    events = CTX.Queue()
    rng = random.Random(trials)
    procs = {}

    def spawn() -> None:
        proc = CTX.Process(target=contender, args=(url, name, lease, events), daemon=True)
        proc.start()
        procs[proc.pid] = proc

    def settled(leader: Optional[int], term: int, wait: float) -> tuple[Optional[int], int]:
        """The leader with the highest term once no event has come for ``wait`` seconds."""
        while True:
            try:
                kind, pid, new_term, _ = events.get(timeout=wait)
            except queue.Empty:
                if leader is not None:
                    return leader, term
                raise AssertionError("no contender was elected") from None
            if kind == "elected" and new_term > term:
                leader, term = pid, new_term

    for _ in range(contenders):
        spawn()
    latencies = []
    try:
        leader, term = settled(None, 0, 2 * lease + 1)
        for _ in range(3 * trials):
            if len(latencies) == trials:
                break
            time.sleep(rng.uniform(0.05, lease))  # a kill at any point of the renewal cycle
            victim, victim_term = leader, term
            killed_at = time.monotonic_ns()
            os.kill(victim, signal.SIGKILL)
            left = max(observer.pttl(name), 0) / 1000  # the hold's time left, which nothing renews now
            procs.pop(victim).join(5)
            void = False
            while True:
                try:  # after a void kill, the leader nobody killed may go on leading: no election
                    kind, pid, new_term, at = events.get(timeout=2 * lease + 1 if void else lease + 60)
                except queue.Empty:
                    if not void:
                        raise AssertionError("nobody was elected 60 s after the leader's lease") from None
                    break
                if kind == "revoked" or at < killed_at:  # a term changed hands that no kill ended
                    void = True
                    if kind == "elected" and new_term > term:
                        leader, term = pid, new_term
                    continue
                assert pid != victim and new_term > victim_term, (pid, victim, new_term, victim_term)
                if not void:
                    latencies.append(((at - killed_at) / 1e9, left))
                leader, term = pid, new_term
                break
            spawn()
            if void:
                leader, term = settled(leader, term, 2 * lease + 1)
        assert len(latencies) == trials, f"{3 * trials} kills: only {len(latencies)} found the leader they meant"
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        observer.close()
    return latencies


def assert_replaced_only_once_the_hold_ended(latencies: list[tuple[float, float]]) -> None:
    """No election came before the killed leader's hold ran out in Redis: each came at least the
    time that hold had left when it was read, after the kill (1 ms for PTTL's rounding).  (Not a
    share of the lease: a loaded machine delays renewals, so a hold killed late in its cycle has
    less left than the renewal period promises on a quiet one.)"""
    assert any(left > 0 for _, left in latencies), latencies  # some killed leader still held when read
    for took, left in latencies:
        assert took >= left - 0.001, latencies


def test_a_killed_leader_is_replaced_once_its_lease_ends(redis_server):
    """Each of 10 SIGKILLed leaders is replaced by another process with a greater term, never before
    its hold could have ended.  How soon after its lease (the time the next in line takes to see the
    expiry, which a loaded machine stretches) is a figure of benchmarks/bench_leader.py, not a bound
    of this test."""
    latencies = failover_latencies(redis_server.url, "election", LEASE, trials=10)
    assert len(latencies) == 10
    assert_replaced_only_once_the_hold_ended(latencies)


def test_a_killed_asyncio_leader_is_replaced_once_its_lease_ends(redis_server):
    """The same with contender processes running the asyncio Leader (each an event loop of its
    own): few trials, a few seconds."""
    latencies = failover_latencies(redis_server.url, "election", LEASE, trials=5, contender=_async_contender)
    assert len(latencies) == 5
    assert_replaced_only_once_the_hold_ended(latencies)


def _paused_contender(url: str, resource_url: str, name: str, index: int, ready: Any, resume: Any, stop: Any,
                      out: Any) -> None:
    """A contender that acts while it leads: a fenced read-modify-write of the resource, checking
    ``is_leader`` before each.  Once, while leading, it announces that it is between its read and
    its write (``ready``) and waits there until the parent, which pauses it meanwhile, lets it go
    on (``resume``): a write decided before the pause goes out after it."""
    client = redis.Redis.from_url(url)
    resource = Resource(redis.Redis.from_url(resource_url), name)
    terms = Recorder(2 * index)  # the leadership, as holds (acquire at election, release at revocation)
    acts = Recorder(2 * index + 1)  # what it did as leader

    def deadline_ns() -> Optional[int]:
        deadline = leader.lock.deadline
        return None if deadline is None else int(deadline * 1e9)

    def elected(term: int) -> None:
        terms.ok("acquire", {"fence": term, "deadline": deadline_ns()})

    def revoked(term: int) -> None:
        terms.invoke("release", {"deadline": deadline_ns()})
        terms.ok("release")
        terms.note("revoked", term)
        terms.invoke("acquire", {"campaign": True})

    leader = Leader(client, name, LEASE, on_elected=elected, on_revoked=revoked)
    terms.invoke("acquire", {"campaign": True})
    leader.campaign(blocking=False)
    announced = False
    writes = 0
    while not stop.is_set():
        term = leader.term
        acts.invoke("act", {"term": term})  # before the check: an act invoked later saw is_leader after it
        if not leader.is_leader:
            acts.fail("act", "not leader")
            time.sleep(0.002)
            continue
        acts.ok("act")
        acts.invoke("read", {"fence": term})
        elements = resource.fenced_read(term)
        if elements is None:
            acts.fail("read", "stale fence")
            continue
        acts.ok("read", len(elements))
        if writes >= 3 and not announced:
            announced = True
            ready.put((index, os.getpid(), term))
            resume.get(timeout=30)  # paused in here by the parent
        element = f"{index}-{writes}"
        acts.invoke("write", {"fence": term, "element": element})
        if resource.fenced_write(term, [*elements, element]):
            acts.ok("write")
            writes += 1
        else:
            acts.fail("write", "stale fence")
        time.sleep(0.002)
    leader.resign()
    out.put((index, os.getpid(), terms.events + acts.events))


def test_a_leader_paused_past_its_lease_is_revoked_before_it_acts_again(redis_servers):
    lock_server, resource_server = redis_servers(2)
    ready, out, stop = CTX.Queue(), CTX.Queue(), CTX.Event()
    resumes = [CTX.Queue() for _ in range(3)]
    procs = [CTX.Process(target=_paused_contender, daemon=True,
                         args=(lock_server.url, resource_server.url, "election", index, ready, resumes[index], stop,
                               out))
             for index in range(3)]
    for proc in procs:
        proc.start()
    admin = lock_server.client()
    pauses = []  # (pid, term, stopped_at, continued_at, leader during the pause)
    try:
        for _ in range(2):
            index, pid, term = ready.get(timeout=20)
            os.kill(pid, signal.SIGSTOP)
            stopped_at = time.monotonic_ns()
            time.sleep(3 * LEASE)
            successor = lock_holder(admin, "election")
            continued_at = time.monotonic_ns()
            os.kill(pid, signal.SIGCONT)
            resumes[index].put(None)
            pauses.append((pid, term, stopped_at, continued_at, successor))
        time.sleep(2 * LEASE)
    finally:
        stop.set()
        for proc, resume in zip(procs, resumes):
            os.kill(proc.pid, signal.SIGCONT)
            resume.put(None)  # for a leader that announced after the last pause: nobody pauses it
    results = [out.get(timeout=30) for _ in procs]
    for proc in procs:
        proc.join(10)
    pids = {index: pid for index, pid, _ in results}
    history = History.merge(events for _, _, events in results)
    ops = history.operations()

    for pid, old_term, stopped_at, continued_at, successor in pauses:
        # Someone else led during the pause, in a later term.
        assert successor is not None and successor.pid != pid and successor.fence > old_term
        index = next(i for i, p in pids.items() if p == pid)
        mine = [op for op in ops if op.process == 2 * index + 1]
        revoked_at = next(note.time for note in history.notes("revoked")
                          if note.process == 2 * index and note.value == old_term)
        # on_revoked came from the loss signal once the process ran again, and promptly.
        assert continued_at < revoked_at < continued_at + 0.5e9
        # The write it had decided on before the pause went out after it, and was refused.
        stale = [op for op in mine if op.f == "write" and op.args["fence"] == old_term and op.start > stopped_at]
        assert [op.type for op in stale] == [FAIL]
        # Every check made after the pause said "not leader" until a later term began, which came
        # after on_revoked of the old one.
        later = [op for op in mine if op.f == "act" and op.start > continued_at]
        assert later, "the process acted (checked) again after the pause"
        assert all(op.type == FAIL for op in later if op.args["term"] == old_term)
        assert all(op.start > revoked_at and op.args["term"] > old_term for op in later if op.type == OK)

    # The safety checkers: at no instant two processes believed they led, terms grow in election
    # order, and no acknowledged write was lost.
    found = extract_holds(history)
    assert len(found.holds) >= 3
    for result in (check_exclusion(found.holds), check_fences(found),
                   check_lost_updates(history, Resource(resource_server.client(), "election").read())):
        assert result.valid, str(result)
    # The resource accepted writes in term order, from several leaders.
    accepted = sorted((op for op in ops if op.f == "write" and op.type == OK), key=lambda op: op.end)
    accepted_terms = [op.args["fence"] for op in accepted]
    assert accepted_terms == sorted(accepted_terms) and len(set(accepted_terms)) >= 3


# -- a forked child --------------------------------------------------------------------------------
def _forked_leader_child(leader: Any, queue: Any) -> None:
    """In a forked child of a leading process: what the child's copy says, then what its exit runs."""
    queue.put((leader.is_leader, leader.term, leader.lock.valid))
    _resign_all()  # what atexit runs when the child exits
    leader.resign()
    queue.put("exited")


def test_a_forked_child_of_the_leader_is_not_the_leader(redis_client):
    def revoked(term: int) -> None:
        redis_client.rpush("fork-election:revoked", f"{os.getpid()}:{term}")

    leader = Leader(redis_client, "fork-election", 5.0, on_revoked=revoked)
    try:
        assert leader.campaign(blocking_timeout=5)
        term = leader.term
        queue = CTX.Queue()
        child = CTX.Process(target=_forked_leader_child, args=(leader, queue), daemon=True)
        child.start()
        # The child does not lead: not is_leader, no term of its own, not even the parent's hold.
        assert queue.get(timeout=30) == (False, None, False)
        assert queue.get(timeout=30) == "exited"
        child.join(30)
        assert child.exitcode == 0
        # Its exit ran no on_revoked and released nothing: the parent still leads, in the same term.
        assert redis_client.lrange("fork-election:revoked", 0, -1) == []
        assert leader.is_leader and leader.term == term
        holder = lock_holder(redis_client, "fork-election")
        assert holder is not None and holder.fence == term
    finally:
        leader.resign()
    assert redis_client.lrange("fork-election:revoked", 0, -1) == [f"{os.getpid()}:{term}".encode()]


def _forked_async_leader_child(leader: Any, queue: Any) -> None:
    queue.put((leader.is_leader, leader.term))

    async def exit_of_the_child() -> None:
        await leader.resign()

    asyncio.run(exit_of_the_child())
    queue.put("exited")


def test_a_forked_child_of_an_asyncio_leader_is_not_the_leader(redis_server, redis_client):
    async def scenario() -> None:
        client = redis_server.async_client()
        revoked: list[int] = []

        async def on_revoked(term: int) -> None:
            revoked.append(term)
            await client.rpush("fork-aelection:revoked", f"{os.getpid()}:{term}")

        leader = AsyncLeader(client, "fork-aelection", 5.0, on_revoked=on_revoked)
        try:
            assert await leader.campaign(blocking_timeout=5)
            term = leader.term
            queue = CTX.Queue()
            child = CTX.Process(target=_forked_async_leader_child, args=(leader, queue), daemon=True)
            child.start()
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, queue.get, True, 30) == (False, None)
            assert await loop.run_in_executor(None, queue.get, True, 30) == "exited"
            await loop.run_in_executor(None, child.join, 30)
            assert child.exitcode == 0
            assert await client.lrange("fork-aelection:revoked", 0, -1) == []
            assert leader.is_leader and leader.term == term
        finally:
            await leader.resign()
            await client.aclose()
        assert revoked == [term]

    asyncio.run(scenario())
