"""The admin pages' placeholder models: permissions, admin index entries and a content type for
the admin's log, no database table.

Live holders and rate limits are read from Redis (:mod:`django_redis_coord.listing`); these models
exist only so that Django creates the permissions the pages check, lists the pages on the admin
index and in its sidebar, and has a content type to record the admin's actions under
(:class:`~django.contrib.admin.models.LogEntry`):

* ``django_redis_coord.view_holder`` — see the pages: live holders, rate limits and contention
  (staff users with it, and superusers);
* ``django_redis_coord.force_release_holder`` — force-release holds and reset rate limits.

:class:`RateLimit` and :class:`Contention` have no permissions of their own: their admin entries
follow ``view_holder``.
"""

from __future__ import annotations

from django.db import models


class _Placeholder(models.Model):
    """What the admin's log shows of an instance: its ``description`` (set on an unsaved instance
    that names a hold or a limit, see :mod:`django_redis_coord.admin.audit`), else the model's name."""

    #: Not a field: set on the unsaved instance a log entry is made from.
    description = ""

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.description or str(self._meta.verbose_name)


class Holder(_Placeholder):
    """A live lock or semaphore holder (shown by the admin page; never stored)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = [("force_release_holder", "Can force-release a lock or semaphore permit")]
        verbose_name = "live holder"
        verbose_name_plural = "live holders"


class RateLimit(_Placeholder):
    """A live rate limit (its admin entry is the rate-limits page; never stored)."""

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "rate limit"
        verbose_name_plural = "rate limits"


class Contention(_Placeholder):
    """The contention history per key template (its admin entry is the contention page; never stored)."""

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "contention"
        verbose_name_plural = "contention"
