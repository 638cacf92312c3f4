"""Singleton management commands: at most one run of a command (per key) at a time.

>>> from django_redis_coord.commands import SingletonCommand       # doctest: +SKIP
>>> class Command(SingletonCommand):                               # doctest: +SKIP
...     lock_key = "import:{source}"        # a template over the command's options
...     def handle(self, *args, **options): ...

A second concurrent run exits at once with status :data:`EX_TEMPFAIL` (75) and a message on
stderr, or waits up to ``--wait SECONDS`` for the first to end.  The hold is renewed by the
watchdog every ``lock_timeout / 3`` while the command runs and released when it ends: normally,
on an exception, on Ctrl-C and on SIGTERM (turned into ``SystemExit(143)`` while it runs).  A
killed command's hold ends with its TTL, at most ``lock_timeout`` seconds later.
"""

from __future__ import annotations

import argparse
import math
import signal
import threading
from types import FrameType
from typing import Any, Optional

from django.core.management.base import BaseCommand, CommandError, CommandParser

from .key_templates import KeyTemplate
from .release import release_logged
from .shortcuts import lock
from .signalling import retry_after

__all__ = ["SingletonCommand", "EX_TEMPFAIL"]

#: Exit status of a run refused because another one holds the key (sysexits.h's EX_TEMPFAIL).
EX_TEMPFAIL = 75


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {value!r}")
    return seconds


def _terminated(signum: int, frame: Optional[FrameType]) -> None:
    raise SystemExit(128 + signum)


class SingletonCommand(BaseCommand):
    """A ``BaseCommand`` whose runs exclude each other per :attr:`lock_key`."""

    #: The key: a ``str.format`` template over the command's options (``"import:{source}"``);
    #: ``None``: ``manage.py:<command name>``, one run of the command at a time.
    lock_key: Optional[str] = None
    #: Seconds the hold lives unless renewed (it is, every third of that, while the command runs).
    lock_timeout: float = 30

    @property
    def command_name(self) -> str:
        """The command's name (its module's)."""
        return type(self).__module__.rsplit(".", 1)[-1]

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.add_argument(
            "--wait", type=_seconds, default=0, metavar="SECONDS",
            help="When another run holds the lock, wait up to SECONDS for it (default: exit at once "
                 f"with status {EX_TEMPFAIL}).",
        )
        return parser

    def lock_name(self, options: dict[str, Any]) -> str:
        """The name of this run's lock (without ``KEY_PREFIX``)."""
        default = f"manage.py:{self.command_name}"
        return KeyTemplate(self.lock_key, default).render(options) if self.lock_key else default

    def execute(self, *args: Any, **options: Any) -> Any:
        name = self.lock_name(options)
        wait = options.get("wait") or 0
        hold = lock(name, timeout=self.lock_timeout, auto_renew=True, label=f"manage.py {self.command_name}")
        if not hold.acquire(blocking=bool(wait), blocking_timeout=wait or None):
            seconds = retry_after(hold)
            retry = f"; retry in {seconds} s" if seconds else ""
            waited = f" after waiting {wait:g} s" if wait else ""
            raise CommandError(f"{name!r} is held by another run of {self.command_name}{waited}{retry}",
                               returncode=EX_TEMPFAIL)
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
        try:
            return super().execute(*args, **options)
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, previous)
            release_logged(hold)
