"""``manage.py ratelimits``: the live rate limits, one limit's state, and resetting it.

    manage.py ratelimits list [--limit N] [--json]
    manage.py ratelimits show NAME [--rate RATE [--burst N]] [--json]
    manage.py ratelimits reset NAME [--noinput]

``NAME`` is the key as the code fills it, without ``KEY_PREFIX`` (``api:42`` for
``@rate_limited("api:{user.pk}")`` and user 42), or what ``list`` prints for a limit whose name
cannot be typed (its key: a name that is not printable UTF-8, a name over 1,024 bytes stored as
its digest; :func:`~django_redis_coord.core.ratelimit.usage.reference_of`).  ``list`` shows the
busiest limits (:func:`~django_redis_coord.core.ratelimit.usage.busiest`) with their kind, rate and
what remains of them when the rate is known (:mod:`~django_redis_coord.ratelimited.inspection`);
``show`` the state of one: kind, rate, remaining and used, when it is free again, key, and what a
call would get now (a ``peek``: nothing is consumed).  ``--rate`` gives the rate (``100/m``, or
the name of a rate of ``RATELIMIT["RATES"]``) when the decorators of this process do not tell it;
``reset`` forgets the state of both kinds of limit of that name (its next call starts from an
idle limit), or of the one key given.
Exit status as ``manage.py locks``: 0 success, 1 bad arguments or settings, 3 Redis unreachable,
4 no live limit of that name, 5 reset not confirmed, 7 Redis refused the command.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...config.connection import get_client
from ...config.ratelimit_options import is_rate_string
from ...config.settings import SETTING_NAME, coord_settings
from ...core.holder_fields import format_ms
from ...core.ratelimit import RateLimit, SlidingWindowLimit, parse_rate
from ...core.ratelimit.usage import busiest, usage_of
from ...ratelimited.inspection import UNKNOWN, LimitState, import_url_config, states_of
from ...ratelimited.rates import Policy
from ..audit import log_action
from ..locks_release import EXIT_NOT_CONFIRMED, EXIT_NOT_HELD, EXIT_USAGE
from ..terminal import quoted, render_table
from .locks import Command as LocksCommand

__all__ = ["Command"]


def _remaining(state: LimitState) -> str:
    return UNKNOWN if state.remaining is None else f"{state.remaining}/{state.limit}"


def _table(states: list[LimitState]) -> str:
    return render_table(["NAME", "KIND", "RATE", "REMAINING", "FREE AGAIN IN", "IN WINDOW"], [
        [s.usage.name, s.usage.kind_title, s.rate, _remaining(s), format_ms(s.usage.free_in_ms),
         "-" if s.usage.kind != "window" else str(s.used if s.used is not None else s.usage.in_window)]
        for s in states
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
        show.add_argument("name", help="the limit's name without KEY_PREFIX, or what `list` prints for it")
        show.add_argument("--rate", default=None,
                          help="its rate (e.g. 100/m) or the name of a rate of RATELIMIT['RATES'] (e.g. api), "
                               "when the decorators do not tell it")
        show.add_argument("--burst", type=int, default=None, help="with --rate: its burst")
        show.add_argument("--json", action="store_true")
        reset = subparsers.add_parser("reset", help="forget one limit's state: its next call finds it idle")
        reset.add_argument("name", help="the limit's name without KEY_PREFIX, or what `list` prints for it")
        reset.add_argument("--noinput", "--no-input", action="store_false", dest="interactive",
                           help="do not ask for confirmation")

    def handle(self, *args: Any, **options: Any) -> None:
        with self.errors_as_statuses():
            self.client = get_client()
            self.settings = coord_settings()
            getattr(self, f"do_{options['action']}")(options)

    def states(self, usages: list, given: Optional[dict[str, Policy]] = None) -> list[LimitState]:
        import_url_config()  # the views' decorators tell the rates of their names
        return states_of(self.client, usages, self.settings.ratelimit, given)

    def do_list(self, options: dict[str, Any]) -> None:
        if options["limit"] < 1:
            raise CommandError("--limit needs a positive number", returncode=EXIT_USAGE)
        states = self.states(busiest(self.client, self.settings.key_prefix, limit=options["limit"]))
        if options["json"]:
            self.stdout.write(json.dumps([s.as_dict() for s in states], indent=2, ensure_ascii=False))
        elif not states:
            self.stdout.write("No live rate limits.")
        else:
            self.stdout.write(_table(states))

    def given_policies(self, options: dict[str, Any]) -> Optional[dict[str, Policy]]:
        """The rate ``--rate`` (and ``--burst``) give, for each kind of limit (``None``: not given)."""
        rate, burst = options["rate"], options["burst"]
        if rate is None:
            if burst is not None:
                raise CommandError("--burst goes with --rate", returncode=EXIT_USAGE)
            return None
        if not is_rate_string(rate):
            named = self.settings.ratelimit.rates.get(rate)
            if named is None:
                known = ", ".join(sorted(self.settings.ratelimit.rates)) or "none"
                raise CommandError(f"--rate {rate!r} is neither a rate such as '100/m' nor a rate of "
                                   f"{SETTING_NAME}['RATELIMIT']['RATES'] (its names: {known}).", returncode=EXIT_USAGE)
            rate, burst = named.rate, burst if burst is not None else named.burst
        parsed = parse_rate(rate)
        if burst is not None and burst < 1:
            raise CommandError(f"--burst must be a positive number, not {burst}", returncode=EXIT_USAGE)
        return {"gcra": Policy(parsed, burst if burst is not None else parsed.count), "window": Policy(parsed)}

    def do_show(self, options: dict[str, Any]) -> None:
        name = options["name"]
        given = self.given_policies(options)
        prefix = self.settings.key_prefix
        states = self.states(usage_of(self.client, name, prefix), given)
        payload: dict[str, Any] = {"name": name, "limits": [s.as_dict() for s in states]}
        peeks = self.peeks(name, states, given)
        for limit, peek in zip(payload["limits"], peeks):
            limit["peek"] = peek
        if not states and given is not None and ":dcoord:" not in name:  # an idle limit of that name
            idle = self.peek(name, "gcra", given["gcra"])
            if idle is not None:
                payload["peek"] = idle
        if options["json"]:
            self.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False))
            return
        if not states and "peek" not in payload:
            raise CommandError(f"No live rate limit named {name!r}: it is idle (or was never used).",
                               returncode=EXIT_NOT_HELD)
        self.stdout.write(f"Rate limit {quoted(name)}")
        for state, peek in zip(states, peeks):
            usage = state.usage
            source = "" if state.policy is None else " (given with --rate)" if given else " (its @rate_limited)"
            self.stdout.write(f"  {usage.kind_title}")
            self.stdout.write(f"    rate:          {state.rate}{source}")
            if state.remaining is not None:
                self.stdout.write(f"    remaining:     {state.remaining} of {state.limit} ({state.used} used)")
            elif usage.in_window is not None:
                self.stdout.write(f"    in window:     {usage.in_window} call(s)")
            self.stdout.write(f"    free again in: {format_ms(usage.free_in_ms)}")
            self.stdout.write(f"    key:           {quoted(usage.key)}")
            if peek is not None:
                self.stdout.write(f"    a call now:    {self.verdict(peek)}")
        if not states:
            self.stdout.write("  idle: no state in Redis")
            self.stdout.write(f"    at {payload['peek']['rate']}: a call now {self.verdict(payload['peek'])}; "
                              f"{payload['peek']['remaining']} of {payload['peek']['limit']} remaining")

    @staticmethod
    def verdict(peek: dict[str, Any]) -> str:
        return "would be admitted" if peek["allowed"] else f"would be refused (retry in {peek['retry_after']:.3f} s)"

    def peeks(self, name: str, states: list[LimitState], given: Optional[dict[str, Policy]]) -> list[Optional[dict]]:
        """What a call of cost 1 would get now from each limit whose rate is known (``peek``)."""
        return [None if s.policy is None or s.usage.raw_name is None
                else self.peek(s.usage.raw_name, s.usage.kind, s.policy) for s in states]

    def peek(self, name: Any, kind: str, policy: Policy) -> Optional[dict[str, Any]]:
        full = name if isinstance(name, bytes) else self.settings.prefixed(name)
        limit = (SlidingWindowLimit(self.client, full, policy.rate) if kind == "window"
                 else RateLimit(self.client, full, policy.rate, burst=policy.capacity))
        reply = limit.peek()
        return {"rate": str(policy.rate), "limit": reply.limit, "allowed": reply.allowed, "remaining": reply.remaining,
                "retry_after": reply.retry_after, "reset_after": reply.reset_after}

    def do_reset(self, options: dict[str, Any]) -> None:
        name = options["name"]
        usages = usage_of(self.client, name, self.settings.key_prefix)
        if not usages:
            raise CommandError(f"No live rate limit named {name!r}: nothing to reset.", returncode=EXIT_NOT_HELD)
        if options["interactive"]:
            kinds = ", ".join(u.kind_title for u in usages)
            answer = input(f"Reset the rate limit {quoted(name)} ({kinds})? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                raise CommandError("Reset not confirmed: nothing changed.", returncode=EXIT_NOT_CONFIRMED)
        # The keys of one name share its hash tag: one DEL, also on a Cluster.
        removed = self.client.delete(*[u.raw_key for u in usages])
        if removed:
            log_action("ratelimits reset", f"Reset the rate limit {quoted(name)} "
                       f"({', '.join(u.kind for u in usages)}, {removed} key(s) removed)", name)
        self.stdout.write(f"Reset {quoted(name)}: {removed} key(s) removed.")
