"""The admin page's placeholder model: permissions and an admin index entry, no database table.

Live holders are read from Redis (:mod:`django_redis_coord.listing`); ``Holder`` exists only so
that Django creates the permissions the page checks:

* ``django_redis_coord.view_holder`` — see the page (staff users with it, and superusers);
* ``django_redis_coord.force_release_holder`` — use its force-release button.
"""

from __future__ import annotations

from django.db import models


class Holder(models.Model):
    """A live lock or semaphore holder (shown by the admin page; never stored)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = [("force_release_holder", "Can force-release a lock or semaphore permit")]
        verbose_name = "live holder"
        verbose_name_plural = "live holders"

    def __str__(self) -> str:
        return "live holder"
