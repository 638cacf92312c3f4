"""A lock's hand-over hook: its key passed between two tokens in one transaction, so that nothing
can take it in between.

``lock.hand_over = HandOver()`` (a sync :class:`~django_redis_coord.core.lock.sync.Lock`); then

* ``hand_over.replaces = token``: each acquire call of the lock ends the hold of ``token`` in the
  same MULTI/EXEC as it takes the key (a reservation taken over by the run it reserved, with a
  fresh fence);
* ``hand_over.hands_to = other`` (a lock on the same key, with ``replaces`` set): the release grants
  the key to ``replaces`` with ``other``'s settings in the same MULTI/EXEC, when the hold released is
  still this lock's (WATCH): a hold already lost or ended hands nothing over.

With neither set, the lock's calls are its own.  The Celery integration's unique tasks use it: a
reservation taken over by its run, and a run that sent a retry handing the key to the retry's
reservation.  The scripts and their arguments are the lock's own (one transaction of two scripts).
"""

from __future__ import annotations

from typing import Any, Optional

from ..arguments import as_bytes
from ..exceptions import LockNotOwnedError
from ..grants import Grant
from ..queue.rules import NO_REPLY
from ..scripts import queue_script
from ..side.sync import worker_name
from ..transactions import optimistic

__all__ = ["HandOver"]


class HandOver:
    """The hand-over hook of one sync lock (see the module)."""

    def __init__(self, replaces: Optional[bytes] = None, hands_to: Any = None) -> None:
        #: The token whose hold an acquire of the lock ends as it takes the key (``None``: none).
        self.replaces = replaces
        #: The lock whose settings the key is granted with to ``replaces`` at the release (``None``: none).
        self.hands_to = hands_to

    def acquire(self, lock: Any, token: bytes, enqueue: int, worker: str,
                reply_to: tuple[bytes, Any] = NO_REPLY) -> Optional[Grant]:
        """The lock's acquire call, ending the hold of ``replaces`` in the same transaction; ``None``
        when there is nothing to replace (the lock makes its own call)."""
        if self.replaces is None:
            return None
        release = lock.scripts.get(lock.redis, "lock_release")
        acquire = lock.scripts.get(lock.redis, lock.acquire_script)
        with lock.redis.pipeline(transaction=True) as pipe:
            queue_script(pipe, release, lock.release_keys(), lock.release_args(self.replaces))
            queue_script(pipe, acquire, lock.acquire_keys(), lock.acquire_args(token, enqueue, worker, reply_to))
            _ended, reply = pipe.execute()
        return lock.grant_from_reply(reply)  # type: ignore[no-any-return]

    def release(self, lock: Any, token: bytes) -> bool:
        """The lock's release, granting the key to ``replaces`` through ``hands_to`` in the same
        transaction; False when there is nothing to hand over (the lock makes its own call).
        Raises :class:`LockNotOwnedError` when the hold was lost or had ended."""
        target, reserved = self.hands_to, self.replaces
        if target is None or reserved is None:
            return False
        release = lock.scripts.get(lock.redis, "lock_release")
        acquire = lock.scripts.get(lock.redis, target.acquire_script)
        worker = worker_name()

        def hand_over(pipe: Any) -> bool:
            if as_bytes(pipe.get(lock.name)) != token:
                return False  # lost (its TTL ran out) or ended: nothing of it to hand over
            pipe.multi()
            # The release grants the key to a queued waiter first: the retry's run waiting for it.
            queue_script(pipe, release, lock.release_keys(), lock.release_args(token))
            queue_script(pipe, acquire, target.acquire_keys(), target.acquire_args(reserved, 0, worker))
            return True

        if not optimistic(lock.redis, lock.name).run(hand_over):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=lock.name)
        return True
