"""Where Redis is, checked without connecting: the connection source (``CACHE_ALIAS``, ``URL``,
``SENTINEL``, ``CLUSTER``; system checks E003-E006, E008, E009, E014) and ``CLIENT_OPTIONS`` (E007,
E018, E027), through :func:`~django_redis_coord.config.validation.settings_problems`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import check_ids as ids
from .defaults import REDIS_CACHE_BACKENDS, SETTING_NAME, Problem
from .redis_options import host_port_problem, is_number, options_refused, unknown_option_problems, url_problem

__all__ = ["connection_problems", "client_options_problems"]


def connection_problems(values: Mapping[str, Any], caches: Mapping[str, Any]) -> list[Problem]:
    """Everything wrong with the connection source of ``values`` (the settings with defaults filled
    in); ``caches`` is the ``CACHES`` setting."""
    cache_alias, url, sentinel, cluster = values["CACHE_ALIAS"], values["URL"], values["SENTINEL"], values["CLUSTER"]
    problems = []
    sources = [name for name in ("CACHE_ALIAS", "URL", "SENTINEL") if values[name] is not None]
    if len(sources) > 1:
        problems.append(
            Problem(
                ids.SEVERAL_SOURCES,
                f"{SETTING_NAME} sets more than one connection source: {', '.join(sources)}.",
                "Keep exactly one of CACHE_ALIAS, URL and SENTINEL.",
            )
        )
    if cache_alias is not None:
        problems.extend(_cache_alias_problems(cache_alias, caches))
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
                    ids.NO_REDIS,
                    f"{SETTING_NAME} names no Redis server and the 'default' cache is not a Redis cache.",
                    'Set "URL" (e.g. "redis://127.0.0.1:6379/0") or "CACHE_ALIAS" naming a Redis cache.',
                )
            )
    return problems


def client_options_problems(values: Mapping[str, Any]) -> list[Problem]:
    """Everything wrong with ``CLIENT_OPTIONS``: its shape and values (E007), names redis-py does
    not accept (E018), then, when both are fine, values redis-py refuses with the URL or a
    ``REDLOCK`` master (E027)."""
    options = values["CLIENT_OPTIONS"]
    if not isinstance(options, Mapping):
        return [
            Problem(
                ids.BAD_CLIENT_OPTIONS,
                f"{SETTING_NAME}['CLIENT_OPTIONS'] must be a dict of redis-py client arguments.",
                'For example: {"socket_timeout": 5, "health_check_interval": 30}.',
            )
        ]
    problems = []
    if options.get("decode_responses"):
        problems.append(
            Problem(
                ids.BAD_CLIENT_OPTIONS,
                f"{SETTING_NAME}['CLIENT_OPTIONS'] sets decode_responses, which lock tokens cannot use.",
                "Remove decode_responses: the locks read raw bytes.",
            )
        )
    for name in ("socket_timeout", "socket_connect_timeout"):
        value = options.get(name)
        if value is not None and (not is_number(value) or value <= 0):
            problems.append(
                Problem(
                    ids.BAD_CLIENT_OPTIONS,
                    f"{SETTING_NAME}['CLIENT_OPTIONS'][{name!r}] must be a positive number of seconds, "
                    f"not {value!r}.",
                    "Leave it out for the default (socket_connect_timeout 2, socket_timeout 5): a server that "
                    "stops answering then fails a request instead of hanging it.",
                )
            )
    cluster, sentinel = values["CLUSTER"], values["SENTINEL"]
    kind = "cluster" if cluster is not None and cluster is not False else "sentinel" if sentinel else "client"
    problems.extend(unknown_option_problems("['CLIENT_OPTIONS']", options, kind))
    if not problems:
        problems.extend(options_refused(options, values, client_url=kind == "client" and values["URL"] is not None))
    return problems


def _cache_alias_problems(alias: object, caches: Mapping[str, Any]) -> list[Problem]:
    if not isinstance(alias, str):
        return [Problem(ids.CACHE_ALIAS_UNKNOWN, f"{SETTING_NAME}['CACHE_ALIAS'] must be a str, not {alias!r}.",
                        'Name a Redis cache of CACHES, e.g. "default".')]
    if alias not in caches:
        known = ", ".join(repr(name) for name in caches) or "none"
        return [
            Problem(
                ids.CACHE_ALIAS_UNKNOWN,
                f"{SETTING_NAME}['CACHE_ALIAS'] is {alias!r}, which is not in CACHES.",
                f"Configured cache aliases: {known}.",
            )
        ]
    backend = caches[alias].get("BACKEND") if isinstance(caches[alias], Mapping) else None
    if backend not in REDIS_CACHE_BACKENDS:
        return [
            Problem(
                ids.CACHE_NOT_REDIS,
                f"The cache {alias!r} uses {backend!r}, which does not talk to Redis.",
                "Point CACHE_ALIAS at a django_redis.cache.RedisCache or "
                "django.core.cache.backends.redis.RedisCache cache, or set URL instead.",
            )
        ]
    return []


def _sentinel_problems(sentinel: object) -> list[Problem]:
    hint = 'For example: {"SENTINELS": [("10.0.0.1", 26379)], "SERVICE_NAME": "mymaster", "DB": 0}.'
    if not isinstance(sentinel, Mapping):
        return [Problem(ids.BAD_SENTINEL, f"{SETTING_NAME}['SENTINEL'] must be a dict.", hint)]
    problems = _section_problems("SENTINEL", sentinel, {"SENTINELS", "SERVICE_NAME", "DB", "SENTINEL_KWARGS"},
                                 "SENTINELS", ids.BAD_SENTINEL, hint)
    if sentinel.get("SENTINELS") is None:
        problems.append(
            Problem(ids.BAD_SENTINEL, f"{SETTING_NAME}['SENTINEL']['SENTINELS'] must list sentinels.", hint)
        )
    service = sentinel.get("SERVICE_NAME")
    if not isinstance(service, str) or not service:
        problems.append(Problem(ids.BAD_SENTINEL, f"{SETTING_NAME}['SENTINEL']['SERVICE_NAME'] must be a str.", hint))
    db = sentinel.get("DB", 0)
    if not isinstance(db, int) or isinstance(db, bool) or db < 0:
        problems.append(Problem(ids.BAD_SENTINEL, f"{SETTING_NAME}['SENTINEL']['DB'] must be a database number.", hint))
    problems.extend(_options_problems("['SENTINEL']['SENTINEL_KWARGS']", sentinel.get("SENTINEL_KWARGS"),
                                      "sentinel_kwargs", ids.BAD_SENTINEL, hint))
    return problems


def _options_problems(path: str, options: object, kind: str, problem_id: str, hint: str) -> list[Problem]:
    """An options dict of a section (``path``, e.g. ``['CLUSTER']['OPTIONS']``): a dict of names
    redis-py knows for ``kind`` (see :func:`unknown_option_problems`), or absent.  ``problem_id``
    is the section's own id (a malformed SENTINEL or CLUSTER)."""
    if options is None:
        return []
    if not isinstance(options, Mapping):
        return [Problem(problem_id, f"{SETTING_NAME}{path} must be a dict.", hint)]
    return unknown_option_problems(path, options, kind)


def _section_problems(
    section: str, value: Mapping[str, Any], known: set[str], nodes_key: str, problem_id: str, hint: str
) -> list[Problem]:
    """Unknown keys of a SENTINEL or CLUSTER dict, and a malformed list of node addresses
    (``problem_id``: the section's own id)."""
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
        return [Problem(ids.BAD_CLUSTER, f"{SETTING_NAME}['CLUSTER'] must be True, False or a dict.", hint)]
    problems = _section_problems("CLUSTER", cluster, {"STARTUP_NODES", "OPTIONS"}, "STARTUP_NODES",
                                 ids.BAD_CLUSTER, hint)
    if cluster.get("STARTUP_NODES") is None and values["URL"] is None:
        problems.append(Problem(ids.BAD_CLUSTER, f"{SETTING_NAME}['CLUSTER'] needs a URL or nodes.", hint))
    if values["CACHE_ALIAS"] is not None or values["SENTINEL"] is not None:
        problems.append(
            Problem(ids.BAD_CLUSTER, f"{SETTING_NAME}['CLUSTER'] cannot be combined with CACHE_ALIAS or SENTINEL.",
                    hint)
        )
    problems.extend(_options_problems("['CLUSTER']['OPTIONS']", cluster.get("OPTIONS"), "cluster",
                                      ids.BAD_CLUSTER, hint))
    return problems
