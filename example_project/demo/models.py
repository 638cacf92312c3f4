"""The demo's one table: reports, written only under a lock and only with a current fence."""

from django.db import models


class Report(models.Model):
    name = models.CharField(max_length=100, unique=True)
    body = models.TextField(blank=True)
    builds = models.PositiveIntegerField(default=0)
    #: Fence of the hold that last wrote the row; a write with a lower fence is refused.
    fence = models.BigIntegerField(default=0)
    built_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name
