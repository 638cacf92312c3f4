#!/usr/bin/env python3
"""Start the example project on an embedded redis-server (README Quick start, first command).

Starts a private redis-server (see django_redis_coord.testing for where the binary comes from),
migrates a local SQLite database, creates the ``admin`` / ``admin`` superuser, starts a few
worker processes that contend for locks (``manage.py contend``, so the admin page of live
holders has something to show) and serves the site on http://127.0.0.1:8000/ until Ctrl-C; the
workers and the redis-server stop with it.

    python3 dev.py demo [--port 8000] [--workers 3] [--no-serve]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from django_redis_coord.testing import RedisServer  # noqa: E402


def terminal_command(redis_url: str) -> str:
    """``manage.py locks list --watch 1`` for this demo, runnable from any directory and shell:
    the Python of the demo (``.venv``'s) by its full path, the demo's Redis in the environment."""
    return (f"DEMO_REDIS_URL={shlex.quote(redis_url)} {shlex.quote(sys.executable)} "
            f"{shlex.quote(str(HERE / 'manage.py'))} locks list --watch 1")


def interrupt(signum: int, frame: Any) -> None:
    """SIGTERM stops the demo like Ctrl-C: the site, the workers and the redis-server all go."""
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, interrupt)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", 8000)))
    parser.add_argument("--workers", type=int, default=3, help="contending worker processes (0: none)")
    parser.add_argument("--no-serve", action="store_true", help="set everything up, then stop")
    options = parser.parse_args()
    with RedisServer() as server:
        print(f"Embedded redis-server: {server.url} ({server.binary})", flush=True)
        # Django runs in this process (one start-up less than a manage.py per step): the workers
        # and the terminal command get the same settings through the environment.
        os.environ.update(DEMO_REDIS_URL=server.url, DJANGO_SETTINGS_MODULE="demo_site.settings")
        import django
        from django.core.management import call_command

        django.setup()
        call_command("prepare_demo")  # migrate, and the admin / admin superuser
        if options.no_serve:
            call_command("check")
            return 0
        workers = None
        if options.workers > 0:
            workers = subprocess.Popen(
                [sys.executable, str(HERE / "manage.py"), "contend", "--workers", str(options.workers)], cwd=HERE)
        print(f"Site:  http://127.0.0.1:{options.port}/", flush=True)
        print(f"Admin: http://127.0.0.1:{options.port}/admin/django_redis_coord/holder/  (admin / admin)", flush=True)
        print(f"Terminal: {terminal_command(server.url)}", flush=True)
        try:
            call_command("runserver", f"127.0.0.1:{options.port}", use_reloader=False)
        except (KeyboardInterrupt, SystemExit):  # runserver turns Ctrl-C into SystemExit(0)
            pass
        finally:
            if workers is not None:
                workers.terminate()
                try:
                    workers.wait(15)
                except subprocess.TimeoutExpired:
                    workers.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
