"""What a process keeps after using many distinct long names: the per-name caches (key sets,
encoded arguments, holder info, the locks ``@locked`` copies from) keep short names only."""

from __future__ import annotations

import gc
import itertools
import tracemalloc

from django_redis_coord import Lock, locked

#: Names this long are what a hostile header can make (a 16 KB value); short names stay cached.
NAME_BYTES = 16 * 1024
COUNT = 1500
#: 1,500 distinct 16 KB names are 24 MB of names: the caches kept each in several copies (200 MB
#: and more); without them, what stays is the table of slot tags (at most 16,384 short entries).
BOUND = 4 * 1024 * 1024


def long_names(prefix: str):
    for index in itertools.count():
        yield f"{prefix}:{index:06d}:" + "x" * NAME_BYTES


def grown_by(work) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_locks_with_thousands_of_distinct_long_names_leave_nothing_behind(redis_client):
    names = long_names("lock")

    def work():
        for _ in range(COUNT):
            name = next(names)
            lock = Lock(redis_client, name, timeout=5, label=name)  # a label as long as the name
            assert lock.acquire(blocking=False)
            lock.release()

    assert grown_by(work) < BOUND


def test_locked_with_thousands_of_distinct_long_keys_leaves_nothing_behind(redis_client):
    names = long_names("ctx")
    held = locked(key=lambda: next(names), timeout=5)  # one object, a new key each time

    def work():
        for _ in range(COUNT):
            with held as lock:
                assert lock.fence

    assert grown_by(work) < BOUND
