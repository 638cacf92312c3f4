"""Rate limits for Django: ``@rate_limited`` on views, view classes, Celery tasks, tasks of Django's
tasks framework and functions; its settings (``DJANGO_REDIS_COORD["RATELIMIT"]``); the busiest
keys for the admin and ``manage.py ratelimits``.  The limits themselves are the Django-free
:mod:`django_redis_coord.ratelimit`.  The whole story is in ``docs/ratelimits.md``.

* :mod:`.decorator`: the decorator, its refusals (429, ``on_limited``) and Redis outages;
* :mod:`.headers`: ``Retry-After``, ``RateLimit-Policy`` and ``RateLimit``;
* :mod:`.rates`: the rate of a call (given, named in the settings, or the default);
* :mod:`.conf`: the settings and what is wrong with them (system checks);
* :mod:`.usage`: the live limits in Redis, read by the admin page and the command.
"""

from __future__ import annotations

from .conf import RateLimitSettings, ratelimit_settings
from .decorator import RateLimited, current_reply, rate_limited

__all__ = ["rate_limited", "RateLimited", "current_reply", "RateLimitSettings", "ratelimit_settings"]
