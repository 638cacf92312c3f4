"""``manage.py contend``: worker processes fighting over a few locks and a semaphore.

Each worker is a separate OS process that loops: take one of the report locks (waiting in FIFO
order for at most a few seconds), hold it for a moment while writing the report row with its
fence, release; now and then take a permit of the thumbnails semaphore instead (never one of the
export view's: its two permits stay free for visitors).  Leave it running and open the admin page
of live holders, or ``manage.py locks list --watch 1``, to see holders, waiters, fences and the
semaphore's usage move.

    python manage.py contend                    # 3 workers until Ctrl-C
    python manage.py contend --workers 6 --seconds 60
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

#: The locks the workers take, each with the key template its metrics are counted under (the
#: admin's contention page shows one section per template).
JOBS = {"report:daily": "report:{period}", "report:weekly": "report:{period}", "invoices:sync": "invoices:sync",
        "search:reindex": "search:reindex"}
#: The semaphore the workers take now and then: ``(name, permits)``.
SEMAPHORE = ("thumbnails", 2)


def interrupt(signum: int, frame: Any) -> None:
    """SIGTERM stops a worker like Ctrl-C: the ``with`` blocks release what they hold."""
    raise KeyboardInterrupt


def work(index: int, stop_at: float, hold: tuple[float, float]) -> None:
    """One worker's loop (runs in its own process)."""
    import django
    from django.db import connection

    django.setup()
    signal.signal(signal.SIGTERM, interrupt)
    connection.close()  # never share the parent's database connection
    rng = random.Random(os.getpid())
    label = f"worker {index}"
    try:
        loop(label, rng, stop_at, hold)
    except KeyboardInterrupt:
        pass


def loop(label: str, rng: random.Random, stop_at: float, hold: tuple[float, float]) -> None:
    from django.db.models import F
    from django.utils import timezone

    from demo.models import Report
    from django_redis_coord import fenced_update, lock, semaphore
    from django_redis_coord.exceptions import LockError

    while stop_at == 0 or time.monotonic() < stop_at:
        try:
            if rng.random() < 0.25:
                with semaphore(*SEMAPHORE, timeout=15, label=f"{label} thumbnails", blocking_timeout=5,
                               template=SEMAPHORE[0]):
                    time.sleep(rng.uniform(*hold))
                continue
            job = rng.choice(list(JOBS))
            with lock(job, timeout=15, label=label, blocking_timeout=5, template=JOBS[job]) as held:
                Report.objects.get_or_create(name=job.replace(":", "-"))
                time.sleep(rng.uniform(*hold))
                fenced_update(
                    Report.objects.filter(name=job.replace(":", "-")),
                    held.fence,
                    body=f"built by {label}",
                    builds=F("builds") + 1,
                    built_at=timezone.now(),
                )
        except LockError:
            time.sleep(0.1)  # gave up waiting: try another job
        time.sleep(rng.uniform(0.05, 0.5))


class Command(BaseCommand):
    help = "Start worker processes that contend for a few locks and a semaphore (for the admin page and `locks list`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workers", type=int, default=3, help="number of worker processes (default 3)")
        parser.add_argument("--seconds", type=float, default=0, help="stop after this long (default: until Ctrl-C)")
        parser.add_argument("--min-hold", type=float, default=1.0, help="shortest hold in seconds (default 1)")
        parser.add_argument("--max-hold", type=float, default=4.0, help="longest hold in seconds (default 4)")

    def handle(self, *args: Any, **options: Any) -> None:
        workers, seconds = options["workers"], options["seconds"]
        hold = (options["min_hold"], options["max_hold"])
        if workers < 1 or seconds < 0 or not 0 <= hold[0] <= hold[1]:
            raise CommandError("need --workers >= 1, --seconds >= 0 and 0 <= --min-hold <= --max-hold")
        stop_at = time.monotonic() + seconds if seconds else 0.0
        signal.signal(signal.SIGTERM, interrupt)
        context = multiprocessing.get_context("spawn")
        processes = [context.Process(target=work, args=(i + 1, stop_at, hold), daemon=True) for i in range(workers)]
        for process in processes:
            process.start()
        until = f" for {seconds:g} s." if seconds else "; Ctrl-C stops them."
        self.stdout.write(
            f"{workers} worker processes ({', '.join(str(p.pid) for p in processes)}) contend for "
            f"{', '.join(JOBS)} and the {SEMAPHORE[0]} semaphore{until}"
        )
        try:
            for process in processes:
                process.join()
        except KeyboardInterrupt:
            pass
        finally:
            for process in processes:
                if process.is_alive():
                    os.kill(process.pid, signal.SIGTERM)
            for process in processes:
                process.join(10)
        self.stdout.write("Workers stopped.")
