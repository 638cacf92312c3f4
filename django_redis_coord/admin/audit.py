"""The admin's audit trail: every force release, bulk release and rate-limit reset made in the
admin is a Django :class:`~django.contrib.admin.models.LogEntry` (who, when, what), so it shows
under "Recent actions" on the admin index, and on the holder's page for a release.

No database row stands for a hold or a limit: each entry is recorded under the content type of
the app's placeholder model (:class:`~django_redis_coord.models.Holder` for holds,
:class:`~django_redis_coord.models.RateLimit` for rate limits), with the hold's holder id (as in
its admin URL) or the limit's name as ``object_id``, and a deletion flag: the hold or the state is
gone.  The change message says what was released (kind, name, fence) and what followed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import QuerySet
from django.http import HttpRequest

from ..models import Holder, RateLimit

__all__ = ["log_releases", "log_reset", "history_of"]


def _placeholder(model: Any, object_id: str, description: str) -> Any:
    placeholder = model(pk=object_id)
    placeholder.description = description
    return placeholder


def log_releases(request: HttpRequest, released: Iterable[tuple[str, str]], message: str) -> None:
    """Record force releases made by ``request.user``: ``released`` gives each hold's holder id and
    its description (``lock “orders:sync”, fence 12``)."""
    placeholders = [_placeholder(Holder, holder_id, description) for holder_id, description in released]
    if placeholders:
        LogEntry.objects.log_actions(request.user.pk, placeholders, DELETION, message,
                                     single_object=len(placeholders) == 1)


def log_reset(request: HttpRequest, name: str, message: str) -> None:
    """Record the reset of the rate limit ``name`` (without ``KEY_PREFIX``) by ``request.user``."""
    LogEntry.objects.log_actions(request.user.pk, [_placeholder(RateLimit, name, f"rate limit “{name}”")],
                                 DELETION, message, single_object=True)


def history_of(holder_id: str, limit: int = 20) -> QuerySet[LogEntry]:
    """The latest admin actions on the name ``holder_id`` stands for, newest first."""
    content_type = ContentType.objects.get_for_model(Holder, for_concrete_model=False)
    return (LogEntry.objects.filter(content_type=content_type, object_id=holder_id)
            .select_related("user").order_by("-action_time")[:limit])
