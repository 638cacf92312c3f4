from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Migrate the demo's database and create the superuser admin/admin if it does not exist."

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            User.objects.create_superuser("admin", "admin@example.com", "admin")
            self.stdout.write("Created superuser admin / admin")
