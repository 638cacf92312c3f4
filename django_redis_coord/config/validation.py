"""Everything wrong with ``DJANGO_REDIS_COORD``, as :class:`~django_redis_coord.config.defaults.Problem`
s with system-check ids and hints: :func:`settings_problems` (never connects, never raises), shared
by the system checks and :func:`~django_redis_coord.conf.coord_settings`."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from typing import Any, Optional

from ..core.expiry import WHY, is_no_expiry
from .client_ip_options import client_ip_problems
from .defaults import DEFAULTS, REDIS_CACHE_BACKENDS, SETTING_NAME, Problem
from .metrics_options import metrics_problems
from .ratelimit_options import ratelimit_problems
from .redis_options import host_port_problem, is_number, options_refused, unknown_option_problems, url_problem
from .tracing_options import tracing_problems

__all__ = ["settings_problems"]


def settings_problems(raw: object, caches: Optional[Mapping[str, Any]] = None) -> list[Problem]:
    """Everything wrong with the value of ``DJANGO_REDIS_COORD`` (never connects, never raises).

    ``caches`` is the ``CACHES`` setting (read from Django's settings when omitted).
    """
    if caches is None:
        from django.conf import settings

        caches = getattr(settings, "CACHES", {}) or {}
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return [
            Problem(
                "django_redis_coord.E001",
                f"{SETTING_NAME} must be a dict, not {type(raw).__name__}.",
                'For example: DJANGO_REDIS_COORD = {"URL": "redis://127.0.0.1:6379/0"}.',
            )
        ]
    problems: list[Problem] = []
    for key in raw:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(str(key), list(DEFAULTS), n=1)
            problems.append(
                Problem(
                    "django_redis_coord.E002",
                    f"{SETTING_NAME} has an unknown key {key!r}.",
                    f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(DEFAULTS)}.",
                )
            )
    values = {**DEFAULTS, **{k: v for k, v in raw.items() if k in DEFAULTS}}

    # -- connection source ----------------------------------------------------------------
    cache_alias, url, sentinel, cluster = values["CACHE_ALIAS"], values["URL"], values["SENTINEL"], values["CLUSTER"]
    sources = [name for name in ("CACHE_ALIAS", "URL", "SENTINEL") if values[name] is not None]
    if len(sources) > 1:
        problems.append(
            Problem(
                "django_redis_coord.E003",
                f"{SETTING_NAME} sets more than one connection source: {', '.join(sources)}.",
                "Keep exactly one of CACHE_ALIAS, URL and SENTINEL.",
            )
        )
    if cache_alias is not None:
        problems.extend(_cache_alias_problems(cache_alias, caches, explicit=True))
    if url is not None:
        problem = url_problem("URL", url, client=cluster is None or cluster is False)
        if problem:
            problems.append(problem)
    if sentinel is not None:
        problems.extend(_sentinel_problems(sentinel))
    if cluster is not None and cluster is not False:
        problems.extend(_cluster_problems(cluster, values))
    if not sources and not _cluster_has_nodes(cluster):
        default = caches.get("default") if isinstance(caches, Mapping) else None
        backend = default.get("BACKEND") if isinstance(default, Mapping) else None
        if backend not in REDIS_CACHE_BACKENDS:
            problems.append(
                Problem(
                    "django_redis_coord.E014",
                    f"{SETTING_NAME} names no Redis server and the 'default' cache is not a Redis cache.",
                    'Set "URL" (e.g. "redis://127.0.0.1:6379/0") or "CACHE_ALIAS" naming a Redis cache.',
                )
            )

    options = values["CLIENT_OPTIONS"]
    if not isinstance(options, Mapping):
        problems.append(
            Problem(
                "django_redis_coord.E007",
                f"{SETTING_NAME}['CLIENT_OPTIONS'] must be a dict of redis-py client arguments.",
                'For example: {"socket_timeout": 5, "health_check_interval": 30}.',
            )
        )
    else:
        if options.get("decode_responses"):
            problems.append(
                Problem(
                    "django_redis_coord.E007",
                    f"{SETTING_NAME}['CLIENT_OPTIONS'] sets decode_responses, which lock tokens cannot use.",
                    "Remove decode_responses: the locks read raw bytes.",
                )
            )
        for name in ("socket_timeout", "socket_connect_timeout"):
            value = options.get(name)
            if value is not None and (not is_number(value) or value <= 0):
                problems.append(
                    Problem(
                        "django_redis_coord.E007",
                        f"{SETTING_NAME}['CLIENT_OPTIONS'][{name!r}] must be a positive number of seconds, "
                        f"not {value!r}.",
                        "Leave it out for the default (socket_connect_timeout 2, socket_timeout 5): a server that "
                        "stops answering then fails a request instead of hanging it.",
                    )
                )
        kind = "cluster" if cluster is not None and cluster is not False else "sentinel" if sentinel else "client"
        unknown = unknown_option_problems("['CLIENT_OPTIONS']", options, kind)
        problems.extend(unknown)
        if not unknown and not any(p.id == "django_redis_coord.E007" for p in problems):
            problems.extend(options_refused(options, values, client_url=kind == "client" and url is not None))

    # -- behaviour ------------------------------------------------------------------------
    prefix = values["KEY_PREFIX"]
    if not isinstance(prefix, str):
        problems.append(
            Problem("django_redis_coord.E010", f"{SETTING_NAME}['KEY_PREFIX'] must be a str, not {prefix!r}.",
                    'For example "shop"; "" (the default) for no prefix.')
        )
    elif any(part in prefix for part in ("{", "}", ":dcoord:")):
        problems.append(
            Problem(
                "django_redis_coord.E010",
                f"{SETTING_NAME}['KEY_PREFIX'] {prefix!r} contains '{{', '}}' or ':dcoord:'.",
                "Braces would change the Redis Cluster slot of every name; use letters, digits, '-', '_', '.'.",
            )
        )
    timeout = None if is_no_expiry(values["DEFAULT_TIMEOUT"]) else values["DEFAULT_TIMEOUT"]
    if values["DEFAULT_TIMEOUT"] is None:
        problems.append(
            Problem(
                "django_redis_coord.E011",
                f"{SETTING_NAME}['DEFAULT_TIMEOUT'] is None: locks and permits taken with it would never expire, "
                f"and {WHY}.",
                'Give a number of seconds (30 or 60 are typical), or "never" (django_redis_coord.NO_EXPIRY) to '
                "ask for holds without expiry by name.",
            )
        )
    elif timeout is not None and (not is_number(timeout) or timeout <= 0 or timeout == float("inf")):
        problems.append(
            Problem(
                "django_redis_coord.E011",
                f"{SETTING_NAME}['DEFAULT_TIMEOUT'] must be a positive number of seconds or 'never', "
                f"not {timeout!r}.",
                "Locks expire after this many seconds unless renewed; 30 or 60 are typical.",
            )
        )
    elif timeout is not None:
        problem = _lock_timeout_problem(timeout)
        if problem:
            problems.append(problem)
    if values["AUTO_RENEW"] and timeout is None and values["DEFAULT_TIMEOUT"] is not None:
        problems.append(
            Problem(
                "django_redis_coord.E011",
                f"{SETTING_NAME}['AUTO_RENEW'] needs a DEFAULT_TIMEOUT to renew.",
                "Set DEFAULT_TIMEOUT to a number of seconds.",
            )
        )
    for name in ("CONTENTION_STATUS", "UNAVAILABLE_STATUS"):
        status = values[name]
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            problems.append(
                Problem(
                    "django_redis_coord.E012",
                    f"{SETTING_NAME}[{name!r}] must be an HTTP error status (400-599), not {status!r}.",
                    "409 (Conflict), 423 (Locked) or 429 (Too Many Requests) for contention; 503 when unavailable.",
                )
            )
    for name in ("AUTO_RENEW", "FAIL_OPEN", "TRACING"):
        if not isinstance(values[name], bool):
            problems.append(
                Problem("django_redis_coord.E013", f"{SETTING_NAME}[{name!r}] must be True or False.",
                        f"{name} is {values[name]!r}; write True or False.")
            )
    handler = values["CONTENTION_HANDLER"]
    if handler is not None and not callable(handler):
        if not isinstance(handler, str):
            problems.append(
                Problem(
                    "django_redis_coord.E016",
                    f"{SETTING_NAME}['CONTENTION_HANDLER'] must be a callable or its dotted path.",
                    'For example "myapp.views.busy", a function taking (request, contention).',
                )
            )
        else:
            from django.utils.module_loading import import_string

            try:
                target = import_string(handler)
            except ImportError as exc:
                problems.append(
                    Problem(
                        "django_redis_coord.E016",
                        f"{SETTING_NAME}['CONTENTION_HANDLER'] {handler!r} cannot be imported: {exc}.",
                        "Give the dotted path of a function taking (request, contention), e.g. "
                        '"myapp.views.busy".',
                    )
                )
            else:
                if not callable(target):
                    problems.append(
                        Problem("django_redis_coord.E016", f"{SETTING_NAME}['CONTENTION_HANDLER'] is not callable.",
                                f"{handler!r} names {type(target).__name__} object; name a function taking "
                                "(request, contention).")
                    )
    problems.extend(_redlock_problems(values["REDLOCK"]))
    problems.extend(metrics_problems(values["METRICS"]))
    problems.extend(ratelimit_problems(values["RATELIMIT"]))
    problems.extend(client_ip_problems(values["CLIENT_IP"]))
    problems.extend(tracing_problems(values["TRACING"]))
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
            "django_redis_coord.E011",
            f"{SETTING_NAME}['DEFAULT_TIMEOUT'] is {timeout!r}, which a lock refuses: {exc}.",
            f"Give between {sleep} seconds (a lock's default sleep) and {MAX_SECONDS} seconds (ten years); "
            "30 or 60 are typical.",
        )
    return None


def _cache_alias_problems(alias: object, caches: Mapping[str, Any], *, explicit: bool) -> list[Problem]:
    if not isinstance(alias, str):
        return [Problem("django_redis_coord.E004", f"{SETTING_NAME}['CACHE_ALIAS'] must be a str, not {alias!r}.",
                        'Name a Redis cache of CACHES, e.g. "default".')]
    if alias not in caches:
        known = ", ".join(repr(name) for name in caches) or "none"
        return [
            Problem(
                "django_redis_coord.E004",
                f"{SETTING_NAME}['CACHE_ALIAS'] is {alias!r}, which is not in CACHES.",
                f"Configured cache aliases: {known}.",
            )
        ]
    backend = caches[alias].get("BACKEND") if isinstance(caches[alias], Mapping) else None
    if backend not in REDIS_CACHE_BACKENDS:
        return [
            Problem(
                "django_redis_coord.E005",
                f"The cache {alias!r} uses {backend!r}, which does not talk to Redis.",
                "Point CACHE_ALIAS at a django_redis.cache.RedisCache or "
                "django.core.cache.backends.redis.RedisCache cache, or set URL instead.",
            )
        ]
    return []


def _sentinel_problems(sentinel: object) -> list[Problem]:
    hint = 'For example: {"SENTINELS": [("10.0.0.1", 26379)], "SERVICE_NAME": "mymaster", "DB": 0}.'
    if not isinstance(sentinel, Mapping):
        return [Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL'] must be a dict.", hint)]
    problems = _section_problems("SENTINEL", sentinel, {"SENTINELS", "SERVICE_NAME", "DB", "SENTINEL_KWARGS"},
                                 "SENTINELS", "django_redis_coord.E008", hint)
    if sentinel.get("SENTINELS") is None:
        problems.append(
            Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL']['SENTINELS'] must list sentinels.", hint)
        )
    service = sentinel.get("SERVICE_NAME")
    if not isinstance(service, str) or not service:
        problems.append(
            Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL']['SERVICE_NAME'] must be a str.", hint)
        )
    db = sentinel.get("DB", 0)
    if not isinstance(db, int) or isinstance(db, bool) or db < 0:
        problems.append(
            Problem("django_redis_coord.E008", f"{SETTING_NAME}['SENTINEL']['DB'] must be a database number.", hint)
        )
    problems.extend(_options_problems("['SENTINEL']['SENTINEL_KWARGS']", sentinel.get("SENTINEL_KWARGS"),
                                      "sentinel_kwargs", "django_redis_coord.E008", hint))
    return problems


def _options_problems(path: str, options: object, kind: str, problem_id: str, hint: str) -> list[Problem]:
    """An options dict of a section (``path``, e.g. ``['CLUSTER']['OPTIONS']``): a dict of names
    redis-py knows for ``kind`` (see :func:`unknown_option_problems`), or absent."""
    if options is None:
        return []
    if not isinstance(options, Mapping):
        return [Problem(problem_id, f"{SETTING_NAME}{path} must be a dict.", hint)]
    return unknown_option_problems(path, options, kind)


def _section_problems(
    section: str, value: Mapping[str, Any], known: set[str], nodes_key: str, problem_id: str, hint: str
) -> list[Problem]:
    """Unknown keys of a SENTINEL or CLUSTER dict, and a malformed list of node addresses."""
    problems = []
    unknown = set(value) - known
    if unknown:
        problems.append(
            Problem(
                problem_id,
                f"{SETTING_NAME}[{section!r}] has unknown keys: {', '.join(sorted(map(str, unknown)))}.",
                hint,
            )
        )
    nodes = value.get(nodes_key)
    if nodes is None:
        return problems
    if not isinstance(nodes, (list, tuple)) or not nodes:
        problems.append(Problem(problem_id, f"{SETTING_NAME}[{section!r}][{nodes_key!r}] must list nodes.", hint))
        return problems
    for node in nodes:
        problem = host_port_problem(section, node)
        if problem:
            problems.append(problem)
    return problems


def _cluster_has_nodes(cluster: object) -> bool:
    return isinstance(cluster, Mapping) and bool(cluster.get("STARTUP_NODES"))


def _cluster_problems(cluster: object, values: Mapping[str, Any]) -> list[Problem]:
    hint = 'Set "CLUSTER": True with a seed "URL", or {"STARTUP_NODES": [("10.0.0.1", 7000), ...]}.'
    if cluster is True:
        cluster = {}
    if not isinstance(cluster, Mapping):
        return [Problem("django_redis_coord.E009", f"{SETTING_NAME}['CLUSTER'] must be True, False or a dict.", hint)]
    problems = _section_problems("CLUSTER", cluster, {"STARTUP_NODES", "OPTIONS"}, "STARTUP_NODES",
                                 "django_redis_coord.E009", hint)
    if cluster.get("STARTUP_NODES") is None and values["URL"] is None:
        problems.append(Problem("django_redis_coord.E009", f"{SETTING_NAME}['CLUSTER'] needs a URL or nodes.", hint))
    if values["CACHE_ALIAS"] is not None or values["SENTINEL"] is not None:
        problems.append(
            Problem(
                "django_redis_coord.E009",
                f"{SETTING_NAME}['CLUSTER'] cannot be combined with CACHE_ALIAS or SENTINEL.",
                hint,
            )
        )
    problems.extend(_options_problems("['CLUSTER']['OPTIONS']", cluster.get("OPTIONS"), "cluster",
                                      "django_redis_coord.E009", hint))
    return problems


def _redlock_problems(redlock: object) -> list[Problem]:
    if redlock is None:
        return []
    hint = 'For example: {"MASTERS": ["redis://10.0.0.1:6379/0", "redis://10.0.0.2:6379/0", "redis://10.0.0.3:6379/0"]}.'
    if not isinstance(redlock, Mapping):
        return [Problem("django_redis_coord.E015", f"{SETTING_NAME}['REDLOCK'] must be a dict.", hint)]
    masters = redlock.get("MASTERS")
    if not isinstance(masters, (list, tuple)) or not masters:
        return [Problem("django_redis_coord.E015", f"{SETTING_NAME}['REDLOCK']['MASTERS'] must list URLs.", hint)]
    problems = []
    for master in masters:
        problem = url_problem("REDLOCK", master)
        if problem:
            msg = problem.msg.replace("['REDLOCK']", "['REDLOCK']['MASTERS']")
            problems.append(Problem("django_redis_coord.E015", msg, hint))
    node_timeout = redlock.get("NODE_TIMEOUT")
    if node_timeout is not None and (
        isinstance(node_timeout, bool) or not isinstance(node_timeout, (int, float)) or not node_timeout > 0
    ):
        problems.append(Problem(
            "django_redis_coord.E015",
            f"{SETTING_NAME}['REDLOCK']['NODE_TIMEOUT'] must be a positive number of seconds.",
            "The time each master gets to answer, e.g. 0.05; it is capped at a quarter of the lock timeout.",
        ))
    return problems
