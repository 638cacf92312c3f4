"""A lock named by its holder's identity, made safe: the release check and delete are one atomic script.

>>> lock = IdentityLock(client, "test-lock")      # doctest: +SKIP
>>> lock.acquire("peter", 3600)
True
>>> lock.release("tom")
False
>>> lock.release("peter")
True
"""

from __future__ import annotations

from typing import Any, Optional, Union

from .arguments import Number, check_number, encode_token
from .lock.sync import Lock

__all__ = ["IdentityLock"]


class IdentityLock:
    """A lock whose holder is named by the caller (``identity``) instead of a random token.

    ``acquire(identity, timeout)`` returns True when granted (``timeout`` in seconds);
    ``release(identity)`` returns True when the lock was released or was not held, False when
    someone else holds it.  Grants carry fence tokens like :class:`Lock` (``last_fence``).
    """

    def __init__(self, client: Any, key: Union[str, bytes]) -> None:
        self.client = client
        self.key = key
        self._lock = Lock(client, key)
        self.last_fence: Optional[int] = None

    def acquire(self, identity: Union[str, bytes], timeout: Optional[Number]) -> bool:
        check_number("timeout", timeout, allow_none=True, positive=True, lock_name=self.key)
        token = encode_token(identity, self.key)
        lock = Lock(self.client, self.key, timeout=timeout) if timeout != self._lock.timeout else self._lock
        self._lock = lock
        grant = lock.line.acquire(token, 0, "identity")
        if grant.acquired:
            self.last_fence = grant.fence
        return grant.acquired

    def release(self, identity: Union[str, bytes]) -> bool:
        token = encode_token(identity, self.key)
        script = self._lock.scripts.get(self.client, "lock_release")
        return int(script(self._lock.release_keys(), self._lock.release_args(token), client=self.client)) != 0
