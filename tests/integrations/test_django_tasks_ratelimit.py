"""@rate_limited over tasks of Django's tasks framework, run by a real worker (django-tasks-db's
``db_worker``, as in tests/test_django_tasks.py): a refused run is skipped or fails."""

from __future__ import annotations

import pytest

pytest.importorskip("django_tasks_db")

from tests.integrations.test_django_tasks import TaskWorld, runs  # noqa: E402


@pytest.fixture
def world(redis_url, tmp_path):
    tasks = TaskWorld(redis_url, tmp_path / "tasks.sqlite3")
    yield tasks
    tasks.stop()


@pytest.mark.timeout(240)
def test_a_limited_task_is_skipped_then_a_limited_async_task_fails(world, redis_client):
    world.start_worker()
    first = world.report(world.enqueue("limited_report", "d1", wait=True))
    second = world.report(world.enqueue("limited_report", "d1", wait=True))
    assert first["status"] == "SUCCESSFUL" and first["return_value"] == "done"
    assert second["status"] == "SUCCESSFUL" and second["return_value"]["skipped"] is True
    assert second["return_value"]["lock"] == "rl-task:d1" and 0 < second["return_value"]["retry_after"] <= 60
    assert runs(redis_client, "rl-task:d1") == 1
    first = world.report(world.enqueue("limited_areport", "d2", wait=True))
    second = world.report(world.enqueue("limited_areport", "d2", wait=True))
    assert first["status"] == "SUCCESSFUL"
    assert second["status"] == "FAILED" and second["errors"] == ["django_redis_coord.exceptions.RateLimitExceeded"]
    assert runs(redis_client, "rl-atask:d2") == 1
