from django.db import models


class Account(models.Model):
    """A row protected by a lock: writers record the fence of the hold they wrote under."""

    name = models.CharField(max_length=50, unique=True)
    balance = models.IntegerField(default=0)
    fence = models.BigIntegerField(default=0)
    version = models.BigIntegerField(default=0)

    class Meta:
        app_label = "testapp"
