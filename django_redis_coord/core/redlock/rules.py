"""What the sync and asyncio Redlocks share: arguments, per-master commands and quorum arithmetic.

Nothing in here talks to Redis; :mod:`django_redis_coord.core.redlock.sync` and
:mod:`django_redis_coord.core.redlock.aio` send the commands built here to every master at once,
one redis-py pipeline per master (see :mod:`django_redis_coord.core.redlock.commands`).

Each master runs the ordinary lock scripts (``lua/lock_*.lua``) on the same keys a
:class:`~django_redis_coord.Lock` of the same name uses, so a Redlock hold on a master shows up in
its holder registry and the listing tools like any lock.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional, Union

from ..arguments import Number, as_bytes, check_max_hold, check_number, drift, encode_token, new_token, to_ms
from ..events import Events
from ..exceptions import (
    InvalidLockArgument,
    InvalidLockArgumentType,
    LockError,
    LockLostError,
    LockNotOwnedError,
    QuorumUnavailable,
)
from ..holds import Hold, capped_ms, copy_hold, first_time
from ..holds import SharedHold as BaseSharedHold
from ..lock.rules import LockBase, ReleaseOnExit
from ..reporting import Reporting, check_events, report_loss
from .commands import (
    Command,
    ScriptCall,
    Tally,
    accept_one,
    accept_pttl,
    describe_master,
    holder_hint,
    kth_largest,
    quorum_busy_ms,
    script_command,
    tally_replies,
)

# QuorumUnavailable lives in exceptions, Command and ScriptCall in _redlock_commands; they stay
# importable from here.
__all__ = ["QuorumUnavailable", "RedlockBase", "Command", "ScriptCall", "DEFAULT_TIMEOUT", "DEFAULT_RETRY_DELAY"]


#: Lease of a Redlock hold when none is given (seconds).
DEFAULT_TIMEOUT = 10.0
#: Upper bound of the random pause between two attempts of a blocking acquire (seconds).
DEFAULT_RETRY_DELAY = 0.2
#: Per-master time budget of one round trip when none is given: 100 ms, at most a tenth of the TTL.
DEFAULT_NODE_TIMEOUT = 0.1


class RedlockBase(Reporting, ReleaseOnExit):
    """Arguments, commands and local state common to :class:`Redlock` and its asyncio twin."""

    kind = "redlock"

    def __init__(
        self,
        masters: Iterable[Any],
        name: Union[str, bytes],
        timeout: Number = DEFAULT_TIMEOUT,
        sleep: Number = DEFAULT_RETRY_DELAY,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        node_timeout: Optional[Number] = None,
        label: Optional[str] = None,
        auto_renew: bool = False,
        on_lost: Optional[Callable[[Any], Any]] = None,
        events: Optional[Events] = None,
        max_hold: Optional[Number] = None,
    ) -> None:
        if isinstance(masters, (str, bytes)) or not isinstance(masters, Iterable):
            raise InvalidLockArgumentType("masters must be a list of Redis clients", lock_name=name)
        masters = tuple(masters)
        if not masters:
            raise InvalidLockArgument("Redlock needs at least one master", lock_name=name)
        if len({id(master) for master in masters}) != len(masters):
            raise InvalidLockArgument("each master must be listed once", lock_name=name)
        for master in masters:
            if getattr(master, "connection_pool", None) is None:
                raise InvalidLockArgumentType(
                    f"a Redlock master must be a standalone Redis client (one per independent master), "
                    f"not {type(master).__name__}",
                    lock_name=name,
                )
        check_number("timeout", timeout, allow_none=False, positive=True, lock_name=name)
        check_number("sleep", sleep, allow_none=False, positive=False, lock_name=name)
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=name)
        if node_timeout is None:
            node_timeout = min(DEFAULT_NODE_TIMEOUT, timeout / 10.0)
        check_number("node_timeout", node_timeout, allow_none=False, positive=True, lock_name=name)
        if node_timeout > timeout / 4.0:
            raise InvalidLockArgument(
                f"node_timeout ({node_timeout}s) must be much smaller than timeout ({timeout}s): "
                "at most a quarter of it",
                lock_name=name,
            )
        # The per-master scripts' keys and arguments (this also validates name, label, auto_renew
        # and on_lost).
        self._node = LockBase(None, name, timeout=timeout, label=label, auto_renew=auto_renew, on_lost=on_lost)
        self.masters: tuple[Any, ...] = masters
        self.quorum = len(masters) // 2 + 1
        self.name: Any = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.node_timeout = float(node_timeout)
        self.label = label
        self.auto_renew = auto_renew
        self.on_lost = on_lost
        self.events = check_events(events, name)
        check_max_hold(max_hold, timeout, auto_renew, name)
        self.max_hold = max_hold
        self._ttl_ms = to_ms(timeout)
        #: Fence of each live hold by token, for re-syncing a master that lost the hold.
        self._fences: dict[bytes, int] = {}

    # -- commands -----------------------------------------------------------------------------
    def acquire_command(self, token: bytes, worker: str) -> Command:
        node = self._node
        return script_command("lock_acquire", node.acquire_keys(), node.acquire_args(token, 0, worker))

    def fence_command(self, token: bytes, fence: int) -> Command:
        keys = self._node.keys
        return script_command("redlock_fence", (keys.name, keys.meta), (token, fence))

    def release_command(self, token: bytes) -> Command:
        node = self._node
        return script_command("lock_release", node.release_keys(), node.release_args(token))

    def extend_command(self, token: bytes, ms: int, mode: str) -> Command:
        node = self._node
        return script_command("lock_extend", node.extend_keys(), node.extend_args(token, ms, mode))

    def get_command(self) -> Command:
        return ("GET", self._node.keys.name)

    def only(self, nodes: Iterable[int], commands: list[Command]) -> list[list[Command]]:
        """Per-master batches: ``commands`` for the masters in ``nodes``, nothing for the others."""
        chosen = set(nodes)
        return [commands if index in chosen else [] for index in range(len(self.masters))]

    def everywhere(self, command: Command) -> list[list[Command]]:
        return [[command]] * len(self.masters)

    # -- the steps of the algorithm (the twins do the I/O) -----------------------------------------
    def acquire_arguments(
        self,
        sleep: Optional[Number],
        blocking: Optional[bool],
        blocking_timeout: Optional[Number],
        token: Optional[Union[str, bytes]],
    ) -> tuple[Number, bool, Optional[float], bytes]:
        """Checked ``(sleep, blocking, stop_at, token)`` of an acquire; refuses a second hold here."""
        if sleep is None:
            sleep = self.sleep
        check_number("sleep", sleep, allow_none=False, positive=False, lock_name=self.name)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        check_number("blocking_timeout", blocking_timeout, allow_none=True, positive=False, lock_name=self.name)
        if self.thread_local and self._state().token is not None:
            raise LockError("This thread (or task) already holds this Redlock; release it first", lock_name=self.name)
        raw = encode_token(token, self.name) if token is not None else new_token()
        stop_at = time.monotonic() + blocking_timeout if blocking and blocking_timeout is not None else None
        return sleep, bool(blocking), stop_at, raw

    @staticmethod
    def retry_delay(hint: Optional[float], sleep: Number, stop_at: Optional[float]) -> Optional[float]:
        """The random pause before the next attempt (None: ``blocking_timeout`` has run out).

        Uniform up to ``sleep``, and never past the other holder's lease end (``hint``)."""
        delay = random.uniform(0.0, sleep)
        if hint is not None:
            delay = min(delay, hint + 0.001)
        if stop_at is not None:
            remaining = stop_at - time.monotonic()
            if remaining <= 0:
                return None
            delay = min(delay, remaining)
        return delay

    def held_until(self, started: float, grants: Tally, synced: Sequence[int]) -> Optional[float]:
        """The hold's deadline when a quorum granted and recorded the fence and validity remains."""
        if len(synced) < self.quorum:
            return None
        deadline = self.quorum_deadline(started, [grants.ok[i].pttl for i in synced])
        return deadline if deadline > time.monotonic() else None

    def failed_attempt(self, grants: Tally) -> Optional[float]:
        """After an attempt that did not hold (and was undone): raise when too few masters answered,
        else the hint for the retry delay."""
        if len(grants.failures) > len(self.masters) - self.quorum:
            raise self.unreachable(grants.failures, "acquire")
        busy = quorum_busy_ms(grants, self.quorum)  # unknown: the lease is an upper bound
        self._note_refusal(busy if busy is not None else self._ttl_ms)
        return holder_hint(grants.refused)

    def tokens_of(self, replies: Sequence[Any], action: str) -> list[Optional[bytes]]:
        """The token each master has at the name (None: none, or no answer)."""
        failures = {i: reply for i, reply in enumerate(replies) if isinstance(reply, BaseException)}
        if len(failures) > len(self.masters) - self.quorum:
            raise self.unreachable(failures, action)
        return [None if isinstance(reply, BaseException) else as_bytes(reply) for reply in replies]

    def held_by_one(self, tokens: Sequence[Optional[bytes]]) -> bool:
        present = [token for token in tokens if token is not None]
        return any(present.count(token) >= self.quorum for token in set(present))

    def held_by(self, tokens: Sequence[Optional[bytes]], token: bytes) -> bool:
        return list(tokens).count(token) >= self.quorum

    def hold_to_release(self) -> tuple[Hold, bytes]:
        hold = self._state()
        if hold.token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        return hold, hold.token

    def released(self, hold: Hold, replies: Sequence[Any]) -> None:
        """Settle a release from the masters' answers (raising as redis-py's Lock would)."""
        tally = tally_replies(replies, accept_one, range(len(self.masters)))
        lost = hold.lost
        if len(tally.ok) < self.quorum and len(tally.ok) + len(tally.failures) >= self.quorum:
            # Maybe still held where no answer came: keep the token so that release can be retried.
            raise self.unreachable(tally.failures, "release")
        self._forget(hold)
        if len(tally.ok) < self.quorum:
            self._report_loss(hold)
            raise LockNotOwnedError("Cannot release a Redlock that's no longer owned", lock_name=self.name)
        if lost:
            raise LockLostError("The Redlock was lost before it was released", lock_name=self.name)

    def hold_to_extend(self, additional_time: Number, replace_ttl: bool) -> tuple[Hold, Command]:
        check_number("additional_time", additional_time, allow_none=False, positive=True, lock_name=self.name)
        hold = self._state()
        if hold.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        mode = "replace" if replace_ttl else "add"
        return hold, self.extend_command(hold.token, to_ms(additional_time), mode)

    def extended(self, hold: Hold, sent_at: float, replies: Sequence[Any]) -> list[int]:
        """Settle an extend: new deadline from a quorum, else raise; returns the masters to repair
        (they answered that they no longer have the hold)."""
        tally = tally_replies(replies, accept_pttl, range(len(self.masters)))
        if len(tally.ok) >= self.quorum:
            hold.deadline = self.quorum_deadline(sent_at, tally.ok.values())
            return list(tally.refused)
        if len(tally.refused) > len(self.masters) - self.quorum:
            raise LockNotOwnedError("Cannot extend a Redlock that's no longer owned", lock_name=self.name)
        raise self.unreachable(tally.failures, "extend")

    def check_reacquire(self) -> None:
        if self._state().token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)

    def _report_loss(self, hold: Hold) -> None:
        """Tell ``events`` of the loss of ``hold`` (each flavour: see :mod:`._reporting`)."""
        raise NotImplementedError

    def mark_lost(self, hold: Hold) -> Any:
        """Flag ``hold`` lost once and tell ``events``; returns what ``on_lost`` returned (None
        when not called)."""
        if not first_time(hold, "lost"):
            return None
        report_loss(self, hold)  # on_lost runs even when the events object raised
        callback = self.on_lost
        return callback(self) if callback is not None else None

    def ensure_valid(self) -> None:
        """Raise :class:`~django_redis_coord.exceptions.LockLostError` unless the hold is still valid."""
        if not self.valid:
            raise LockLostError("The Redlock is no longer held", lock_name=self.name)

    # -- reading the answers ------------------------------------------------------------------
    def quorum_deadline(self, sent_at: float, pttls: Iterable[int]) -> float:
        """Monotonic instant until which a quorum of the holds surely lasts (validity - drift)."""
        ttl = kth_largest(pttls, self.quorum) / 1000.0
        return sent_at + ttl - drift(ttl)

    def unreachable(self, failures: dict[int, BaseException], action: str) -> QuorumUnavailable:
        described = {describe_master(self.masters[index], index): error for index, error in failures.items()}
        details = "; ".join(f"{where}: {type(error).__name__}: {error}" for where, error in described.items())
        answered = len(self.masters) - len(failures)
        return QuorumUnavailable(
            f"Redlock {self.name!r}: cannot {action}: only {answered} of {len(self.masters)} masters answered "
            f"within {self.node_timeout:g}s, {self.quorum} needed ({details})",
            described,
            lock_name=self.name,
        )

    # -- local state --------------------------------------------------------------------------
    def _state(self) -> Hold:
        return self.local.hold  # type: ignore[attr-defined]

    @property
    def view(self) -> Optional[str]:
        """The view named in the holder info of this lock's holds (``@locked`` sets its dotted path)."""
        return self._node.view

    @view.setter
    def view(self, value: Optional[str]) -> None:
        self._node.view = value

    def copy_hold_to(self, target: RedlockBase) -> None:
        """Make ``target`` (a Redlock on the same name and masters: this one's twin of the other
        side) hold what this one holds in the current thread or task, its fences by token too."""
        copy_hold(self._state(), target._state())
        target._fences.update(self._fences)

    def _own(self, token: bytes, fence: int, deadline: float) -> Hold:
        hold = self._state()
        self._began(hold)
        hold.token = token
        hold.fence = fence
        hold.deadline = deadline
        hold.lost = False
        self._fences[token] = fence
        return hold

    def _forget(self, hold: Hold) -> None:
        if hold.token is not None:
            self._fences.pop(hold.token, None)
        hold.token = None

    @property
    def fence(self) -> Optional[int]:
        """Fence token of the current hold (``None`` when not held here); see docs/redlock.md."""
        hold = self._state()
        return hold.fence if hold.token is not None else None

    @property
    def deadline(self) -> Optional[float]:
        """``time.monotonic()`` instant after which a quorum of the holds may have ended."""
        hold = self._state()
        return hold.deadline if hold.token is not None else None

    @property
    def valid(self) -> bool:
        """True while held here, not found lost, and the validity time has not run out."""
        hold = self._state()
        if hold.token is None or hold.lost or hold.deadline is None:
            return False
        return time.monotonic() < hold.deadline

    def deadline_for(self, sent_at: float, pttl_ms: int) -> Optional[float]:
        """Used by the watchdog: ``pttl_ms`` is what a quorum of masters still grants."""
        if pttl_ms < 0:
            return None
        ttl = pttl_ms / 1000.0
        return sent_at + ttl - drift(ttl)

    @property
    def renew_ttl_ms(self) -> int:
        return self._ttl_ms

    def queue_renewal(self, pipe: Any, token: bytes, claim: bool = False, hold: Any = None) -> None:
        """Add the renewal of hold ``token`` to a watchdog batch (see ``self.redis``); a Redlock
        grants no provisional holds, so there is nothing to ``claim``.  ``max_hold`` caps the TTL
        asked for as for a lock."""
        pipe.add(token, capped_ms(self._ttl_ms, hold, self.max_hold))

    # -- watchdog batch -----------------------------------------------------------------------
    def renewal_commands(self, renewals: Sequence[tuple[bytes, int]]) -> list[Command]:
        return [self.extend_command(token, ms, "replace") for token, ms in renewals]

    def renewal_outcome(self, replies: Sequence[Any], offset: int) -> tuple[Any, list[int]]:
        """What the watchdog gets for one hold: the quorum pttl, -2 (lost) or an error; plus the
        masters to repair (renewed on a quorum, but this master had lost the hold)."""
        column = [
            replies[i][offset] if isinstance(replies[i], list) else replies[i] for i in range(len(self.masters))
        ]
        tally = tally_replies(column, accept_pttl, range(len(self.masters)))
        if len(tally.ok) >= self.quorum:
            return kth_largest(tally.ok.values(), self.quorum), list(tally.refused)
        if len(tally.refused) > len(self.masters) - self.quorum:
            return -2, []
        return self.unreachable(tally.failures, "renew"), []

    def repair_commands(self, token: bytes, worker: str) -> list[Command]:
        """Take the lock again on a master that lost it (restarted) and give it the hold's fence."""
        commands = [self.acquire_command(token, worker)]
        fence = self._fences.get(token)
        if fence is not None:
            commands.append(self.fence_command(token, fence))
        return commands

    def __repr__(self) -> str:
        return (
            f"<{type(self).__module__}.{type(self).__qualname__} name={self.name!r} "
            f"masters={len(self.masters)} timeout={self.timeout!r}>"
        )


class SharedHold(BaseSharedHold):
    """A Redlock's hold state shared by all threads; it starts with fence, deadline and lost set."""

    initial = {"fence": None, "deadline": 0.0, "lost": False}
