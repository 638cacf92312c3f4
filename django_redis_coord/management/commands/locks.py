"""``manage.py locks``: who holds which lock, semaphore permit or read-write lock, and taking a hold back.

    manage.py locks list [--kind lock|sem|rw] [--search TEXT] [--json] [--watch SECONDS [--count N]]
    manage.py locks show NAME [--kind lock|sem|rw] [--json]
    manage.py locks waiters NAME [--kind lock|sem|rw] [--json]
    manage.py locks release NAME [--kind lock|sem|rw] [--fence FENCE] [--noinput]
    manage.py locks release [--host H] [--pid P] [--label-prefix L] [--older-than DURATION] [--yes]
    manage.py locks ping [--json]
    manage.py locks run NAME [--wait [SECONDS]] [--timeout SECONDS] -- COMMAND [ARGS...]

Text output writes every non-printable character of a name, label, host or thread as its escape
(``\x1b``, ``\n``...): what a name holds never reaches the terminal as a control sequence.
Names are given and shown without ``KEY_PREFIX`` (as the code names them); ``--all-prefixes``
lists every holder in the database under its full key.  Exit status: 0 success, 1 bad
arguments or settings, 3 Redis unreachable, 4 nothing held under that name, 5 release not
confirmed, 6 the holder changed before the release (nothing was released), 7 Redis refused the
command (a read-only replica, no permission, out of memory, ...).  ``run`` exits with the status of
the command it ran, or 75 when another run holds NAME.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Optional

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_redis_coord.management.locks_release import (
    EXIT_CHANGED,
    EXIT_NOT_CONFIRMED,
    EXIT_NOT_HELD,
    EXIT_USAGE,
    ReleaseAction,
    add_release_arguments,
)

from ...config.connection import describe_connection, get_client
from ...config.settings import SETTING_NAME, coord_settings
from ...core.exceptions import InvalidLockArgument
from ...core.holders import KINDS, HolderInfo
from ...core.listing import HolderListing
from ..singleton import EX_TEMPFAIL, ExclusiveRun, parsed_command, positive_seconds_argument, seconds_argument
from ..terminal import holder_details, holders_table, quoted, waiters_table

#: Exit statuses (also documented in docs/operations.md); ``run``: the command's own, or 75.
EXIT_UNREACHABLE = 3
EXIT_REFUSED = 7
__all__ = ["Command", "HOLDER_JSON_SCHEMA", "EXIT_USAGE", "EXIT_UNREACHABLE", "EXIT_NOT_HELD", "EXIT_NOT_CONFIRMED",
           "EXIT_CHANGED", "EXIT_REFUSED", "EX_TEMPFAIL"]

CLEAR_SCREEN = "\x1b[H\x1b[2J"

_OPTIONAL_INT = {"type": ["integer", "null"]}
_OPTIONAL_STR = {"type": ["string", "null"]}

#: JSON Schema of one element of ``locks list --json`` (and of ``holders`` in ``show --json``).
HOLDER_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "key", "kind", "fence", "ttl_ms", "owner", "token", "waiters", "used", "limit"],
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "key": {"type": "string"},
        "kind": {"enum": sorted(KINDS)},
        "fence": {"type": "integer"},
        "ttl_ms": _OPTIONAL_INT,
        "acquired_at": _OPTIONAL_STR,
        "acquired_at_ms": _OPTIONAL_INT,
        "held_for_ms": _OPTIONAL_INT,
        "owner": {
            "type": "object",
            "required": ["host", "pid", "thread", "label", "view"],
            "properties": {
                "host": _OPTIONAL_STR,
                "pid": _OPTIONAL_INT,
                "thread": _OPTIONAL_STR,
                "label": _OPTIONAL_STR,
                "view": _OPTIONAL_STR,
            },
        },
        "token": {"type": "string"},
        "waiters": {"type": "integer"},
        "used": _OPTIONAL_INT,
        "limit": _OPTIONAL_INT,
        "extra": {"type": "object"},
        "role": _OPTIONAL_STR,
        "term": _OPTIONAL_INT,
        "mode": {"enum": ["read", "write", None]},
    },
}


class ActionParser(CommandParser):
    """The parser of one action; the one of ``run`` takes what follows ``--`` as the command to
    run (``argv``), options of that command included."""

    takes_command = False

    def parse_known_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> Any:
        if not self.takes_command or args is None or "--" not in args:
            return super().parse_known_args(args, namespace)
        args = list(args)
        split = args.index("--")
        namespace, extras = super().parse_known_args(args[:split], namespace)
        namespace.argv = args[split + 1:]
        return namespace, extras


class Command(ReleaseAction, BaseCommand):
    help = ("List live lock and semaphore holders, show one, list its waiters, force-release holds, check Redis, "
            "run a command while holding a lock.")

    # -- arguments ---------------------------------------------------------------------------
    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(dest="action", metavar="{list,show,waiters,release,ping,run}",
                                           parser_class=ActionParser)
        subparsers.required = True

        listing = subparsers.add_parser("list", help="live holders, sorted by name")
        listing.add_argument("--kind", choices=sorted(KINDS),
                             help="only locks, only semaphore permits or only read-write lock holds")
        listing.add_argument("--search", default=None, help="substring of the name (case-insensitive, literal)")
        listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
        listing.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                             help="refresh every SECONDS until Ctrl-C, like top")
        listing.add_argument("--count", type=int, default=None, metavar="N",
                             help="with --watch: stop after N refreshes")
        listing.add_argument("--limit", type=int, default=None, metavar="N", help="at most N holders")
        self._add_scope(listing)

        show = subparsers.add_parser("show", help="the holder(s) of one lock or semaphore")
        show.add_argument("name")
        show.add_argument("--kind", choices=sorted(KINDS),
                          help="default: the lock, else the semaphore, else the read-write lock")
        show.add_argument("--json", action="store_true")
        self._add_scope(show)

        waiters = subparsers.add_parser("waiters", help="callers queued for one lock or semaphore")
        waiters.add_argument("name")
        waiters.add_argument("--kind", choices=sorted(KINDS), default="lock")
        waiters.add_argument("--json", action="store_true")
        self._add_scope(waiters)

        release = subparsers.add_parser(
            "release",
            help="force release: delete the hold, move the fence past it, hand off to the next waiter",
        )
        add_release_arguments(release)
        self._add_scope(release)

        ping = subparsers.add_parser("ping", help="check the connection: server, latency, clock, holders")
        ping.add_argument("--json", action="store_true")

        run = subparsers.add_parser(
            "run", help="run a management command while holding lock NAME (a second run exits with status 75)",
            usage="%(prog)s NAME [--wait [SECONDS]] [--timeout SECONDS] -- COMMAND [ARGS ...]",
        )
        run.takes_command = True
        run.set_defaults(argv=None)
        run.add_argument("name", help="the lock held while the command runs (without KEY_PREFIX)")
        run.add_argument("--wait", type=seconds_argument, nargs="?", const=math.inf, default=0, metavar="SECONDS",
                         help=f"when another run holds NAME, wait for it (up to SECONDS; default: exit at once "
                              f"with status {EX_TEMPFAIL})")
        run.add_argument("--timeout", type=positive_seconds_argument, default=30.0, metavar="SECONDS",
                         help="the hold's TTL, renewed every third of it while the command runs (default 30): "
                              "a killed run frees NAME within it")

    @staticmethod
    def _add_scope(parser: CommandParser) -> None:
        parser.add_argument("--all-prefixes", action="store_true",
                            help="every name in the database, with its full key (ignores KEY_PREFIX)")

    # -- entry point ---------------------------------------------------------------------------
    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "run":  # the command it runs has its own errors and exit status
            return self.do_run(options)
        self.all_prefixes = options.get("all_prefixes", False)
        with self.errors_as_statuses():
            self.key_prefix = coord_settings().key_prefix
            client = get_client()
            prefix = "" if self.all_prefixes or not self.key_prefix else self.key_prefix + ":"
            self.listing = HolderListing(client, prefix=prefix)
            getattr(self, f"do_{action}")(options)

    @contextmanager
    def errors_as_statuses(self) -> Iterator[None]:
        """Errors of Redis, of arguments and of settings as a ``CommandError`` with its exit status."""
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise CommandError(f"Redis is unreachable ({describe_connection()}): {exc}", returncode=EXIT_UNREACHABLE)
        except InvalidLockArgument as exc:
            raise CommandError(str(exc), returncode=EXIT_USAGE)
        except ImproperlyConfigured as exc:
            raise CommandError(f"{SETTING_NAME} is not usable: {exc}", returncode=EXIT_USAGE)
        except RedisError as exc:
            raise CommandError(f"Redis refused the command ({describe_connection()}): {exc}", returncode=EXIT_REFUSED)

    # -- names ---------------------------------------------------------------------------------
    def key_for(self, name: str) -> str:
        if self.all_prefixes or not self.key_prefix:
            return name
        return f"{self.key_prefix}:{name}"

    # -- list ----------------------------------------------------------------------------------
    def do_list(self, options: dict[str, Any]) -> None:
        watch, count = options["watch"], options["count"]
        if watch is not None and watch <= 0:
            raise CommandError("--watch needs a positive number of seconds", returncode=EXIT_USAGE)
        if count is not None and count < 1:
            raise CommandError("--count needs a positive number", returncode=EXIT_USAGE)
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit needs a positive number", returncode=EXIT_USAGE)
        if watch is None:
            self.print_list(options)
            return
        refreshes = 0
        try:
            while True:
                if self.stdout.isatty():
                    self.stdout.write(CLEAR_SCREEN, ending="")
                stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
                self.stdout.write(f"Every {watch:g}s: live holders on {describe_connection()}   {stamp}")
                self.print_list(options)
                self.stdout.flush()
                refreshes += 1
                if count is not None and refreshes >= count:
                    return
                time.sleep(watch)
        except KeyboardInterrupt:
            self.stdout.write("")

    def print_list(self, options: dict[str, Any]) -> None:
        holders = self.listing.holders(kind=options["kind"], search=options["search"], limit=options["limit"])
        if options["json"]:
            self.stdout.write(json.dumps([h.as_dict() for h in holders], indent=2, ensure_ascii=False))
            return
        if not holders:
            self.stdout.write("No live holders.")
            return
        self.stdout.write(holders_table(holders))
        counts = {kind: sum(1 for h in holders if h.kind == kind) for kind in KINDS}
        rw = f", {counts['rw']} read-write lock hold(s)" if counts["rw"] else ""
        self.stdout.write(f"{len(holders)} holder(s): {counts['lock']} lock(s), {counts['sem']} semaphore permit(s)"
                          + rw)

    # -- show ----------------------------------------------------------------------------------
    def find(self, name: str, kind: Optional[str]) -> tuple[str, list[HolderInfo]]:
        """The holders of ``name`` (the lock first, else the semaphore, else the read-write lock,
        unless ``kind`` is given)."""
        key = self.key_for(name)
        for candidate in [kind] if kind else list(KINDS):
            holders = self.listing.holder(key, candidate)
            if holders:
                return candidate, holders
        what = KINDS[kind].lower() if kind else "lock, semaphore or read-write lock"
        raise CommandError(f"No {what} named {name!r} is held.", returncode=EXIT_NOT_HELD)

    def do_show(self, options: dict[str, Any]) -> None:
        name = options["name"]
        kind, holders = self.find(name, options["kind"])
        waiters = self.listing.waiters(self.key_for(name), kind)
        now_ms = holders[0].server_now_ms
        if options["json"]:
            payload = {
                "name": holders[0].short_name,
                "key": holders[0].name,
                "kind": kind,
                "holders": [h.as_dict() for h in holders],
                "waiters": [w.as_dict(now_ms) for w in waiters],
            }
            self.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False))
            return
        first = holders[0]
        self.stdout.write(f"{KINDS[kind]} {quoted(first.short_name)} (key {quoted(first.name)})")
        if first.usage:
            self.stdout.write(f"  {'held by' if kind == 'rw' else 'permits in use'}: {first.usage}")
        for holder in holders:
            self.stdout.write("")
            self.stdout.write(holder_details(holder))
        self.stdout.write("")
        self.stdout.write(f"  waiting: {len(waiters)}")
        if waiters:
            self.stdout.write(waiters_table(waiters, now_ms))

    # -- waiters -------------------------------------------------------------------------------
    def do_waiters(self, options: dict[str, Any]) -> None:
        name, kind = options["name"], options["kind"]
        waiters = self.listing.waiters(self.key_for(name), kind)
        now_ms = self.listing.server_time_ms()
        if options["json"]:
            self.stdout.write(json.dumps([w.as_dict(now_ms) for w in waiters], indent=2, ensure_ascii=False))
            return
        if not waiters:
            self.stdout.write(f"Nobody is waiting for {KINDS[kind].lower()} {name!r}.")
            return
        self.stdout.write(waiters_table(waiters, now_ms))

    # -- ping ----------------------------------------------------------------------------------
    def do_ping(self, options: dict[str, Any]) -> None:
        client = self.listing.client
        started = time.perf_counter()
        client.ping()
        latency_ms = (time.perf_counter() - started) * 1000.0
        sent = time.time()
        server_ms = self.listing.server_time_ms()
        skew_ms = server_ms - (sent * 1000.0)
        info = client.info("server")
        if isinstance(info, dict) and "redis_version" not in info:  # a cluster answers per node
            info = next(iter(info.values()), {})
        entries = self.listing.entries()
        report = {
            "connection": describe_connection(),
            "mode": "cluster" if hasattr(client, "get_primaries") else "standalone",
            "redis_version": info.get("redis_version"),
            "latency_ms": round(latency_ms, 3),
            "clock_difference_ms": round(skew_ms, 1),
            "key_prefix": self.key_prefix,
            "live_holds": len(entries),
        }
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
            return
        self.stdout.write(self.style.SUCCESS("PONG") + f" from {report['connection']} ({report['mode']}, "
                          f"Redis {report['redis_version']})")
        self.stdout.write(f"  round trip        {latency_ms:.2f} ms")
        self.stdout.write(f"  server clock      {skew_ms:+.0f} ms from this machine's (deadlines use the server's)")
        self.stdout.write(f"  key prefix        {self.key_prefix or '(none)'}")
        self.stdout.write(f"  live holds        {len(entries)}")

    # -- run -----------------------------------------------------------------------------------
    def do_run(self, options: dict[str, Any]) -> None:
        """Run the command after ``--`` in this process while holding lock NAME (see
        :class:`~django_redis_coord.commands.ExclusiveRun`); what it raises, ``CommandError`` with
        its status or ``SystemExit``, passes through after the release."""
        argv = options["argv"]
        if not argv:
            raise CommandError("Give the command to run after --: locks run NAME -- COMMAND [ARGS ...]",
                               returncode=EXIT_USAGE)
        command, args, command_options = parsed_command(argv, stdout=options.get("stdout"),
                                                        stderr=options.get("stderr"))
        with self.errors_as_statuses():
            run = ExclusiveRun(options["name"], argv[0], timeout=options["timeout"])
            run.acquire(options["wait"])
        with run:
            command.execute(*args, **command_options)
