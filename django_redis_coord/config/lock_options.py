"""The settings of the locks themselves, checked through
:func:`~django_redis_coord.config.validation.settings_problems`: ``KEY_PREFIX`` (system check
E010), how long a hold lasts (``DEFAULT_TIMEOUT``, ``AUTO_RENEW``: E011, E013, E026) and
``@locked``'s answers (``CONTENTION_STATUS``, ``CONTENTION_HANDLER``, ``UNAVAILABLE_STATUS``,
``FAIL_OPEN``: E012, E016, E013)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional

from ..core.expiry import WHY, is_no_expiry
from . import check_ids as ids
from .defaults import SETTING_NAME, Problem, bool_problem
from .redis_options import is_number

__all__ = ["key_prefix_problems", "timeout_problems", "locked_answer_problems"]


def key_prefix_problems(prefix: object) -> list[Problem]:
    """What is wrong with ``KEY_PREFIX``: a str that keeps every name in its Cluster slot."""
    if not isinstance(prefix, str):
        return [Problem(ids.BAD_KEY_PREFIX, f"{SETTING_NAME}['KEY_PREFIX'] must be a str, not {prefix!r}.",
                        'For example "shop"; "" (the default) for no prefix.')]
    if any(part in prefix for part in ("{", "}", ":dcoord:")):
        return [
            Problem(
                ids.BAD_KEY_PREFIX,
                f"{SETTING_NAME}['KEY_PREFIX'] {prefix!r} contains '{{', '}}' or ':dcoord:'.",
                "Braces would change the Redis Cluster slot of every name; use letters, digits, '-', '_', '.'.",
            )
        ]
    return []


def timeout_problems(values: Mapping[str, Any]) -> list[Problem]:
    """What is wrong with ``DEFAULT_TIMEOUT`` (E011) and ``AUTO_RENEW`` (E026 without expiry to
    renew, E013 not a bool)."""
    problems = []
    raw = values["DEFAULT_TIMEOUT"]
    timeout = None if is_no_expiry(raw) else raw
    if raw is None:
        problems.append(
            Problem(
                ids.BAD_DEFAULT_TIMEOUT,
                f"{SETTING_NAME}['DEFAULT_TIMEOUT'] is None: locks and permits taken with it would never expire, "
                f"and {WHY}.",
                'Give a number of seconds (30 or 60 are typical), or "never" (django_redis_coord.NO_EXPIRY) to '
                "ask for holds without expiry by name.",
            )
        )
    elif timeout is not None and (not is_number(timeout) or timeout <= 0 or timeout == float("inf")):
        problems.append(
            Problem(
                ids.BAD_DEFAULT_TIMEOUT,
                f"{SETTING_NAME}['DEFAULT_TIMEOUT'] must be a positive number of seconds or 'never', "
                f"not {timeout!r}.",
                "Locks expire after this many seconds unless renewed; 30 or 60 are typical.",
            )
        )
    elif timeout is not None:
        problem = _lock_timeout_problem(timeout)
        if problem:
            problems.append(problem)
    if values["AUTO_RENEW"] and timeout is None and raw is not None:
        problems.append(
            Problem(
                ids.AUTO_RENEW_WITHOUT_EXPIRY,
                f"{SETTING_NAME}['AUTO_RENEW'] needs a DEFAULT_TIMEOUT to renew.",
                "Set DEFAULT_TIMEOUT to a number of seconds.",
            )
        )
    problem = bool_problem("AUTO_RENEW", values["AUTO_RENEW"])
    if problem:
        problems.append(problem)
    return problems


def _lock_timeout_problem(timeout: float) -> Optional[Problem]:
    """``DEFAULT_TIMEOUT`` checked by the very rules a lock applies to its ``timeout``."""
    from ..core.arguments import MAX_SECONDS
    from ..core.exceptions import InvalidLockArgument
    from ..core.lock.rules import LockBase

    try:
        LockBase(None, SETTING_NAME, timeout=timeout)  # checks its arguments; no client, nothing sent
    except InvalidLockArgument as exc:
        sleep = inspect.signature(LockBase.__init__).parameters["sleep"].default
        return Problem(
            ids.BAD_DEFAULT_TIMEOUT,
            f"{SETTING_NAME}['DEFAULT_TIMEOUT'] is {timeout!r}, which a lock refuses: {exc}.",
            f"Give between {sleep} seconds (a lock's default sleep) and {MAX_SECONDS} seconds (ten years); "
            "30 or 60 are typical.",
        )
    return None


def locked_answer_problems(values: Mapping[str, Any]) -> list[Problem]:
    """What is wrong with ``@locked``'s answers: the statuses (E012), ``CONTENTION_HANDLER``
    (E016) and ``FAIL_OPEN`` (E013)."""
    problems = []
    for name in ("CONTENTION_STATUS", "UNAVAILABLE_STATUS"):
        status = values[name]
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            problems.append(
                Problem(
                    ids.BAD_STATUS,
                    f"{SETTING_NAME}[{name!r}] must be an HTTP error status (400-599), not {status!r}.",
                    "409 (Conflict), 423 (Locked) or 429 (Too Many Requests) for contention; 503 when unavailable.",
                )
            )
    problem = bool_problem("FAIL_OPEN", values["FAIL_OPEN"])
    if problem:
        problems.append(problem)
    problems.extend(_handler_problems(values["CONTENTION_HANDLER"]))
    return problems


def _handler_problems(handler: object) -> list[Problem]:
    if handler is None or callable(handler):
        return []
    if not isinstance(handler, str):
        return [
            Problem(
                ids.BAD_CONTENTION_HANDLER,
                f"{SETTING_NAME}['CONTENTION_HANDLER'] must be a callable or its dotted path.",
                'For example "myapp.views.busy", a function taking (request, contention).',
            )
        ]
    from django.utils.module_loading import import_string

    try:
        target = import_string(handler)
    except ImportError as exc:
        return [
            Problem(
                ids.BAD_CONTENTION_HANDLER,
                f"{SETTING_NAME}['CONTENTION_HANDLER'] {handler!r} cannot be imported: {exc}.",
                'Give the dotted path of a function taking (request, contention), e.g. "myapp.views.busy".',
            )
        ]
    if not callable(target):
        return [
            Problem(ids.BAD_CONTENTION_HANDLER, f"{SETTING_NAME}['CONTENTION_HANDLER'] is not callable.",
                    f"{handler!r} names {type(target).__name__} object; name a function taking "
                    "(request, contention).")
        ]
    return []
