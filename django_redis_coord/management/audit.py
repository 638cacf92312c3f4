"""The commands' audit trail: each force release (``manage.py locks release``, one hold or by
filter) and each rate-limit reset (``manage.py ratelimits reset``) is one ``INFO`` record on the
``django_redis_coord`` logger, naming the OS user who ran the command (:func:`getpass.getuser`),
the command and what it released, as the admin's log does for the admin's actions.

The record's ``extra`` carries the parts for a structured handler: ``os_user``, ``command`` and
``target`` (the hold's description or the limit's name).
"""

from __future__ import annotations

import getpass
import logging

__all__ = ["logger", "log_action", "os_user"]

logger = logging.getLogger("django_redis_coord")


def os_user() -> str:
    """The OS user running this process (``"unknown"`` when it cannot be told)."""
    try:
        return getpass.getuser()
    except Exception:  # no USER/LOGNAME and no passwd entry (a bare container): say so rather than fail
        return "unknown"


def log_action(command: str, what: str, target: str) -> None:
    """Record ``what`` (``"Force released lock 'jobs:a', fence 12 ..."``) done by ``command``
    (``"locks release"``) to ``target``."""
    user = os_user()
    logger.info("%s by OS user %r (manage.py %s)", what, user, command,
                extra={"os_user": user, "command": command, "target": target})
