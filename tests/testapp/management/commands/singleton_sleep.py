"""A singleton command for tests/django/test_singleton_commands.py: records its start in Redis
(``started:<name>``), then waits for ``gate:<name>`` (at most ``--for`` seconds).  Its hold lives
``--lock-timeout`` seconds (default 1) and is renewed every third of that while it runs."""

from django_redis_coord.config.connection import get_client
from django_redis_coord.management.singleton import SingletonCommand
from tests.support.gate import wait_for_gate


class Command(SingletonCommand):
    lock_key = "sleep:{name}"
    lock_timeout = 1  # renewed every 1/3 s while it runs

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--for", dest="seconds", type=float, default=30)
        parser.add_argument("--lock-timeout", dest="hold_ttl", type=float, default=None)

    def execute(self, *args, **options):
        if options.get("hold_ttl"):
            self.lock_timeout = options["hold_ttl"]
        return super().execute(*args, **options)

    def handle(self, *args, name, seconds, **options):
        client = get_client()
        client.rpush(f"started:{name}", 1)
        wait_for_gate(client, name, seconds)
        self.stdout.write(f"done {name}")
