"""Who holds a lock or a semaphore permit: the one holder record, and reading it for one name.

:class:`HolderInfo` is what :func:`lock_holder`, :func:`semaphore_holders`, the listing service
(:mod:`django_redis_coord.listing`), ``manage.py locks`` and the admin page all return and show.
Its token is the holder's secret: it stays out of ``repr``, and only :func:`mask_token` (its
first characters) or :func:`hold_digest` (a digest) of it is ever displayed.

The functions here read one lock, semaphore or read-write lock in one atomic step (no keyspace
scan).  What a record shows and how (kinds, ids, masking, durations) is in
:mod:`django_redis_coord.core.holder_fields`, whose names are importable from here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional, Union

from .arguments import as_bytes
from .holder_fields import (
    KINDS,
    MANY_HOLDERS,
    format_ms,
    hold_digest,
    holder_id,
    mask_token,
    masked_record,
    owner_fields,
    parse_holder_id,
    parse_info,
    text,
    token_mode,
)
from .keys import encode_name, keys_for
from .scripts import async_scripts, sync_scripts

__all__ = [
    "KINDS", "HolderInfo", "format_ms", "hold_digest", "holder_id", "holders", "lock_holder", "mask_token",
    "masked_record", "owner_fields", "parse_holder_id", "parse_info", "token_mode", "MANY_HOLDERS", "text",
]

@dataclass
class HolderInfo:
    """A live holder of a lock, or of one semaphore permit, with what operators need to know.

    (A plain dataclass, not a frozen one: a listing builds thousands of these and frozen ones
    cost eight times as much to create.)
    """

    #: ``"lock"``, ``"sem"`` or ``"rw"`` (see ``KINDS``).
    kind: str
    #: The Redis key of the lock or semaphore (``KEY_PREFIX`` included), as bytes.
    raw_name: bytes
    #: The holder's secret: kept out of ``repr`` (and so out of logs); show ``masked_token``.
    token: bytes = field(repr=False)
    fence: int
    #: Remaining time of the hold in ms when it was read; ``None``: no expiry.
    ttl_ms: Optional[int]
    #: When the hold was granted, in server milliseconds since the epoch.
    acquired_at_ms: Optional[int]
    host: Optional[str] = None
    pid: Optional[int] = None
    thread: Optional[str] = None
    label: Optional[str] = None
    #: The dotted path of the view a ``@locked`` hold guards.
    view: Optional[str] = None
    extra: dict = field(default_factory=dict)
    #: Callers queued for the primitive.
    waiters: int = 0
    #: Semaphores: permits in use and the limit (``None`` for a lock); read-write locks: how many
    #: hold it (the readers' count, or 1 for the writer), no limit.
    used: Optional[int] = None
    limit: Optional[int] = None
    #: The server's clock (ms) when the details were read (0: not known).
    server_now_ms: int = 0
    #: The prefix of the listing that read it (a site's ``KEY_PREFIX:``), left out of ``short_name``.
    prefix: bytes = b""

    @property
    def name(self) -> str:
        """The Redis key, decoded."""
        return text(self.raw_name)

    @property
    def short_name(self) -> str:
        """The name as the application wrote it: without the listing's prefix."""
        if self.prefix and self.raw_name.startswith(self.prefix):
            return text(self.raw_name[len(self.prefix):])
        return self.name

    @property
    def primitive_id(self) -> str:
        """The lock's or semaphore's id (``holder_id()``): its admin page."""
        return holder_id(self.kind, self.raw_name)

    @property
    def id(self) -> str:
        """One hold's own id: the primitive's, and for a semaphore permit (or a read-write lock's
        hold) its fence after a dot, since several holders of one name are listed at once."""
        return f"{self.primitive_id}.{self.fence}" if self.kind in MANY_HOLDERS else self.primitive_id

    @property
    def kind_title(self) -> str:
        return KINDS.get(self.kind, self.kind)

    @property
    def masked_token(self) -> str:
        return mask_token(self.token)

    @property
    def digest(self) -> str:
        """``hold_digest()`` of the token."""
        return hold_digest(self.token)

    @property
    def owner(self) -> str:
        """``host pid N thread`` (what is known of it), for tables."""
        parts = [self.host or "?"]
        if self.pid is not None:
            parts.append(f"pid {self.pid}")
        if self.thread:
            parts.append(self.thread)
        return " ".join(parts)

    @property
    def role(self) -> Optional[str]:
        """What the hold is for, from its holder record: ``"leader"`` (:class:`~django_redis_coord.Leader`),
        ``"task"`` (a unique task of Celery or of Django's tasks framework), ``"command"`` (a
        singleton management command, ``manage.py locks run``); ``None`` for a plain hold."""
        role = self.extra.get("role")
        return role if isinstance(role, str) else None

    @property
    def term(self) -> Optional[int]:
        """A leader's term: the fence of its hold (``None`` for any other hold)."""
        return self.fence if self.role == "leader" else None

    @property
    def role_summary(self) -> str:
        """The role for a table cell: ``leader``, ``task running``, ``task pending``, ``command``; ``""``."""
        role = self.role
        if role == "task":
            state = self.extra.get("state")
            return f"task {state}" if isinstance(state, str) and state else role
        return role or ""

    @property
    def role_details(self) -> list[tuple[str, Any]]:
        """The holder record's fields besides who holds, in the order operators read them: a
        read-write lock's mode (told by the token), the role (and a leader's term) first, then
        ``extra``'s other fields by name."""
        details: list[tuple[str, Any]] = []
        shown = {"role", "mode"} if self.mode is not None else {"role"}
        if self.mode is not None:
            details.append(("mode", self.mode))
        if self.role is not None:
            details.append(("role", self.role))
        if self.term is not None:
            details.append(("term", self.term))
        details += sorted((key, value) for key, value in self.extra.items() if key not in shown)
        return details

    @property
    def label_view(self) -> str:
        """``"label / view"``, either alone (once when they are the same, as ``@locked``'s default
        label is its view), or ``""``."""
        return " / ".join(dict.fromkeys(part for part in (self.label, self.view) if part))

    @property
    def acquired_at(self) -> Optional[datetime]:
        if self.acquired_at_ms is None:
            return None
        return datetime.fromtimestamp(self.acquired_at_ms / 1000.0, tz=timezone.utc)

    @property
    def held_for_ms(self) -> Optional[int]:
        if self.acquired_at_ms is None or not self.server_now_ms:
            return None
        return max(0, self.server_now_ms - self.acquired_at_ms)

    @property
    def ttl(self) -> str:
        """The remaining time, for people (``format_ms()``)."""
        return format_ms(self.ttl_ms)

    @property
    def held_for(self) -> str:
        """How long it has been held, for people; ``?`` when unknown."""
        held = self.held_for_ms
        return "?" if held is None else format_ms(held)

    @property
    def mode(self) -> Optional[str]:
        """A read-write lock's hold: ``"read"`` or ``"write"`` (``token_mode()``); ``None`` otherwise."""
        return token_mode(self.kind, self.token)

    @property
    def kind_summary(self) -> str:
        """The kind for a table cell: ``lock``, ``sem``, ``rw read``, ``rw write``."""
        mode = self.mode
        return f"{self.kind} {mode}" if mode else self.kind

    @property
    def usage(self) -> Optional[str]:
        """``"n/limit"`` for a semaphore permit, ``"n readers"`` or ``"writer"`` for a read-write
        lock's hold, ``None`` for a lock."""
        if self.used is None:
            return None
        if self.kind == "rw":
            return "writer" if self.mode == "write" else f"{self.used} reader{'s' if self.used != 1 else ''}"
        return f"{self.used}/{self.limit if self.limit is not None else '?'}"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the token masked): one element of ``manage.py locks list --json``."""
        acquired = self.acquired_at
        return {
            "id": self.id,
            "name": self.short_name,
            "kind": self.kind,
            "fence": self.fence,
            "ttl_ms": self.ttl_ms,
            "acquired_at": acquired.isoformat() if acquired else None,
            "acquired_at_ms": self.acquired_at_ms,
            "held_for_ms": self.held_for_ms,
            "owner": {"host": self.host, "pid": self.pid, "thread": self.thread, "label": self.label,
                      "view": self.view},
            "token": self.masked_token,
            "waiters": self.waiters,
            "used": self.used,
            "limit": self.limit,
            "extra": self.extra,
            "role": self.role,
            "term": self.term,
            "mode": self.mode,
            "key": self.name,
        }

    @classmethod
    def from_inspect(cls, name: bytes, kind: str, reply: Any, **more: Any) -> Optional[HolderInfo]:
        """The holder in an inspect script's ``token, pttl, fence, info, since, waiters`` reply."""
        token, pttl, fence, info, since, waiters = reply[:6]
        token = as_bytes(token)
        if token is None:
            return None
        pttl = int(pttl)
        return cls(
            kind=kind,
            raw_name=name,
            token=token,
            fence=int(fence or 0),
            ttl_ms=pttl if pttl >= 0 else None,
            acquired_at_ms=int(since) if since else None,
            waiters=int(waiters),
            **owner_fields(parse_info(info), token, info),
            **more,
        )


def _inspect_call(client: Any, registry: Any, name: Union[str, bytes]) -> tuple[bytes, Any]:
    raw = encode_name(name)
    keys = keys_for(raw, b"lock")
    script = registry.get(client, "lock_inspect")
    return raw, script((keys.name, keys.meta, keys.queue), (), client=client)


def lock_holder(client: Any, name: Union[str, bytes]) -> Optional[HolderInfo]:
    """The live holder of lock ``name`` with its metadata, or ``None`` when it is free."""
    raw, reply = _inspect_call(client, sync_scripts, name)
    return HolderInfo.from_inspect(raw, "lock", reply)


def holders(client: Any, name: Union[str, bytes]) -> list[HolderInfo]:
    """All live holders of ``name`` (at most one for a lock)."""
    holder = lock_holder(client, name)
    return [holder] if holder is not None else []


async def async_lock_holder(client: Any, name: Union[str, bytes]) -> Optional[HolderInfo]:
    """Asyncio twin of :func:`~django_redis_coord.lock_holder`."""
    raw, reply = _inspect_call(client, async_scripts, name)
    return HolderInfo.from_inspect(raw, "lock", await reply)


# -- semaphores ------------------------------------------------------------------------------------
__all__ += ["semaphore_holders", "async_semaphore_holders", "permits_from_inspect"]


def permits_from_inspect(name: bytes, reply: Any, kind: str = "sem") -> list[HolderInfo]:
    """The live permits in a ``sem_inspect.lua`` "full" reply, oldest grant first (``kind``:
    ``"rw"`` for the holds of a read-write lock, which the same script reads)."""
    now_ms, limit, used, waiters = reply[:4]
    counts = {"used": int(used), "limit": int(limit) if limit else None, "server_now_ms": int(now_ms)}
    permits = []
    for index in range(5, len(reply), 3):
        token, pttl, record = reply[index : index + 3]
        if not record:  # no record of this kind: another kind's member under the same name
            continue
        fence, since, _claim, info = text(record).split(" ", 3)
        permit = HolderInfo.from_inspect(name, kind, (token, pttl, fence, info, since or None, waiters), **counts)
        if permit is not None:
            permits.append(permit)
    permits.sort(key=lambda permit: permit.fence)
    return permits


def _sem_inspect_call(client: Any, registry: Any, name: Union[str, bytes], kind: bytes = b"sem") -> tuple[bytes, Any]:
    raw = encode_name(name)
    keys = keys_for(raw, kind)
    script = registry.get(client, "sem_inspect")
    return raw, script((keys.name, keys.meta, keys.queue), ("full",), client=client)


def semaphore_holders(client: Any, name: Union[str, bytes]) -> list[HolderInfo]:
    """Every live permit of semaphore ``name`` with its holder's metadata (fence order)."""
    raw, reply = _sem_inspect_call(client, sync_scripts, name)
    return permits_from_inspect(raw, reply)


async def async_semaphore_holders(client: Any, name: Union[str, bytes]) -> list[HolderInfo]:
    """Asyncio twin of :func:`~django_redis_coord.holders.semaphore_holders`."""
    raw, reply = _sem_inspect_call(client, async_scripts, name)
    return permits_from_inspect(raw, await reply)


# -- read-write locks --------------------------------------------------------------------------------
__all__ += ["rwlock_holders", "async_rwlock_holders"]


def rwlock_holders(client: Any, name: Union[str, bytes]) -> list[HolderInfo]:
    """Every live hold of read-write lock ``name`` (fence order): its readers, or its writer.

    Each holder's ``extra["mode"]`` is ``"read"`` or ``"write"``; ``used`` is how many hold it."""
    raw, reply = _sem_inspect_call(client, sync_scripts, name, b"rw")
    return permits_from_inspect(raw, reply, "rw")


async def async_rwlock_holders(client: Any, name: Union[str, bytes]) -> list[HolderInfo]:
    """Asyncio twin of :func:`~django_redis_coord.rwlock_holders`."""
    raw, reply = _sem_inspect_call(client, async_scripts, name, b"rw")
    return permits_from_inspect(raw, await reply, "rw")
