"""docs/leaders.md's way of campaigning in a Django project lists the leader in ``locks list``."""

from __future__ import annotations

import io

from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from django_redis_coord import Leader
from django_redis_coord.config.connection import get_client
from django_redis_coord.config.settings import prefixed


def test_a_leader_on_the_configured_client_and_prefix_is_listed_with_its_role(redis_client):
    with override_settings(DJANGO_REDIS_COORD={**settings.DJANGO_REDIS_COORD, "KEY_PREFIX": "shop"}):
        leader = Leader(get_client(), prefixed("reports:scheduler"), lease=10, label="reports")
        assert leader.campaign(blocking_timeout=10)
        try:
            out = io.StringIO()
            call_command("locks", "list", stdout=out)
        finally:
            leader.resign()
    header, *rows = out.getvalue().splitlines()
    (row,) = [row for row in rows if row.startswith("reports:scheduler ")]  # listed without the prefix
    role = header.index("ROLE")
    assert row[role:].split()[0] == "leader" and str(leader.term) in row
    assert redis_client.exists("shop:reports:scheduler") == 0  # resigned: the key is gone
