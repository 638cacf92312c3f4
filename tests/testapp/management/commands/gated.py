"""A plain management command for tests/operators/test_locks_run.py (run by ``manage.py locks run``):
records its pid in Redis (``started:<name>``), waits for ``gate:<name>`` (at most ``--for``
seconds), then returns, exits with ``--status``, raises ``CommandError(returncode=--status)`` or
raises ``RuntimeError``, as ``--then`` says."""

import os
import sys

from django.core.management.base import BaseCommand, CommandError

from django_redis_coord.config.connection import get_client
from tests.support.gate import wait_for_gate


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--for", dest="seconds", type=float, default=30)
        parser.add_argument("--then", choices=["return", "exit", "command-error", "raise"], default="return")
        parser.add_argument("--status", type=int, default=0)

    def handle(self, *args, name, seconds, then, status, **options):
        client = get_client()
        client.rpush(f"started:{name}", os.getpid())
        wait_for_gate(client, name, seconds)
        if then == "exit":
            sys.exit(status)
        if then == "command-error":
            raise CommandError(f"{name} failed on purpose", returncode=status)
        if then == "raise":
            raise RuntimeError(f"{name} broke")
        self.stdout.write(f"done {name}")
