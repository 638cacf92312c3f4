"""Management commands that run one at a time: :class:`SingletonCommand`, and ``manage.py locks run``.

>>> from django_redis_coord.commands import SingletonCommand       # doctest: +SKIP
>>> class Command(SingletonCommand):                               # doctest: +SKIP
...     lock_key = "import:{source}"        # a template over the command's options
...     def handle(self, *args, **options): ...

A second concurrent run exits at once with status :data:`EX_TEMPFAIL` (75) and a message on
stderr, or waits up to ``--wait SECONDS`` for the first to end.  The hold is renewed by the
watchdog every ``lock_timeout / 3`` while the command runs and released when it ends: normally,
on an exception, on Ctrl-C and on SIGTERM (turned into ``SystemExit(143)`` while it runs).  A
killed command's hold ends with its TTL, at most ``lock_timeout`` seconds later.

:class:`ExclusiveRun` is that hold on its own: ``manage.py locks run NAME -- COMMAND ARGS...`` runs
any management command of the project under it (loaded by :func:`parsed_command`), in its process.
"""

from __future__ import annotations

import argparse
import math
import signal
import threading
from collections.abc import Sequence
from types import FrameType, TracebackType
from typing import Any, Optional

from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..config.shortcuts import lock
from ..config.signalling import retry_after
from ..core.holders import lock_holder
from ..decorator.release import release_logged
from ..key_templates.template import KeyTemplate
from .terminal import printable

__all__ = ["SingletonCommand", "EX_TEMPFAIL", "ExclusiveRun", "parsed_command"]

#: Exit status of a run refused because another one holds the key (sysexits.h's EX_TEMPFAIL).
EX_TEMPFAIL = 75
#: The role of a command's hold in its holder record (``HolderInfo.extra["role"]``).
ROLE = "command"


def seconds_argument(value: str) -> float:
    """An ``argparse`` type: a finite number of seconds, 0 or more."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {value!r}")
    return seconds


def positive_seconds_argument(value: str) -> float:
    """An ``argparse`` type: a finite number of seconds above 0."""
    seconds = seconds_argument(value)
    if seconds == 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {value!r}")
    return seconds


def _terminated(signum: int, frame: Optional[FrameType]) -> None:
    raise SystemExit(128 + signum)


class ExclusiveRun:
    """Lock ``name`` (``KEY_PREFIX`` added) for one run of management command ``command``.

    :meth:`acquire` takes the hold (renewed every ``timeout / 3``) or raises ``CommandError``
    with status :data:`EX_TEMPFAIL`; the ``with`` block then runs the command and releases the
    hold when it ends, whatever the way.  In the main thread, SIGTERM raises ``SystemExit(143)``
    while the block runs, so ``finally`` blocks (and the release) run as on Ctrl-C.  The holder
    record says ``manage.py <command>`` (label) and ``{"role": "command", "command": <command>}``.
    """

    def __init__(self, name: str, command: str, *, timeout: float) -> None:
        self.name = name
        self.command = command
        self.hold = lock(name, timeout=timeout, auto_renew=True, label=f"manage.py {command}")
        self.hold.holder_fields = {"role": ROLE, "command": command}
        self._installed = False
        self._previous: Any = None

    def acquire(self, wait: float = 0) -> None:
        """Take the hold, waiting up to ``wait`` seconds (0: not at all, ``math.inf``: as long as
        it takes) in FIFO order; ``CommandError`` (status 75) saying who holds it if refused."""
        blocking_timeout = None if math.isinf(wait) or not wait else wait
        if self.hold.acquire(blocking=wait > 0, blocking_timeout=blocking_timeout):
            return
        seconds = retry_after(self.hold)
        retry = f"; retry in {seconds} s" if seconds else ""
        waited = f" after waiting {wait:g} s" if wait else ""
        raise CommandError(f"{self.name!r} is held by {self.holder()}{waited}{retry}", returncode=EX_TEMPFAIL)

    def holder(self) -> str:
        """Who holds the lock now, for the refusal's message (one read, only when refused)."""
        holder = lock_holder(self.hold.redis, self.hold.name)
        if holder is None:
            return "another holder (gone since)"
        if holder.extra.get("command") == self.command:
            return f"another run of {self.command} ({printable(holder.owner)})"
        return printable(holder.owner) + (f" ({printable(holder.label)})" if holder.label else "")

    def __enter__(self) -> Any:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, _terminated)
            self._installed = True
        return self.hold

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if self._installed:  # the handler before ours (None: one set outside Python, not restorable)
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)
            self._installed = False
        release_logged(self.hold)


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
            "--wait", type=seconds_argument, default=0, metavar="SECONDS",
            help="When another run holds the lock, wait up to SECONDS for it (default: exit at once "
                 f"with status {EX_TEMPFAIL}).",
        )
        return parser

    def lock_name(self, options: dict[str, Any]) -> str:
        """The name of this run's lock (without ``KEY_PREFIX``)."""
        default = f"manage.py:{self.command_name}"
        return KeyTemplate(self.lock_key, default).render(options) if self.lock_key else default

    def execute(self, *args: Any, **options: Any) -> Any:
        run = ExclusiveRun(self.lock_name(options), self.command_name, timeout=self.lock_timeout)
        run.acquire(options.get("wait") or 0)
        with run:
            return super().execute(*args, **options)


# -- manage.py locks run NAME -- COMMAND ARGS... ---------------------------------------------------
def parsed_command(argv: Sequence[str], *, prog: str = "manage.py", stdout: Any = None,
                   stderr: Any = None) -> tuple[BaseCommand, tuple, dict[str, Any]]:
    """The management command ``argv`` names (``["migrate", "--plan"]``), loaded, with its
    arguments parsed as ``manage.py`` would: ``(command, args, options)`` for its ``execute``.
    ``CommandError`` (status 1) for an unknown command or bad arguments."""
    if not argv:
        raise CommandError("Name the command to run after --: locks run NAME -- COMMAND [ARGS...]", returncode=1)
    name, *arguments = argv
    app = get_commands().get(name)
    if app is None:
        raise CommandError(f"Unknown command: {name!r}", returncode=1)
    command = app if isinstance(app, BaseCommand) else load_command_class(app, name)
    options = vars(command.create_parser(prog, name).parse_args(arguments))
    args = tuple(options.pop("args", ()))
    for stream, value in (("stdout", stdout), ("stderr", stderr)):
        if value is not None:
            options[stream] = value
    return command, args, options

