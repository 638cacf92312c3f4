"""Where the watchdog runs what a loss calls (``on_lost``, the ``lock_lost`` signal): off the
renewal threads, and so that a callback that blocks holds up nothing but itself.

Each loss is run by an idle worker thread if there is one, else by a new one; a worker waits a
while for more work, then ends.  A blocked callback keeps its own thread only: the next loss,
of any lock, starts another.  A callback running longer than :data:`LONG_CALLBACK` seconds is
reported (once) with a warning naming its lock, while it still runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("django_redis_coord")

#: A callback still running after this many seconds gets a warning.
LONG_CALLBACK = 1.0
#: An idle worker waits this long for more work, then ends.
IDLE_FOR = 10.0


class CallbackRunner:
    """Runs jobs (``job()``) on worker threads; a job never waits for another to finish."""

    def __init__(self, name: str = "dcoord-on-lost") -> None:
        self.name = name
        self._cond = threading.Condition()
        self._queue: deque = deque()
        self._idle = 0
        #: Jobs running now: id -> (what it is about, start instant); reported once when long.
        self._running: dict[int, tuple[str, float]] = {}

    def submit(self, job: Callable[[], Any], about: str) -> None:
        """Run ``job`` soon on a worker; ``about`` names it in the warning of a long run."""
        with self._cond:
            if self._idle > len(self._queue):  # an idle worker takes it
                self._queue.append((job, about))
                self._cond.notify()
                return
        threading.Thread(target=self._work, args=((job, about),), name=self.name, daemon=True).start()

    def warn_long(self, now: float) -> None:
        """Warn about every job running for longer than :data:`LONG_CALLBACK` (once per job)."""
        if not self._running:
            return
        with self._cond:
            late = [(key, about, started) for key, (about, started) in self._running.items()
                    if now - started >= LONG_CALLBACK]
            for key, _, _ in late:
                del self._running[key]
        for _, about, started in late:
            logger.warning("%s has been running for %.1f s: a blocking loss callback holds a thread "
                           "(other losses are still reported)", about, now - started)

    def _work(self, item: tuple[Callable[[], Any], str]) -> None:
        while True:
            job, about = item
            key = id(item)
            with self._cond:
                self._running[key] = (about, time.monotonic())
            try:
                job()
            finally:
                with self._cond:
                    self._running.pop(key, None)
            with self._cond:
                self._idle += 1
                end = time.monotonic() + IDLE_FOR
                while not self._queue:
                    left = end - time.monotonic()
                    if left <= 0:
                        self._idle -= 1
                        return
                    self._cond.wait(left)
                self._idle -= 1
                item = self._queue.popleft()
