"""The Lua scripts, loaded from the static files in ``lua/``.

Each script is its own file after the helpers it calls from ``common.lua`` (and its family's helper
file); nothing is built from input.  The texts are turned into redis-py ``Script`` objects (EVALSHA
with a NOSCRIPT fallback) once per kind of client, sync or asyncio.

On a plain ``redis.Redis`` (or ``redis.asyncio.Redis``) client the scripts take a shorter path:
the EVALSHA is packed here and written to a pooled connection, skipping redis-py's per-command
dispatch, which costs more client time than the script itself.  A script is never re-sent after a
connection error, timeout or cancellation on that path (the script may have run): the error
reaches the caller.  After a NOSCRIPT reply (nothing ran) the script is loaded and the call sent
once more.  Every other kind of client (cluster, pipeline, single-connection, subclasses) goes
through redis-py's ordinary path, with the retries configured on it.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any, Optional

import redis
import redis.asyncio
from redis.commands.core import AsyncScript, Script
from redis.exceptions import NoScriptError, ResponseError


def script_files(name: str) -> list[str]:
    """The files script ``name`` is made of, in order: ``common.lua``, the helpers of its family
    (``lib/semaphore.lua`` for the ``sem_*`` scripts) and ``<name>.lua``."""
    family = ["lib/semaphore.lua"] if name.startswith("sem_") else []
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


@cache
def script_text(name: str) -> str:
    """The full source of script ``name``: the helpers it uses (directly or through other
    helpers), in their files' order, then its own file.

    Every ``local function`` a script carries is made again on each call, so a script carries
    only what it calls (see :func:`script_files` for where helpers come from)."""
    folder = resources.files(__package__) / "lua"
    *libraries, own = script_files(name)
    chunks = [chunk for part in libraries for chunk in helper_chunks((folder / part).read_text(encoding="utf-8"))]
    body = (folder / own).read_text(encoding="utf-8")
    needed: set[str] = set()
    pending = [body]
    while pending:
        source = pending.pop()
        for helper, text in chunks:
            if helper not in needed and _uses(source, helper):
                needed.add(helper)
                pending.append(text)
    kept = [text for helper, text in chunks if helper in needed]
    return "\n\n".join([*kept, body])


def _bulk(value: Any) -> bytes:
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str):
        data = value.encode()
    elif isinstance(value, int) and not isinstance(value, bool):
        data = b"%d" % value
    else:
        data = str(value).encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


def encode(*values: Any) -> bytes:
    """``values`` as consecutive RESP bulk strings: a piece of the ``encoded`` argument of a
    :class:`FastScript` call.  Primitives encode the parts of their calls that never change once."""
    return b"".join([_bulk(value) for value in values])


class _Heads:
    """The start of this script's EVALSHA for each count of keys and arguments, packed once."""

    sha: str
    _heads: dict[tuple[int, int], bytes]

    def _head(self, count: int, numkeys: int) -> bytes:
        """The start of an EVALSHA of this script with ``count`` keys and arguments."""
        head = self._heads.get((count, numkeys))
        if head is None:
            head = b"*%d\r\n$7\r\nEVALSHA\r\n" % (count + 3) + _bulk(self.sha) + _bulk(numkeys)
            self._heads[(count, numkeys)] = head
        return head


class FastScript(_Heads, Script):
    """A redis-py ``Script`` with the short path described in the module docstring."""

    def __init__(self, registered_client: Any, script: Any) -> None:
        super().__init__(registered_client, script)
        self._heads = {}

    def __call__(self, keys: Any = None, args: Any = None, client: Any = None, encoded: Optional[bytes] = None) -> Any:
        """Run the script.  ``encoded``, when given, is ``keys`` and ``args`` already encoded (see
        :func:`encode`); the short path sends it instead of encoding them again."""
        keys = keys or ()
        args = args or ()
        if client is None:
            client = self.registered_client
        if type(client) is not redis.Redis or client.connection is not None:
            return super().__call__(keys, args, client)
        data = self._head(len(keys) + len(args), len(keys)) + (encode(*keys, *args) if encoded is None else encoded)
        try:
            return self._send_once(client.connection_pool, data)
        except NoScriptError:  # nothing ran: load the script (idempotent) and send the call again
            client.script_load(self.script)
            return self._send_once(client.connection_pool, data)

    def run_on(self, conn: Any, client: Any, count: int, numkeys: int, encoded: bytes) -> Any:
        """The short path on ``conn``, a connection the caller checked out of the pool of ``client``
        (a plain ``redis.Redis``) and gives back itself: ``count`` keys and arguments, ``numkeys``
        of them keys, already encoded.  Same rules: no re-send after an error, a load after NOSCRIPT."""
        data = self._head(count, numkeys) + encoded
        try:
            return self._send_on(conn, data)
        except NoScriptError:
            client.script_load(self.script)
            return self._send_on(conn, data)

    @classmethod
    def _send_once(cls, pool: Any, data: bytes) -> Any:
        """Write ``data`` on a pooled connection and read the reply, with no retry: after a
        connection error or timeout the script may have run, and re-sending a release or an
        additive extend would not be idempotent, so the caller gets the error instead."""
        conn = pool.get_connection()
        try:
            return cls._send_on(conn, data)
        finally:
            pool.release(conn)

    @staticmethod
    def _send_on(conn: Any, data: bytes) -> Any:
        """Write ``data`` on ``conn`` and read the reply; a connection left with an unread reply
        (an error, a timeout, an interruption) is closed."""
        try:
            conn.send_packed_command([data])  # with the connection's health check, if configured
            return conn.read_response()
        except ResponseError:  # the whole reply was read: the connection is clean
            raise
        except BaseException:
            conn.disconnect()
            raise


class AsyncFastScript(_Heads, AsyncScript):
    """The asyncio form of :class:`FastScript`."""

    def __init__(self, registered_client: Any, script: Any) -> None:
        super().__init__(registered_client, script)
        self._heads = {}

    async def __call__(  # type: ignore[override]
        self, keys: Any = None, args: Any = None, client: Any = None, encoded: Optional[bytes] = None
    ) -> Any:
        keys = keys or ()
        args = args or ()
        if client is None:
            client = self.registered_client
        if type(client) is not redis.asyncio.Redis or client.single_connection_client:
            return await super().__call__(keys, args, client)
        data = self._head(len(keys) + len(args), len(keys)) + (encode(*keys, *args) if encoded is None else encoded)
        try:
            return await self._send_once(client.connection_pool, data)
        except NoScriptError:
            await client.script_load(self.script)
            return await self._send_once(client.connection_pool, data)

    async def run_on(self, conn: Any, client: Any, count: int, numkeys: int, encoded: bytes) -> Any:
        """As :meth:`FastScript.run_on`, on an asyncio connection."""
        data = self._head(count, numkeys) + encoded
        try:
            return await self._send_on(conn, data)
        except NoScriptError:
            await client.script_load(self.script)
            return await self._send_on(conn, data)

    @classmethod
    async def _send_once(cls, pool: Any, data: bytes) -> Any:
        """As :meth:`FastScript._send_once`; a cancelled call also leaves its reply unread, so its
        connection is closed too."""
        conn = await pool.get_connection()
        try:
            return await cls._send_on(conn, data)
        finally:
            await pool.release(conn)

    @staticmethod
    async def _send_on(conn: Any, data: bytes) -> Any:
        try:
            await conn.send_packed_command([data])
            return await conn.read_response()
        except ResponseError:
            raise
        except BaseException:
            await conn.disconnect()
            raise


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
            text = script_text(name)
            script = AsyncFastScript(client, text) if self._asyncio else FastScript(client, text)
            self._scripts[name] = script
        return script


sync_scripts = ScriptRegistry(asyncio=False)
async_scripts = ScriptRegistry(asyncio=True)
