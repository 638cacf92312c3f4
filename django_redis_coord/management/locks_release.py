"""``manage.py locks release``: one hold by name, or every hold matching filters (a bulk release).

    manage.py locks release NAME [--kind lock|sem|rw] [--fence FENCE] [--noinput]
    manage.py locks release [--host H] [--pid P] [--label-prefix L] [--older-than DURATION] [--kind K] [--yes]

A bulk release is a dry run unless ``--yes`` is given: it lists what matches and changes nothing.
Each hold is then force-released as ``release NAME`` does, only while it has the fence it was
listed with (:meth:`~django_redis_coord.listing.HolderListing.force_release_holds`).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..core.holders import KINDS, HolderInfo, format_ms
from ..core.listing import HolderListing, HoldSelection
from .audit import log_action
from .terminal import holders_table, printable, quoted

__all__ = ["ReleaseAction", "EXIT_USAGE", "EXIT_NOT_HELD", "EXIT_NOT_CONFIRMED", "EXIT_CHANGED"]

EXIT_USAGE = 1
EXIT_NOT_HELD = 4
EXIT_NOT_CONFIRMED = 5
EXIT_CHANGED = 6

_FILTERS = ("host", "pid", "label_prefix", "older_than")


def add_release_arguments(release: CommandParser) -> None:
    release.add_argument("name", nargs="?", default=None,
                         help="the lock, semaphore or read-write lock to release (or give filters)")
    release.add_argument("--kind", choices=sorted(KINDS),
                         help="default: the lock, else the semaphore, else the read-write lock")
    release.add_argument("--fence", type=int, default=None,
                         help="release only the hold with this fence (required for a semaphore "
                              "with several permits, or a read-write lock with several readers)")
    # Django's convention (migrate, flush, collectstatic).
    release.add_argument("--noinput", "--no-input", action="store_false", dest="interactive",
                         help="do not ask for confirmation")
    bulk = release.add_argument_group("bulk release", "instead of NAME: every hold matching all the filters given "
                                                      "(a dry run unless --yes)")
    bulk.add_argument("--host", default=None, help="held by this host (exactly as listed)")
    bulk.add_argument("--pid", default=None, help="held by this process id")
    bulk.add_argument("--label-prefix", default=None, metavar="PREFIX", help="whose label starts with PREFIX")
    bulk.add_argument("--older-than", default=None, metavar="DURATION",
                      help="held for at least DURATION: 90s, 30m, 2h, 1d, 1h30m")
    bulk.add_argument("--yes", action="store_true",
                      help="release what matches (without it, only list it); with NAME: as --noinput")


class ReleaseAction(BaseCommand):
    """The ``release`` action of the ``locks`` command."""

    listing: HolderListing

    def find(self, name: str, kind: Any) -> tuple[str, list[HolderInfo]]:
        raise NotImplementedError

    def key_for(self, name: str) -> str:
        raise NotImplementedError

    def do_release(self, options: dict[str, Any]) -> None:
        filters = {key: options.get(key) for key in _FILTERS}
        given = [f"--{key.replace('_', '-')}" for key, value in filters.items() if value is not None]
        if options["name"] is not None:
            if given:
                raise CommandError(f"Give a NAME or filters ({', '.join(given)}), not both.", returncode=EXIT_USAGE)
            return self.release_one(options)
        if options["fence"] is not None:
            raise CommandError("--fence names one hold of NAME: not with filters.", returncode=EXIT_USAGE)
        selection = HoldSelection.parse(kind=options["kind"], **filters)
        if not selection.filters_holders:  # none given, or only empty ones: that would be every hold
            raise CommandError("Name the hold to release, or choose holds with --host, --pid, --label-prefix "
                               "or --older-than.", returncode=EXIT_USAGE)
        self.release_matching(selection, options["yes"])

    # -- one hold, by name ---------------------------------------------------------------------
    def release_one(self, options: dict[str, Any]) -> None:
        name, fence = options["name"], options["fence"]
        kind, holders = self.find(name, options["kind"])
        if fence is not None:
            chosen = [h for h in holders if h.fence == fence]
            if not chosen:
                fences = ", ".join(str(h.fence) for h in holders)
                raise CommandError(
                    f"{KINDS[kind]} {name!r} is held under fence {fences}, not {fence}: nothing released.",
                    returncode=EXIT_CHANGED,
                )
            target = chosen[0]
        elif len(holders) > 1:
            fences = ", ".join(str(h.fence) for h in holders)
            held = "permits" if kind == "sem" else "holds"
            raise CommandError(
                f"{KINDS[kind]} {name!r} has {len(holders)} {held} (fences {fences}): choose one with --fence.",
                returncode=EXIT_USAGE,
            )
        else:
            target = holders[0]
        summary = describe(target)
        if options["interactive"] and not options["yes"]:
            self.stdout.write(f"Force release {summary}?")
            self.stdout.write("The holder is fenced out and the next waiter gets the hold.")
            self.stdout.flush()
            try:
                answer = input("Type 'yes' to continue: ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("yes", "y"):
                raise CommandError("Release cancelled: nothing changed.", returncode=EXIT_NOT_CONFIRMED)
        result = self.listing.force_release(self.key_for(name), kind, expected_fence=target.fence)
        if result.fence_mismatch or result.was_free:
            raise CommandError(
                f"The hold changed before the release (now fence {result.fence}): nothing released.",
                returncode=EXIT_CHANGED,
            )
        log_action("locks release", f"Force released {summary}; fence counter moved to {result.fence_after}",
                   summary)
        self.stdout.write(
            self.style.SUCCESS(f"Released {summary}.")
            + f"\nFence counter moved to {result.fence_after}; "
            + result.what_followed(target.waiters) + "."
        )

    # -- every hold matching filters -----------------------------------------------------------
    def release_matching(self, selection: HoldSelection, confirmed: bool) -> None:
        holders = self.listing.select(selection)
        if not holders:
            raise CommandError(f"No live hold matches: {printable(selection.describe())}.", returncode=EXIT_NOT_HELD)
        self.stdout.write(f"{len(holders)} hold(s) match {printable(selection.describe())}:")
        self.stdout.write(holders_table(holders))
        if not confirmed:
            self.stdout.write("Dry run: nothing was released. Run again with --yes to release these holds "
                              "(each only if it still has the fence listed).")
            return
        left = 0
        for holder, result in self.listing.force_release_holds(holders):
            if result.released:
                log_action("locks release", f"Force released {describe(holder)} (by filter: "
                           f"{printable(selection.describe())}); fence counter moved to {result.fence_after}",
                           describe(holder))
                self.stdout.write(self.style.SUCCESS(f"Released {describe(holder)}") +
                                  f"; fence counter moved to {result.fence_after}, "
                                  f"{result.what_followed(holder.waiters)}.")
            else:
                left += 1
                now = "it had ended" if result.was_free else f"now fence {result.fence}"
                self.stdout.write(self.style.WARNING(f"Left alone {KINDS[holder.kind]} {quoted(holder.short_name)}, "
                                                     f"fence {holder.fence}: {now}."))
        released = len(holders) - left
        self.stdout.write(f"{released} of {len(holders)} hold(s) released.")
        if left:
            raise CommandError(f"{left} hold(s) had ended or changed before their release: left alone.",
                               returncode=EXIT_CHANGED)


def describe(holder: HolderInfo) -> str:
    """One hold in a sentence, every part printable: ``Lock 'jobs:a', fence 12, held by ...``."""
    mode = f" ({holder.mode} hold)" if holder.mode else ""
    return (
        f"{KINDS[holder.kind]} {quoted(holder.short_name)}{mode}, fence {holder.fence}, held by "
        f"{printable(holder.owner)}" + (f" ({printable(holder.label)})" if holder.label else "")
        + f" for {format_ms(holder.held_for_ms)}, {format_ms(holder.ttl_ms)} left"
    )
