"""The Lua scripts, loaded from the static files in ``lua/``.

Each script is its own file after the helpers it calls from ``common.lua`` (and its family's helper
file); nothing is built from input.  The texts are turned into redis-py ``Script`` objects (EVALSHA
with a NOSCRIPT fallback) once per kind of client, sync or asyncio, and called through redis-py's
ordinary path, with the retries configured on the client.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

from redis.commands.core import AsyncScript, Script

#: The helper files of each family of scripts (by the start of their names), after ``common.lua``.
FAMILIES = {"sem_": ["lib/semaphore.lua"], "rw_": ["lib/semaphore.lua", "lib/rwlock.lua"]}


def script_files(name: str) -> list[str]:
    """The files script ``name`` is made of, in order: ``common.lua``, the helpers of its family
    (:data:`FAMILIES`: ``lib/semaphore.lua`` for the ``sem_*`` scripts, and ``lib/rwlock.lua``
    after it for the read-write lock's ``rw_*``) and ``<name>.lua``."""
    family = next((files for start, files in FAMILIES.items() if name.startswith(start)), [])
    return ["common.lua", *family, f"{name}.lua"]


_DEFINITION = re.compile(r"^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def helper_chunks(text: str) -> list[tuple[str, str]]:
    """The helpers a helper file defines, as ``(name, source)`` in file order.

    A helper is a block of lines separated from the others by blank lines: its comments and one
    top-level ``local function NAME`` (or ``local NAME = ...``).  Blocks that define nothing (the
    file's heading) are left out."""
    chunks = []
    for block in re.split(r"\n\s*\n", text):
        found = _DEFINITION.search(block)
        if found:
            chunks.append((found.group(1), block.strip("\n")))
    return chunks


#: What is not code in Lua source: comments (long ones first) and string literals, matched left to
#: right so that a quote inside a comment, or ``--`` inside a string, is not taken for either.
_NOT_CODE = re.compile(
    r"""--\[(?P<c>=*)\[.*?\](?P=c)\]"""  # long comment
    r"""|--[^\n]*"""  # line comment
    r"""|\[(?P<s>=*)\[.*?\](?P=s)\]"""  # long string
    r"""|'(?:\\.|[^'\\\n])*'"""  # quoted strings, with escapes
    r"""|"(?:\\.|[^"\\\n])*\"""",
    re.DOTALL,
)


def lua_code(source: str) -> str:
    """``source`` with its comments and string literals blanked out."""
    return _NOT_CODE.sub(" ", source)


def _uses(source: str, name: str) -> bool:
    """Whether Lua ``source`` refers to ``name`` in its code (not as a field: ``x.name``, ``x:name``;
    after the ``..`` operator it does)."""
    pattern = r"(?<![A-Za-z0-9_:])(?<![^.]\.)" + re.escape(name) + r"(?![A-Za-z0-9_])"
    return re.search(pattern, lua_code(source)) is not None


#: A line of a script's own file from which on the script needs the helpers its first part does
#: not: they are placed after it.  Lua makes a ``local function`` when it runs its definition, on
#: every call, and each costs the server time: a call that returns before this line (the hot path)
#: makes only the helpers it uses.
SLOW_PATH = "-- The slow path: the helpers only it uses are defined from here.\n"


def _needed(source: str, chunks: list[tuple[str, str]]) -> set[str]:
    """The helpers (of ``chunks``) that ``source`` uses, directly or through other helpers."""
    needed: set[str] = set()
    pending = [source]
    while pending:
        text = pending.pop()
        for helper, chunk in chunks:
            if helper not in needed and _uses(text, helper):
                needed.add(helper)
                pending.append(chunk)
    return needed


@cache
def script_text(name: str) -> str:
    """The full source of script ``name``: the helpers it uses (directly or through other
    helpers), in their files' order, then its own file; those that only the part after
    :data:`SLOW_PATH` uses are placed after that line.

    Every ``local function`` a script carries is made again on each call, so a script carries
    only what it calls (see :func:`script_files` for where helpers come from)."""
    folder = resources.files(__package__) / "lua"
    *libraries, own = script_files(name)
    chunks = [chunk for part in libraries for chunk in helper_chunks((folder / part).read_text(encoding="utf-8"))]
    body = (folder / own).read_text(encoding="utf-8")
    fast, marker, slow = body.partition(SLOW_PATH)
    first = _needed(fast, chunks)
    later = _needed(body, chunks) - first
    head = [text for helper, text in chunks if helper in first]
    if not marker:
        return "\n\n".join([*head, body])
    tail = [text for helper, text in chunks if helper in later]
    return "\n\n".join([*head, fast + marker.rstrip("\n"), *tail, slow])


def queue_script(pipe: Any, script: Script, keys: Any, args: Any) -> None:
    """Queue ``script`` on a pipeline: by EVALSHA (the pipeline loads it first when the server
    lacks it) or, on redis-py's cluster pipelines, which refuse EVALSHA, by its shipped text."""
    if hasattr(pipe, "scripts"):
        pipe.scripts.add(script)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
    else:
        pipe.execute_command("EVAL", script.script, len(keys), *keys, *args)


class ScriptRegistry:
    """Lazily made script objects of one kind of client (sync or asyncio)."""

    def __init__(self, asyncio: bool) -> None:
        self._asyncio = asyncio
        self._scripts: dict[str, Any] = {}

    def get(self, client: Any, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            if self._asyncio:
                script = AsyncScript(client, script_text(name))
            else:
                script = Script(client, script_text(name))
            self._scripts[name] = script
        return script


sync_scripts = ScriptRegistry(asyncio=False)
async_scripts = ScriptRegistry(asyncio=True)
