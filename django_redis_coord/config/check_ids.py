"""The system-check ids of django_redis_coord, each with the one kind of problem it means.

Every check message the app reports (the settings problems of
:func:`~django_redis_coord.config.validation.settings_problems` and the checks of
:mod:`django_redis_coord.checks`) takes its id from a name here, never from a literal:
:class:`~django_redis_coord.config.defaults.Problem` refuses an id that is not listed.  A new kind
of problem gets a new id (the next free number), never one that already means something else.
docs/django.md's check tables list each id once, with this meaning (tests/django/test_check_ids.py
holds the three together).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["CHECK_IDS", "PREFIX"]

PREFIX = "django_redis_coord."

_meanings: dict[str, str] = {}


def _define(number: str, meaning: str) -> str:
    check_id = PREFIX + number
    if check_id in _meanings:
        raise ValueError(f"{check_id} is defined twice")
    _meanings[check_id] = meaning
    return check_id


# -- the settings (DJANGO_REDIS_COORD), as docs/django.md lists them ----------------------------
SETTING_NOT_A_DICT = _define("E001", "DJANGO_REDIS_COORD is not a dict")
UNKNOWN_KEY = _define("E002", "DJANGO_REDIS_COORD has an unknown key")
SEVERAL_SOURCES = _define("E003", "more than one connection source")
CACHE_ALIAS_UNKNOWN = _define("E004", "CACHE_ALIAS names no cache of CACHES")
CACHE_NOT_REDIS = _define("E005", "CACHE_ALIAS names a cache that is not a Redis cache")
BAD_URL = _define("E006", "URL is malformed or refused by redis-py")
BAD_CLIENT_OPTIONS = _define("E007", "CLIENT_OPTIONS is not a dict, or sets an option the locks cannot use")
BAD_SENTINEL = _define("E008", "SENTINEL is malformed")
BAD_CLUSTER = _define("E009", "CLUSTER is malformed")
BAD_KEY_PREFIX = _define("E010", "KEY_PREFIX is not a usable prefix")
BAD_DEFAULT_TIMEOUT = _define("E011", "DEFAULT_TIMEOUT is not a timeout a lock accepts")
BAD_STATUS = _define("E012", "an HTTP status setting is not a 4xx/5xx status")
NOT_A_BOOL = _define("E013", "a boolean setting is not a bool")
NO_REDIS = _define("E014", "no Redis named and the default cache is not a Redis cache")
BAD_REDLOCK = _define("E015", "REDLOCK is malformed")
BAD_CONTENTION_HANDLER = _define("E016", "CONTENTION_HANDLER cannot be imported or is not callable")
REDLOCK_NOT_SET = _define("E017", "@locked(redlock=True) is used but REDLOCK is not set")
UNKNOWN_REDIS_OPTION = _define("E018", "an option redis-py does not accept")
BAD_METRICS = _define("E019", "METRICS is not a list of distinct exporter names")
METRICS_PACKAGE_MISSING = _define("E020", "METRICS names an exporter whose package cannot be imported")
BAD_RATELIMIT = _define("E021", "RATELIMIT is malformed")
BAD_RATE = _define("E022", "a rate of RATELIMIT (DEFAULT_RATE, RATES) is malformed")
RATE_NOT_SET = _define("E023", "a rate a decorator takes from the settings is not set")
BAD_CLIENT_IP = _define("E024", "CLIENT_IP is malformed")
TRACING_PACKAGE_MISSING = _define("E025", "TRACING is True but opentelemetry cannot be imported")
AUTO_RENEW_WITHOUT_EXPIRY = _define("E026", "AUTO_RENEW is on while DEFAULT_TIMEOUT asks for no expiry")
CLIENT_OPTIONS_REFUSED = _define("E027", "redis-py refuses CLIENT_OPTIONS for the URL or a REDLOCK master")
# -- manage.py check --deploy, and a misspelled setting name -----------------------------------
EVICTION_POLICY = _define("W001", "maxmemory-policy is not noeviction")
CACHE_SHARES_DATABASE = _define("W002", "a Redis cache lives in the locks' database")
DEPLOY_UNREACHABLE = _define("W003", "Redis could not be reached to run the deploy checks")
FENCES_NOT_DURABLE = _define("W004", "the server can lose its fence counters in a restart")
SETTING_NAME_MISSPELLED = _define("W005", "a name close to DJANGO_REDIS_COORD is set, but not it")
PERSISTENCE_UNREAD = _define("I001", "CONFIG GET was refused: W004 was not checked")

#: Every id with its one meaning.
CHECK_IDS: Mapping[str, str] = MappingProxyType(dict(_meanings))
