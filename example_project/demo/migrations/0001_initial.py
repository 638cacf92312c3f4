from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Report",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100, unique=True)),
                ("body", models.TextField(blank=True)),
                ("builds", models.PositiveIntegerField(default=0)),
                ("fence", models.BigIntegerField(default=0)),
                ("built_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
