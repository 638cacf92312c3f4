"""The commands a Redlock sends to each master and the reading of the masters' answers: shared
by :mod:`django_redis_coord.redlock` and :mod:`django_redis_coord.core.redlock.aio` (which send
each master's batch as one redis-py pipeline, see :func:`queue_commands`).  Nothing in here talks
to Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Union

from redis.exceptions import NoScriptError

from ..grants import Grant

__all__ = [
    "Command", "ScriptCall", "Tally", "accept_grant", "accept_one", "accept_pttl", "describe_master", "fence_of",
    "fence_recorded", "holder_hint", "kth_largest", "missing_scripts", "queue_commands", "script_command",
    "tally_replies",
]


class ScriptCall(NamedTuple):
    """A call of the static script ``name`` (``lua/<name>.lua``) for one master: the fan-outs
    send it as EVALSHA on a redis-py pipeline and load the script after a NOSCRIPT reply."""

    name: str
    keys: tuple
    args: tuple


#: One command for one master: a plain command tuple (``("GET", key)``) or a :class:`ScriptCall`.
Command = Union[tuple, ScriptCall]


def script_command(name: str, keys: Sequence[Any], args: Sequence[Any]) -> ScriptCall:
    """A call of the static script ``name`` with ``keys`` and ``args``."""
    return ScriptCall(name, tuple(keys), tuple(args))


def queue_commands(pipe: Any, scripts: Any, client: Any, batch: Sequence[Command], load: bool = False) -> int:
    """Queue ``batch`` on the redis-py pipeline ``pipe`` (of ``client``); ``scripts`` is the
    script registry of that kind of client (sync or asyncio).  With ``load``, SCRIPT LOAD of the
    batch's scripts goes first, in the same round trip (after a NOSCRIPT reply).  Returns how
    many replies those loads add at the front."""
    loaded = 0
    if load:
        for name in dict.fromkeys(command.name for command in batch if isinstance(command, ScriptCall)):
            pipe.script_load(scripts.get(client, name).script)
            loaded += 1
    for command in batch:
        if isinstance(command, ScriptCall):
            pipe.evalsha(scripts.get(client, command.name).sha, len(command.keys), *command.keys, *command.args)
        else:
            pipe.execute_command(*command)
    return loaded


def missing_scripts(batch: Sequence[Command], replies: Sequence[Any]) -> list[int]:
    """The script calls of ``batch`` that a master answered with NOSCRIPT (nothing ran)."""
    return [
        index
        for index, (command, reply) in enumerate(zip(batch, replies))
        if isinstance(command, ScriptCall) and isinstance(reply, NoScriptError)
    ]


def kth_largest(values: Iterable[int], k: int) -> int:
    """The ``k``-th largest of ``values`` (1-based): how long ``k`` of the holds still last."""
    return sorted(values, reverse=True)[k - 1]


@dataclass
class Tally:
    """The masters' answers to one round, sorted into yes, no and no answer."""

    ok: dict[int, Any] = field(default_factory=dict)
    refused: dict[int, Any] = field(default_factory=dict)
    failures: dict[int, BaseException] = field(default_factory=dict)


def tally_replies(replies: Sequence[Any], accept: Callable[[Any], Optional[Any]], nodes: Iterable[int]) -> Tally:
    """Sort the replies of ``nodes``: ``accept(reply)`` returns the value of a yes, or None for a no."""
    result = Tally()
    for index in nodes:
        reply = replies[index]
        if isinstance(reply, BaseException):
            result.failures[index] = reply
            continue
        value = accept(reply)
        if value is None:
            result.refused[index] = reply
        else:
            result.ok[index] = value
    return result


def accept_grant(reply: Any) -> Optional[Grant]:
    grant = Grant.from_reply(reply)
    return grant if grant.acquired else None


def accept_one(reply: Any) -> Optional[int]:
    return 1 if int(reply) == 1 else None


def accept_pttl(reply: Any) -> Optional[int]:
    pttl = int(reply)
    return pttl if pttl >= 0 else None


def holder_hint(refused: dict[int, Any]) -> Optional[float]:
    """Seconds until the earliest other holder's lease on a refusing master ends (None: unknown)."""
    remaining = [int(Grant.from_reply(reply).pttl) for reply in refused.values()]
    remaining = [ms for ms in remaining if ms >= 0]
    return min(remaining) / 1000.0 if remaining else None


def quorum_busy_ms(grants: Tally, quorum: int) -> Optional[int]:
    """After a refused attempt: milliseconds until enough of the other holds on the refusing
    masters end for a quorum to be free (the earliest a retry can succeed), from the remaining
    times the masters reported; None when they cannot tell (a hold without expiry, or too many
    masters did not answer)."""
    need = quorum - len(grants.ok)
    if need <= 0:
        return 0
    remaining = sorted(
        max(0, pttl) for pttl in (int(Grant.from_reply(reply).pttl) for reply in grants.refused.values())
        if pttl != -1
    )
    return remaining[need - 1] if len(remaining) >= need else None


def describe_master(master: Any, index: int) -> str:
    """How errors name the master ``master`` (number ``index``): its address, else its Sentinel service."""
    kwargs = getattr(getattr(master, "connection_pool", None), "connection_kwargs", {})
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    if "host" in kwargs:
        return f"{kwargs['host']}:{kwargs.get('port', 6379)}"
    service = getattr(getattr(master, "connection_pool", None), "service_name", None)
    return f"sentinel:{service}" if service else f"master {index}"


def fence_of(grants: Tally) -> tuple[int, list[int], list[int]]:
    """The Redlock fence (the largest issued), the masters that already have it, the lagging ones."""
    fence = max(grant.fence for grant in grants.ok.values())
    lagging = [i for i, grant in grants.ok.items() if grant.fence < fence]
    return fence, [i for i in grants.ok if i not in lagging], lagging


def fence_recorded(lagging: Iterable[int], replies: Sequence[list[Any]]) -> list[int]:
    """The lagging masters that recorded the fence (redlock_fence.lua answered 1)."""
    return [i for i in lagging if not isinstance(replies[i][0], BaseException) and int(replies[i][0]) == 1]
