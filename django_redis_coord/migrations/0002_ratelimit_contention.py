"""The unmanaged placeholder models of the rate-limits and contention pages (no table is created)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_redis_coord", "0001_initial")]

    operations = [
        migrations.CreateModel(
            name="RateLimit",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
            ],
            options={
                "verbose_name": "rate limit",
                "verbose_name_plural": "rate limits",
                "managed": False,
                "default_permissions": (),
            },
        ),
        migrations.CreateModel(
            name="Contention",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
            ],
            options={
                "verbose_name": "contention",
                "verbose_name_plural": "contention",
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
