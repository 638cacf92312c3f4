"""How the listing talks to Redis: read-only scripts sent in one pipeline (one per primary on a
Redis Cluster), loaded only when the server lacks them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from ..scripts import sync_scripts

#: ``(script name, keys)``: one script call.
Call = tuple[str, Sequence[bytes]]


def is_cluster(client: Any) -> bool:
    return hasattr(client, "get_primaries") and hasattr(client, "nodes_manager")


def server_now_ms(time_reply: Any) -> int:
    """The server's clock in ms from a ``TIME`` reply."""
    seconds, micros = time_reply
    return int(seconds) * 1000 + int(micros) // 1000


def send_with_scripts(client: Any, calls: Sequence[Call]) -> list[Any]:
    """EVALSHA the ``(script name, keys)`` calls in one pipeline; load the scripts the server
    lacks (NOSCRIPT: nothing ran) and send the calls once more; raise the first error."""
    scripts = [sync_scripts.get(client, name) for name, _ in calls]
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for script, (_, keys) in zip(scripts, calls):
            pipe.evalsha(script.sha, len(keys), *keys)
        replies = pipe.execute(raise_on_error=False)
        missing = {id(s): s for s, reply in zip(scripts, replies) if isinstance(reply, NoScriptError)}
        if not missing or attempt:
            break
        for script in missing.values():
            client.script_load(script.script)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def run_scripts(client: Any, calls: Sequence[Call]) -> list[Any]:
    """EVALSHA each ``(script name, keys)`` call: one round trip (per primary on a cluster)."""
    if not is_cluster(client):
        return send_with_scripts(client, calls)
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for index, (_, keys) in enumerate(calls):
        node = client.get_node_from_key(keys[0])
        by_node.setdefault(node.name, (node, []))[1].append(index)
    replies: list[Any] = [None] * len(calls)
    for node, indexes in by_node.values():
        answers = send_with_scripts(client.get_redis_connection(node), [calls[i] for i in indexes])
        for index, answer in zip(indexes, answers):
            replies[index] = answer
    return replies
