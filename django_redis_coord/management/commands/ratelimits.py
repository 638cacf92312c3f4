"""``manage.py ratelimits``: the live rate limits, one limit's state, and resetting it.

    manage.py ratelimits list [--limit N] [--json]
    manage.py ratelimits show NAME [--rate RATE [--burst N]] [--json]
    manage.py ratelimits reset NAME [--noinput]

``NAME`` is the key as the code fills it, without ``KEY_PREFIX`` (``api:42`` for
``@rate_limited("api:{user.pk}")`` and user 42).  ``list`` shows the busiest limits
(:func:`~django_redis_coord.core.ratelimit.usage.busiest`); ``show`` the state of one, and with
``--rate`` (and ``--burst``) what a call would get now (a ``peek``: nothing is consumed); ``reset``
forgets the state of both kinds of limit of that name (its next call starts from an idle limit).
Exit status as ``manage.py locks``: 0 success, 1 bad arguments or settings, 3 Redis unreachable,
4 no live limit of that name, 5 reset not confirmed, 7 Redis refused the command.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...config.connection import get_client
from ...config.settings import coord_settings
from ...core.holder_fields import format_ms
from ...core.ratelimit import RateLimit, parse_rate
from ...core.ratelimit.usage import LimitUsage, busiest, usage_of
from ..audit import log_action
from ..locks_release import EXIT_NOT_CONFIRMED, EXIT_NOT_HELD
from ..terminal import quoted, render_table
from .locks import Command as LocksCommand

__all__ = ["Command"]


def _table(usages: list[LimitUsage]) -> str:
    return render_table(["NAME", "KIND", "FREE AGAIN IN", "IN WINDOW"], [
        [u.name, u.kind, format_ms(u.free_in_ms), "-" if u.in_window is None else str(u.in_window)] for u in usages
    ])


class Command(BaseCommand):
    help = "List the busiest live rate limits, show one, or reset one."

    #: Errors of Redis, of arguments and of settings as a ``CommandError`` with its exit status.
    errors_as_statuses = LocksCommand.errors_as_statuses

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(dest="action", metavar="{list,show,reset}")
        subparsers.required = True
        listing = subparsers.add_parser("list", help="the busiest live limits")
        listing.add_argument("--limit", type=int, default=50, metavar="N", help="at most N limits (default 50)")
        listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
        show = subparsers.add_parser("show", help="the state of one limit")
        show.add_argument("name", help="the limit's name, without KEY_PREFIX")
        show.add_argument("--rate", default=None, help="its rate (e.g. 100/m): also show what a call would get now")
        show.add_argument("--burst", type=int, default=None, help="with --rate: its burst")
        show.add_argument("--json", action="store_true")
        reset = subparsers.add_parser("reset", help="forget one limit's state: its next call finds it idle")
        reset.add_argument("name", help="the limit's name, without KEY_PREFIX")
        reset.add_argument("--noinput", "--no-input", action="store_false", dest="interactive",
                           help="do not ask for confirmation")

    def handle(self, *args: Any, **options: Any) -> None:
        with self.errors_as_statuses():
            self.client = get_client()
            self.settings = coord_settings()
            getattr(self, f"do_{options['action']}")(options)

    def do_list(self, options: dict[str, Any]) -> None:
        if options["limit"] < 1:
            raise CommandError("--limit needs a positive number", returncode=1)
        usages = busiest(self.client, self.settings.key_prefix, limit=options["limit"])
        if options["json"]:
            self.stdout.write(json.dumps([u.as_dict() for u in usages], indent=2, ensure_ascii=False))
        elif not usages:
            self.stdout.write("No live rate limits.")
        else:
            self.stdout.write(_table(usages))

    def do_show(self, options: dict[str, Any]) -> None:
        name = options["name"]
        usages = usage_of(self.client, self.settings.prefixed(name))
        payload: dict[str, Any] = {"name": name, "limits": [{**u.as_dict(), "name": name} for u in usages]}
        if options["rate"] is not None:
            limit = RateLimit(self.client, self.settings.prefixed(name), parse_rate(options["rate"]),
                              burst=options["burst"])
            reply = limit.peek()
            payload["peek"] = {"rate": options["rate"], "limit": reply.limit, "allowed": reply.allowed,
                               "remaining": reply.remaining, "retry_after": reply.retry_after,
                               "reset_after": reply.reset_after}
        elif options["burst"] is not None:
            raise CommandError("--burst goes with --rate", returncode=1)
        if options["json"]:
            self.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False))
            return
        if not usages and "peek" not in payload:
            raise CommandError(f"No live rate limit named {name!r}: it is idle (or was never used).",
                               returncode=EXIT_NOT_HELD)
        self.stdout.write(f"Rate limit {quoted(name)}")
        for usage in usages:
            window = f", {usage.in_window} call(s) in the window" if usage.in_window is not None else ""
            self.stdout.write(f"  {usage.kind}: free again in {format_ms(usage.free_in_ms)}{window} "
                              f"(key {quoted(usage.key)})")
        if not usages:
            self.stdout.write("  idle: no state in Redis")
        peek = payload.get("peek")
        if peek:
            verdict = ("would be admitted" if peek["allowed"]
                       else f"would be refused (retry in {peek['retry_after']:.3f} s)")
            self.stdout.write(f"  at {peek['rate']}: a call now {verdict}; {peek['remaining']} of {peek['limit']} "
                              "remaining")

    def do_reset(self, options: dict[str, Any]) -> None:
        name = options["name"]
        usages = usage_of(self.client, self.settings.prefixed(name))
        if not usages:
            raise CommandError(f"No live rate limit named {name!r}: nothing to reset.", returncode=EXIT_NOT_HELD)
        if options["interactive"]:
            answer = input(f"Reset the rate limit {quoted(name)} ({', '.join(u.kind for u in usages)})? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                raise CommandError("Reset not confirmed: nothing changed.", returncode=EXIT_NOT_CONFIRMED)
        # The keys of one name share its hash tag: one DEL, also on a Cluster.
        removed = self.client.delete(*[u.raw_key for u in usages])
        if removed:
            log_action("ratelimits reset", f"Reset the rate limit {quoted(name)} "
                       f"({', '.join(u.kind for u in usages)}, {removed} key(s) removed)", name)
        self.stdout.write(f"Reset {quoted(name)}: {removed} key(s) removed.")
