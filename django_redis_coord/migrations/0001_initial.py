"""The unmanaged placeholder model of the admin page (no table is created)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Holder",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
            ],
            options={
                "verbose_name": "live holder",
                "verbose_name_plural": "live holders",
                "permissions": [("force_release_holder", "Can force-release a lock or semaphore permit")],
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
