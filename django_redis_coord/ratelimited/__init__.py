"""Rate limits for Django: ``@rate_limited`` on views, view classes, Celery tasks, tasks of Django's
tasks framework and functions.  The limits themselves are the Django-free
:mod:`django_redis_coord.core.ratelimit` (with the live limits' reading for the admin and
``manage.py ratelimits``: :mod:`~django_redis_coord.core.ratelimit.usage`); the settings
(``DJANGO_REDIS_COORD["RATELIMIT"]``) are read and checked in
:mod:`django_redis_coord.config.ratelimit_options`.  The whole story is in ``docs/ratelimits.md``.

* :mod:`.decorator`: the decorator, its refusals (429, ``on_limited``) and Redis outages;
* :mod:`.headers`: ``Retry-After``, ``RateLimit-Policy`` and ``RateLimit``;
* :mod:`.rates`: the rate of a call (given, named in the settings, or the default);
* :mod:`.checks`: the rates named by decorators and missing from the settings (system check E023);
* :mod:`.registry`: which rate each decorator gives the names it fills, for operators;
* :mod:`.inspection`: what operators see of a live limit (kind, rate, limit, remaining).
"""

from __future__ import annotations

from ..key_templates.client_ip import client_ip
from .decorator import RateLimited, current_reply, rate_limited

__all__ = ["rate_limited", "RateLimited", "current_reply", "client_ip"]
