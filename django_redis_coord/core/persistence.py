"""Whether a Redis server keeps its fence counters over a restart (``check --deploy``: W004).

A grant's fence is ``max(stored counter + 1, server TIME in µs)``.  While the counter survives,
fences only grow.  When a restart loses it, the next fence rests on the server's clock alone:
still above every earlier fence as long as that clock never went back (and no fence ran ahead
of it), below them otherwise.  Only an append-only file written with ``appendfsync always``
keeps every counter through a crash of the machine; ``everysec`` can lose the last second,
RDB snapshots everything since the last one.
"""

from __future__ import annotations

from typing import Any, Optional


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _config(client: Any, name: str) -> str:
    """One ``CONFIG GET`` value (raises the client's ``RedisError`` when CONFIG is refused)."""
    reply = client.config_get(name)
    return {_text(key): _text(value) for key, value in (reply or {}).items()}.get(name, "")


def counter_loss(client: Any) -> Optional[str]:
    """What a restart (a crash of the machine) of the server behind ``client`` can lose of the
    fence counters, or ``None`` when it keeps them all (AOF with ``appendfsync always``)."""
    if _config(client, "appendonly") == "yes":
        fsync = _config(client, "appendfsync")
        if fsync == "always":
            return None
        lost = "the last second of writes" if fsync == "everysec" else "the writes the OS did not flush yet"
        return f"writes its append-only file with appendfsync {fsync}: a crash can lose {lost}, fence counters included"
    save = _config(client, "save")
    if save:
        return f"keeps only RDB snapshots (save {save!r}): a restart loses every fence counter written since the last"
    return 'has no persistence (appendonly no, save ""): a restart loses every fence counter'


def servers(client: Any) -> list[tuple[str, Any]]:
    """The servers that issue fences through ``client``: itself, or each primary of a cluster."""
    if hasattr(client, "get_primaries"):
        return [(node.name, client.get_redis_connection(node)) for node in client.get_primaries()]
    return [("", client)]
