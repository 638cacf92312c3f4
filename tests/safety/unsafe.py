"""Deliberately unsafe locks and a semaphore: the controls that prove the checkers can fail.

Each one is a common way to get distributed locking wrong; run under the same workload as the
real primitives, the checkers must report it.

* :class:`GetThenDelLock` - the textbook identity lock: tokens and a TTL, but ``release`` is a
  ``GET`` followed by a separate ``DEL``.  If the TTL runs out between the two (a slow network, a
  pause of the client: ``release_gap``), the ``DEL`` removes the next holder's lock and a third
  client gets it while the second still holds it.
* :class:`TokenlessLock` - ``SET NX PX`` without a token: ``release`` deletes whatever is there,
  so a holder whose TTL ran out frees its successor's hold.  No fences either.
* :class:`RacyFenceLock` - a correct lock whose fence comes from a separate ``INCR`` made before
  the grant: when the grant comes up to ``gap`` later, two contenders can be granted in the opposite
  order of their fences.
* :class:`RacySemaphore` - an identity semaphore without its ``WATCH``: it counts holders
  and adds itself in two steps, so several contenders all see a free permit.

They speak the small adapter interface of :mod:`tests.safety.workloads` (``acquire``,
``release``, ``fence``, ``deadline_ns``).
"""

from __future__ import annotations

import random
import secrets
import time
from typing import Any, Optional

#: Poll interval of the unsafe locks' blocking acquire (they have no wait queue).
POLL = 0.001

_RELEASE_IF_OWNED = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class _Unsafe:
    """What every control keeps: its client, TTL, token, fence and local deadline (ns)."""

    #: Recorded with the acquire (nothing for these).
    details: dict = {}

    def __init__(self, client: Any, timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self.token: Optional[bytes] = None
        self.fence: Optional[int] = None
        self._deadline: Optional[int] = None

    def deadline_ns(self) -> Optional[int]:
        return self._deadline


class _PollingLock(_Unsafe):
    """``SET NX PX`` with a token, polled until ``blocking_timeout``; the base of the unsafe locks."""

    def __init__(self, client: Any, name: str, timeout: float) -> None:
        super().__init__(client, timeout)
        self.name = name

    def _try(self, token: bytes) -> bool:
        return bool(self.client.set(self.name, token, px=int(self.timeout * 1000), nx=True))

    def _take_fence(self) -> Optional[int]:
        return None

    def acquire(self, blocking_timeout: float) -> bool:
        token = secrets.token_hex(16).encode()
        stop_at = time.monotonic() + blocking_timeout
        while True:
            sent = time.monotonic_ns()
            if self._try(token):
                self.token = token
                self._deadline = sent + int(self.timeout * 1e9)
                self.fence = self._take_fence()
                return True
            if time.monotonic() >= stop_at:
                return False
            time.sleep(POLL)


class GetThenDelLock(_PollingLock):
    """The textbook unsafe identity lock (GET, compare, then DEL), with a fence taken after the grant."""

    def __init__(self, client: Any, name: str, timeout: float, gap: float = 0.0) -> None:
        super().__init__(client, name, timeout)
        self.gap = gap

    def _take_fence(self) -> Optional[int]:
        return int(self.client.incr(self.name + ":fence"))

    def release(self) -> str:
        current = self.client.get(self.name)
        if current != self.token:
            return "not-owned"
        if self.gap:
            time.sleep(self.gap)
        self.client.delete(self.name)  # whoever holds the key now loses it
        return "ok"


class TokenlessLock(_PollingLock):
    """``SET NX PX`` and an unconditional ``DEL``: no token check, no fence."""

    def release(self) -> str:
        self.client.delete(self.name)
        return "ok"


class RacyFenceLock(_PollingLock):
    """A correct token lock whose fence is drawn before the grant, so fences can run backwards."""

    def __init__(self, client: Any, name: str, timeout: float, gap: float = 0.0) -> None:
        super().__init__(client, name, timeout)
        self.gap = gap
        self._release = client.register_script(_RELEASE_IF_OWNED)
        self._drawn: Optional[int] = None

    def _try(self, token: bytes) -> bool:
        self._drawn = int(self.client.incr(self.name + ":fence"))
        if self.gap:
            time.sleep(random.uniform(0, self.gap))
        return super()._try(token)

    def _take_fence(self) -> Optional[int]:
        return self._drawn

    def release(self) -> str:
        return "ok" if self._release(keys=[self.name], args=[self.token]) else "not-owned"


class RacySemaphore(_Unsafe):
    """An identity semaphore without WATCH: SCARD, compare, then SADD (and SREM to release)."""

    def __init__(self, client: Any, name: str, limit: int, timeout: float) -> None:
        super().__init__(client, timeout)
        self.holders_key = f"semaphore::{name}::holders"
        self.limit = limit

    def acquire(self, blocking_timeout: float) -> bool:
        token = secrets.token_hex(16).encode()
        stop_at = time.monotonic() + blocking_timeout
        while True:
            if self.client.scard(self.holders_key) < self.limit:
                time.sleep(POLL)  # the window WATCH would have closed
                self.client.sadd(self.holders_key, token)
                self.token = token
                self._deadline = None
                return True
            if time.monotonic() >= stop_at:
                return False
            time.sleep(POLL)

    def release(self) -> str:
        return "ok" if self.client.srem(self.holders_key, self.token) else "not-owned"
