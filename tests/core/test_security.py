"""Security properties: static Lua only, tokens kept out of logs, literal matching in listings.

* Every script sent to Redis is one of the shipped ``lua/*.lua`` files: checked in the source
  (no script text or EVAL built at run time) and on a server after hostile input (its script
  cache holds nothing else, and a canary key survives names that look like Lua or commands).
* A hold's token is its capability (whoever knows it can release or extend the hold): it never
  appears in full in a log record or an error message, through acquire, renewal, loss and release.
* The listing service matches names literally: glob characters are just characters.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import logging
import re
import time
from importlib import resources
from pathlib import Path

import pytest
from redis.exceptions import LockError

import django_redis_coord
from django_redis_coord import Lock, LockNotOwnedError, Semaphore, lock_holder
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.core import scripts
from django_redis_coord.core.listing import HolderListing
from django_redis_coord.core.rwlock.sync import ReadWriteLock
from django_redis_coord.core.scripts import script_text

PACKAGE = Path(django_redis_coord.__file__).parent
LUA = resources.files("django_redis_coord.core") / "lua"
SCRIPT_NAMES = sorted(p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua") and p.name != "common.lua")

HOSTILE_NAMES = [
    "*", "?", "[a-z]", "a*b?c[d]", "{tag}", "}{", "{}", "\\*", "%s%d", "%", "..", "../../etc",
    "]] redis.call('FLUSHALL') --[[", "'); redis.call('FLUSHALL'); --", "\nFLUSHALL\r\n", "\0nul",
    "ключ", "鎖", "\U0001f512", b"\xff\xfe\x00", "x" * 4096,
]


# -- static scripts ---------------------------------------------------------------------------------
def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            yield name, node


def _is_script_text(node: ast.AST) -> bool:
    """``text`` (the local every loader names it) or a direct ``script_text(...)`` call."""
    if isinstance(node, ast.Name):
        return node.id == "text"
    return isinstance(node, ast.Call) and getattr(node.func, "id", "") == "script_text"


def test_scripts_are_only_ever_the_shipped_files():
    """In the package source, every script text handed to Redis comes from ``script_text()``."""
    checked = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name, call in _calls(tree):
            where = f"{path.relative_to(PACKAGE)}:{call.lineno}"
            command = call.args[0] if name == "execute_command" and call.args else None
            if isinstance(command, ast.Constant) and str(command.value).upper() in ("EVAL", "EVAL_RO"):
                name, call_args = "eval", call.args[1:]
            else:
                call_args = call.args
            if name in ("eval", "eval_ro"):
                # Only a registered Script's own text (``<script>.script``, from script_text()).
                text = call_args[0] if call_args else None
                assert isinstance(text, ast.Attribute) and text.attr == "script", (
                    f"{where}: EVAL of a script text built in Python"
                )
            if name in ("register_script", "AsyncScript", "Script"):
                assert _is_script_text(call.args[-1]), f"{where}: script text not from script_text()"
                checked += 1
            if name == "script_load":  # script_text(), or a registered Script's own text
                text = call.args[-1]
                assert _is_script_text(text) or (isinstance(text, ast.Attribute) and text.attr == "script"), (
                    f"{where}: SCRIPT LOAD of a script text built in Python"
                )
                checked += 1
            if name == "script_text":
                arg = call.args[0]
                assert not isinstance(arg, ast.Constant) or arg.value in SCRIPT_NAMES, f"{where}: no such script"
        for node in ast.walk(tree):  # raw commands: ("EVAL", text, ...)
            if isinstance(node, ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant):
                if node.elts[0].value in ("EVAL", b"EVAL"):
                    assert _is_script_text(node.elts[1]), f"{path.relative_to(PACKAGE)}:{node.lineno}: raw EVAL"
                    checked += 1
    assert checked >= 4


#: What a Lua script may call without defining it: Lua's own functions and keywords.
LUA_GIVEN = frozenset("""tonumber tostring type pairs ipairs next select unpack error pcall assert
    setmetatable getmetatable rawget rawset print function if elseif while until and or not return
    local then""".split())


def _lua_without_strings_and_comments(text: str) -> str:
    """Lua ``text`` with comments and string literals removed, read one character at a time
    (independently of django_redis_coord.scripts, whose helper selection this checks)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("--", i):
            long = re.match(r"--\[(=*)\[", text[i:])
            if long:
                close = "]" + long.group(1) + "]"
                end = text.find(close, i + len(long.group(0)))
                i = len(text) if end == -1 else end + len(close)
            else:
                end = text.find("\n", i)
                i = len(text) if end == -1 else end
            continue
        char = text[i]
        if char in "'\"":
            i += 1
            while i < len(text) and text[i] != char:
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append(" ")
            continue
        out.append(char)
        i += 1
    return "".join(out)


def test_the_script_registry_builds_each_script_from_the_shipped_files_only():
    """A script is its own file after helper blocks copied unchanged from ``common.lua`` (and
    ``lib/semaphore.lua`` for the ``sem_*`` scripts, with ``lib/rwlock.lua`` for the ``rw_*``), and
    every function it calls is Lua's or defined in it."""
    carried = set()
    for name in SCRIPT_NAMES:
        own = (LUA / f"{name}.lua").read_text(encoding="utf-8")
        *parts, _ = scripts.script_files(name)
        libraries = [(LUA / part).read_text(encoding="utf-8") for part in parts]
        assert parts[0] == "common.lua" and ("lib/semaphore.lua" in parts) == name.startswith(("sem_", "rw_"))
        text = script_text(name)
        fast, marker, slow = own.partition(scripts.SLOW_PATH)
        # Its own file in order, the helpers only its slow path uses after the marker line.
        assert text.endswith(slow) and fast in text
        head = text[: text.index(fast)] + text[text.index(fast) + len(fast) : len(text) - len(slow)]
        head = head.replace(marker.strip("\n"), "")
        for block in filter(str.strip, head.split("\n\n")):
            assert any(block in library for library in libraries), f"{name}: a block not from the helper files"
        code = _lua_without_strings_and_comments(text)
        defined = set(re.findall(r"\blocal\s+(?:function\s+)?([A-Za-z_]\w*)", code))
        defined |= {n for group in re.findall(r"\blocal\s+([\w\s,]+)=", code) for n in re.split(r"[\s,]+", group) if n}
        called = {m.group(1) for m in re.finditer(r"(?:^|[^\w.:]|\.\.)([A-Za-z_]\w*)\s*\(", code)}
        missing = called - defined - LUA_GIVEN
        assert not missing, f"{name} calls {sorted(missing)} without defining them"
        carried |= set(re.findall(r"^local function (\w+)", head, re.MULTILINE))
    # The selection matters: not every script carries every helper.
    assert len(script_text("lock_inspect")) < len((LUA / "common.lua").read_text(encoding="utf-8"))
    assert {"hand_off", "queue_waiter", "sem_hand_off", "rw_hand_off"} <= carried


def test_hostile_names_never_reach_redis_as_script_text(redis_servers, monkeypatch):
    """After every primitive ran with hostile names and tokens, Redis has cached only shipped scripts."""
    (server,) = redis_servers(1)
    client = server.client()
    client.set("canary", "alive")
    requested: list[str] = []
    original = scripts.script_text

    def recording(name: str) -> str:
        requested.append(name)
        return original(name)

    monkeypatch.setattr(scripts, "script_text", recording)
    scripts.sync_scripts._scripts.clear()  # registered scripts are cached per process: register again
    for name in HOSTILE_NAMES:
        lock = Lock(client, name, timeout=5, label="]] --", reentrant=True)
        assert lock.acquire(blocking=False)
        assert lock.acquire(blocking=False)  # re-entry
        lock.extend(1)
        assert Lock(client, name, timeout=5).acquire(blocking_timeout=0.05) is False  # queue, give up
        assert lock_holder(client, name).fence == lock.fence
        lock.release()
        lock.release()
        semaphore = Semaphore(client, name, limit=1, timeout=5)
        assert semaphore.acquire("')--" + str(name))
        semaphore.release("')--" + str(name))
        rw = ReadWriteLock(client, name, timeout=5, label="]] --")
        assert rw.read.acquire(blocking=False) and rw.read.acquire(blocking=False)  # a hold, then re-entry
        assert ReadWriteLock(client, name, timeout=5).write.acquire(blocking_timeout=0.05) is False
        rw.read.release()
        rw.read.release()
        assert HolderListing(client).holders(search=str(name)[:8]) is not None
    assert client.get("canary") == b"alive"
    assert requested and set(requested) <= set(SCRIPT_NAMES)
    shas = {name: hashlib.sha1(script_text(name).encode()).hexdigest() for name in SCRIPT_NAMES}
    loaded = {name for name, exists in zip(shas, client.script_exists(*shas.values())) if exists}
    cached = int(client.info("memory")["number_of_cached_scripts"])
    assert loaded and cached == len(loaded), f"{cached} cached scripts, {len(loaded)} of them shipped: {loaded}"


# -- tokens in logs ----------------------------------------------------------------------------------
class Captured(logging.Handler):
    """Every record of every logger, formatted with its exception."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record) + " " + repr(record.args))


@pytest.fixture
def captured():
    handler = Captured()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(old_level)


def _assert_hidden(tokens: list[bytes], texts: list[str]) -> None:
    assert tokens and all(len(token) >= 16 for token in tokens)
    for token in tokens:
        for text in texts:
            assert token.decode() not in text, f"full token in: {text[:300]}"


def test_tokens_stay_out_of_logs_and_errors_through_acquire_renewal_loss_and_release(redis_servers, captured):
    (server,) = redis_servers(1)
    client = server.client(socket_timeout=0.3)
    tokens: list[bytes] = []
    errors: list[str] = []
    lost = []

    # An ordinary hold, extended and released; a refused release; a context exit that finds the hold gone.
    lock = Lock(client, "logged", timeout=5)
    assert lock.acquire()
    tokens.append(lock.local.token)
    lock.extend(1)
    lock.release()
    with pytest.raises(LockError) as info:
        lock.release()
    errors.append(str(info.value))
    quiet = Lock(client, "logged", timeout=5, raise_on_release_error=False)
    with quiet:
        tokens.append(quiet.local.token)
        client.delete("logged")
    errors.append(repr(quiet))

    # A renewed hold taken over behind the watchdog's back: the renewal finds it lost.
    renewed = Lock(client, "renewed", timeout=0.3, auto_renew=True, on_lost=lambda lk: lost.append(lk))
    assert renewed.acquire()
    tokens.append(renewed.local.token)
    client.delete("renewed")
    stop_at = time.monotonic() + 5
    while not lost and time.monotonic() < stop_at:
        time.sleep(0.01)
    assert lost, "the loss was not signalled"
    with pytest.raises(LockNotOwnedError) as info:
        renewed.release()
    errors.append(str(info.value))

    # Renewals that get no answer (server paused): a loss at the local deadline.
    paused = Lock(client, "paused", timeout=0.3, auto_renew=True, on_lost=lambda lk: lost.append(lk))
    assert paused.acquire()
    tokens.append(paused.local.token)
    server.pause()
    try:
        stop_at = time.monotonic() + 5
        while len(lost) < 2 and time.monotonic() < stop_at:
            time.sleep(0.01)
    finally:
        server.resume()
    assert len(lost) == 2

    # A semaphore permit lost the same way, and the asyncio lock.
    semaphore = Semaphore(client, "permits", limit=1, timeout=0.3, auto_renew=True, on_lost=lambda p: lost.append(p))
    assert semaphore.acquire()
    tokens.append(semaphore.permit().token)
    client.delete(semaphore.keys.name)
    stop_at = time.monotonic() + 5
    while len(lost) < 3 and time.monotonic() < stop_at:
        time.sleep(0.01)
    errors.append(repr(semaphore))

    async def async_hold() -> None:
        async_client = server.async_client()
        alock = AsyncLock(async_client, "async-logged", timeout=5)
        assert await alock.acquire()
        tokens.append(alock.local.token)
        await alock.release()
        with pytest.raises(LockError) as info:
            await alock.release()
        errors.append(str(info.value))
        await async_client.aclose()

    asyncio.run(async_hold())
    assert any("Lost" in text for text in captured.texts), "the loss was not logged"
    _assert_hidden(tokens, captured.texts + errors)


def test_holder_info_does_not_show_the_full_token(redis_client):
    lock = Lock(redis_client, "shown", timeout=5)
    assert lock.acquire()
    holder = lock_holder(redis_client, "shown")
    assert holder.token == lock.local.token
    assert lock.local.token.decode() not in repr(holder) and lock.local.token.decode() not in str(holder)


# -- listing ----------------------------------------------------------------------------------------
GLOB_NAMES = ["a*b", "axb", "a?c", "abc", "[ab]", "a", "b", "a[b", "a]b", "a\\b", "a.b", "a%b"]


@pytest.mark.parametrize("search,expected", [
    ("*", {"a*b"}),
    ("?", {"a?c"}),
    ("[ab]", {"[ab]"}),
    ("[", {"[ab]", "a[b"}),
    ("\\", {"a\\b"}),
    (".", {"a.b"}),
    ("%", {"a%b"}),
    ("a*", {"a*b"}),
])
def test_listing_search_takes_glob_characters_literally(redis_client, search, expected):
    held = []
    for name in GLOB_NAMES:
        lock = Lock(redis_client, name, timeout=30)
        assert lock.acquire()
        held.append(lock)
    listing = HolderListing(redis_client)
    assert {holder.name for holder in listing.holders(search=search)} == expected
    assert {holder.name for holder in listing.holders()} == set(GLOB_NAMES)
    for lock in held:
        lock.release()


def test_listing_prefix_and_force_release_take_glob_characters_literally(redis_client):
    for name in ("s*p:orders", "shop:orders", "s?p:x"):
        assert Lock(redis_client, name, timeout=30).acquire()
    assert {h.name for h in HolderListing(redis_client, prefix="s*p:").holders()} == {"s*p:orders"}
    assert {h.name for h in HolderListing(redis_client, prefix="s?p:").holders()} == {"s?p:x"}
    HolderListing(redis_client).force_release("s*p:orders")
    assert redis_client.exists("s*p:orders") == 0
    assert redis_client.exists("shop:orders") == 1 and redis_client.exists("s?p:x") == 1
