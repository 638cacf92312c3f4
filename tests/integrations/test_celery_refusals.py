"""A unique Celery task refused because a plain lock holds its key says so (no worker needed)."""

from __future__ import annotations

import pytest

from django_redis_coord import lock
from django_redis_coord.integrations.celery import DuplicateTask
from tests.integrations.test_celery import broker, celery_app  # noqa: F401  (fixtures)


def test_a_plain_lock_on_the_key_is_named_as_such(celery_app, redis_client):  # noqa: F811
    with lock("report:plain-holder", timeout=30):
        with pytest.raises(DuplicateTask) as raised:
            celery_app.build_report.delay("plain-holder")
    message = str(raised.value)
    assert "'report:plain-holder'" in message and "not a task's" in message
    assert "pending or running" not in message and raised.value.task_id is None
