"""``DJANGO_REDIS_COORD["REDLOCK"]``: what is wrong with it (system check E015, through
:func:`~django_redis_coord.config.validation.settings_problems`); it never connects.  A
``@locked(redlock=True)`` without it is E017 (:func:`django_redis_coord.checks.check_redlock_users`)."""

from __future__ import annotations

from collections.abc import Mapping

from . import check_ids as ids
from .defaults import SETTING_NAME, Problem
from .redis_options import url_problem

__all__ = ["redlock_problems"]

_EXAMPLE = 'For example: {"MASTERS": ["redis://10.0.0.1:6379/0", "redis://10.0.0.2:6379/0", "redis://10.0.0.3:6379/0"]}.'


def redlock_problems(redlock: object) -> list[Problem]:
    """Everything wrong with ``REDLOCK`` (``None``: not set, nothing wrong); ``[]`` when fine."""
    if redlock is None:
        return []
    if not isinstance(redlock, Mapping):
        return [Problem(ids.BAD_REDLOCK, f"{SETTING_NAME}['REDLOCK'] must be a dict.", _EXAMPLE)]
    masters = redlock.get("MASTERS")
    if not isinstance(masters, (list, tuple)) or not masters:
        return [Problem(ids.BAD_REDLOCK, f"{SETTING_NAME}['REDLOCK']['MASTERS'] must list URLs.", _EXAMPLE)]
    problems = []
    for master in masters:
        problem = url_problem("REDLOCK", master)
        if problem:
            msg = problem.msg.replace("['REDLOCK']", "['REDLOCK']['MASTERS']")
            problems.append(Problem(ids.BAD_REDLOCK, msg, _EXAMPLE))
    node_timeout = redlock.get("NODE_TIMEOUT")
    if node_timeout is not None and (
        isinstance(node_timeout, bool) or not isinstance(node_timeout, (int, float)) or not node_timeout > 0
    ):
        problems.append(Problem(
            ids.BAD_REDLOCK,
            f"{SETTING_NAME}['REDLOCK']['NODE_TIMEOUT'] must be a positive number of seconds.",
            "The time each master gets to answer, e.g. 0.05; it is capped at a quarter of the lock timeout.",
        ))
    return problems
