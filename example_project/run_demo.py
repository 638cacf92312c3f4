#!/usr/bin/env python3
"""Start the example project on an embedded redis-server (README Quick start, first command).

Starts a private redis-server (see django_redis_coord.server for where the binary comes from),
migrates a local SQLite database, creates the ``admin`` / ``admin`` superuser and serves the
site on http://127.0.0.1:8000/ until Ctrl-C; the redis-server stops with it.

    python3 dev.py demo [--port 8000] [--no-serve]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from django_redis_coord.server import RedisServer  # noqa: E402


def manage(*args: str, env: dict) -> None:
    subprocess.run([sys.executable, str(HERE / "manage.py"), *args], check=True, env=env, cwd=HERE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", 8000)))
    parser.add_argument("--no-serve", action="store_true", help="set everything up, then stop")
    options = parser.parse_args()
    with RedisServer() as server:
        env = dict(os.environ, DEMO_REDIS_URL=server.url, DJANGO_SETTINGS_MODULE="demo_site.settings")
        print(f"Embedded redis-server: {server.url} ({server.binary})", flush=True)
        manage("migrate", "--noinput", "-v", "0", env=env)
        manage("ensure_demo_admin", env=env)
        if options.no_serve:
            manage("check", env=env)
            return 0
        print(f"Admin: http://127.0.0.1:{options.port}/admin/  (user admin, password admin)", flush=True)
        try:
            manage("runserver", f"127.0.0.1:{options.port}", "--noreload", env=env)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
