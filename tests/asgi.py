"""The ASGI application of the test project (served by uvicorn in the wait-hub test)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

application = get_asgi_application()
