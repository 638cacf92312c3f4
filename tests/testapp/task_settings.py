"""Settings of the processes that enqueue and run tasks (tests/integrations/test_django_tasks.py): the test
settings plus Django's tasks framework on django-tasks-db, in the SQLite file ``DCOORD_TASKS_DB``."""

import os

from tests.settings import *  # noqa: F401,F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks", "django_tasks_db"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["DCOORD_TASKS_DB"],
        "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
