"""Generate the sync twins from their asyncio sources (as httpcore does with ``unasync``).

    python3 dev.py twins           # rewrite every generated file from its source
    python3 dev.py twins --check   # fail when a generated file differs from what its source gives

A twin listed in :data:`TWINS` is written once, in its asyncio form; its sync form is that text
with ``async``/``await`` removed and the names of :data:`SUBS` replaced, word by word.  The
check fails on drift (a generated file edited by hand, a source changed without regenerating)
and on a substitution no source used any more (a dead rule hides the next mistake).
docs/twins.md says which twins are generated and why the others are not.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "django_redis_coord"

#: (asyncio source, generated sync file), relative to the repository's root.
TWINS = [
    (f"{PACKAGE}/core/lock/aio.py", f"{PACKAGE}/core/lock/sync.py"),
    (f"{PACKAGE}/core/semaphore/aio.py", f"{PACKAGE}/core/semaphore/sync.py"),
    (f"{PACKAGE}/core/rwlock/aio.py", f"{PACKAGE}/core/rwlock/sync.py"),
    (f"{PACKAGE}/core/ratelimit/aio.py", f"{PACKAGE}/core/ratelimit/sync.py"),
    (f"{PACKAGE}/core/queue/aio.py", f"{PACKAGE}/core/queue/sync.py"),
    (f"{PACKAGE}/core/waiting/aio.py", f"{PACKAGE}/core/waiting/sync.py"),
    (f"{PACKAGE}/core/durable/aio.py", f"{PACKAGE}/core/durable/sync.py"),
    (f"{PACKAGE}/core/leader/aio.py", f"{PACKAGE}/core/leader/sync.py"),
    (f"{PACKAGE}/core/redlock/aio.py", f"{PACKAGE}/core/redlock/sync.py"),
    (f"{PACKAGE}/integrations/cache_fill/aio.py", f"{PACKAGE}/integrations/cache_fill/sync.py"),
    # The tests of what both sides promise alike (what one side only promises stays hand-written).
    ("tests/core/test_lock_twin_aio.py", "tests/core/test_lock_twin_sync.py"),
    ("tests/core/test_semaphore_twin_aio.py", "tests/core/test_semaphore_twin_sync.py"),
    ("tests/core/test_ratelimit_twin_aio.py", "tests/core/test_ratelimit_twin_sync.py"),
]

#: Word-bounded replacements, applied in this order to every line of a source.
SUBS = [
    # What only asyncio has (an asyncio cluster client's start, a producer that may be async):
    # a line that ends so is left out of the sync twin.
    (r"^.*  # asyncio only\n", ""),
    # The language.
    ("async def", "def"),
    ("async with", "with"),
    ("await ", ""),
    # A call that must finish even when its task is cancelled: a sync call cannot be cancelled.
    (r"run_to_completion\((.*)\)$", r"\1"),
    ("__aenter__", "__enter__"),
    ("__aexit__", "__exit__"),
    (r"from collections\.abc import Awaitable\n", ""),
    (r"import Awaitable, ", "import "),
    (r"(\w+) \| Awaitable\[\1\]", r"\1"),
    (r"Awaitable\[(\w+)\]", r"\1"),
    (r"from \.\.concurrency import run_to_completion\n", ""),
    # Sleeping: a thread sleeps in ``time``; the scripts' registry of each flavour of client.
    (r"^import asyncio$", "import time"),
    ("asyncio.sleep", "time.sleep"),
    ("async_scripts", "sync_scripts"),
    # The package's sync and asyncio names: a family's halves sit side by side (``aio.py`` and
    # ``sync.py``), and so do the halves of what they import (``queue/aio.py``, ``queue/sync.py``).
    (r"(from \S*)\.aio\b", r"\1.sync"),
    (r"import aio as side$", "import sync as side"),
    ("AsyncWithBlock", "WithBlock"),
    (r"_atell_(\w+)", r"_tell_\1"),
    # The calls to ``events`` through a primitive's ``report``: each side's.
    (r"atell_(\w+)", r"tell_\1"),
    ("AsyncWaitHub", "WaitHub"),
    ("AsyncWaiter", "Waiter"),
    ("aclose", "close"),
    # The cache's client (one per event loop in asyncio), and Django's name for an asyncio method.
    ("async_cache_client", "cache_redis_client"),
    ("aget_or_set", "get_or_set"),
    # The tests: the package's sync names and a client factory.
    (r"^from django_redis_coord\.asyncio import", "from django_redis_coord import"),
    ("async_lock_holder", "lock_holder"),
    ("async_semaphore_holders", "semaphore_holders"),
    ("async_watchdog", "sync_watchdog"),
    ("async_redis", "sync_redis"),
]

HEADER = "# Generated from {source} by `python3 dev.py twins`: edit that file, not this one.\n"



def _compile(pattern: str) -> re.Pattern[str]:
    """``pattern``, bounded by word edges where it begins or ends with a word character."""
    start = r"\b" if re.match(r"\w", pattern) else ""
    end = r"\b" if re.search(r"(?<!\\)\w$", pattern) else ""
    return re.compile(start + pattern + end)


_COMPILED = [(_compile(pattern), replacement) for pattern, replacement in SUBS]


def unasync(text: str, used: set[int]) -> str:
    """The sync form of ``text``; adds to ``used`` the index of each substitution that changed a line."""
    lines = []
    for line in text.splitlines(keepends=True):
        for index, (pattern, replacement) in enumerate(_COMPILED):
            changed = pattern.sub(replacement, line)
            if changed != line:
                used.add(index)
                line = changed
        lines.append(line)
    return "".join(lines)


def generated(source: str, used: set[int]) -> str:
    """The text the generated twin of ``source`` must have: the header, then the unasynced source."""
    return HEADER.format(source=source) + unasync((ROOT / source).read_text(), used)


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv not in ([], ["--check"]):
        print("usage: python3 dev.py twins [--check]", file=sys.stderr)
        return 2
    used: set[int] = set()
    stale = []
    for source, target in TWINS:
        text = generated(source, used)
        path = ROOT / target
        if path.exists() and path.read_text() == text:
            continue
        if check:
            stale.append(f"{target} differs from what {source} gives")
        else:
            path.write_text(text)
            print(f"twins: wrote {target} from {source}")
    unused = [SUBS[index] for index in range(len(SUBS)) if index not in used]
    for pattern, replacement in unused:
        stale.append(f"the substitution {pattern!r} -> {replacement!r} changes no source: remove it")
    for problem in stale:
        print(f"twins: {problem}", file=sys.stderr)
    if stale and check:
        print("twins: edit the asyncio source, not the generated file, then run `python3 dev.py twins`",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
