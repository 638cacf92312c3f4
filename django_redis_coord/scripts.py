"""The Lua scripts, loaded from the static files in ``lua/``.

Each script is ``common.lua`` followed by its own file; nothing is ever built from input.  The
texts are turned into redis-py ``Script`` objects (EVALSHA with a NOSCRIPT fallback) once per
kind of client, sync or asyncio.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any


@cache
def script_text(name: str) -> str:
    """The full source of script ``name`` (``lua/<name>.lua`` prefixed with ``lua/common.lua``)."""
    folder = resources.files(__package__) / "lua"
    common = (folder / "common.lua").read_text(encoding="utf-8")
    return common + "\n" + (folder / f"{name}.lua").read_text(encoding="utf-8")


class ScriptRegistry:
    """Lazily registered ``Script`` objects of one kind of client (sync or asyncio)."""

    def __init__(self) -> None:
        self._scripts: dict[str, Any] = {}

    def get(self, client: Any, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = client.register_script(script_text(name))
        return script


sync_scripts = ScriptRegistry()
async_scripts = ScriptRegistry()
