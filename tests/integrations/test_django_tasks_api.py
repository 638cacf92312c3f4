"""on_contended and unique_task in one process: Django's tasks framework's default (immediate)
backend, which runs a task inside enqueue(); the refusals of bad input."""

from __future__ import annotations

import pytest

django_tasks = pytest.importorskip("django_tasks")

from django_redis_coord import InvalidLockArgument, InvalidLockArgumentType, LockContended, lock, locked  # noqa: E402
from django_redis_coord.decorator.contention import Skipped  # noqa: E402  # noqa: E402
from django_redis_coord.integrations.django_tasks import TaskAlreadyEnqueued, is_skipped, unique_task  # noqa: E402  # noqa: E402

task = django_tasks.task


@locked("api:{n}", on_contended="skip")
@task
async def skipping_async(n):
    return n


@task
@locked("api:{n}")
def raising(n):
    return n


@unique_task("api-unique:{n}", timeout=5)
@task
def unique(n):
    return n * 2


def test_skip_over_an_async_task_and_raise_under_a_task(redis_client):
    assert skipping_async.enqueue(1).return_value == 1
    with lock("api:1"):
        result = skipping_async.enqueue(1)
        assert result.status == "SUCCESSFUL" and is_skipped(result.return_value)
        assert result.return_value["lock"] == "api:1"
        failed = raising.enqueue(1)
        assert failed.status == "FAILED"
        assert failed.errors[0].exception_class is LockContended
    assert not is_skipped({"skipped": True})  # a task's own dict is not mistaken for one


def test_skip_on_a_plain_function_returns_skipped(redis_client):
    @locked("api:plain", on_contended="skip")
    def plain():
        return "ran"

    with lock("api:plain"):
        assert isinstance(plain(), Skipped)
    assert plain() == "ran"


def test_unique_task_runs_and_frees_its_keys(redis_client):
    assert unique.enqueue(3).return_value == 6
    assert not redis_client.exists("api-unique:3") and not redis_client.exists("api-unique:3:pending")
    with lock("api-unique:3"):
        with pytest.raises(TaskAlreadyEnqueued) as refused:
            unique.enqueue(3)
    assert refused.value.state == "running" and refused.value.lock_name == "api-unique:3"
    # A plain lock, not a run of the task, holds the key: the refusal says so, not "already running".
    assert "not a task's" in str(refused.value) and "already running" not in str(refused.value)
    with lock("api-unique:3:pending"):
        with pytest.raises(TaskAlreadyEnqueued, match="already pending"):
            unique.enqueue(3)
    assert unique.call(4) == 8  # called directly: no reservation, the run's hold only


@pytest.mark.parametrize("value,error", [("later", InvalidLockArgument), (1, InvalidLockArgumentType)])
def test_bad_on_contended(value, error):
    with pytest.raises(error, match="on_contended"):
        locked("x", on_contended=value)


def test_retry_names_the_missing_retry_api():
    """Celery tasks may retry (django_redis_coord.celery); a Task of Django's tasks framework cannot."""
    with pytest.raises(InvalidLockArgument, match="no retry API"):
        locked("x", on_contended="retry")(raising)


def test_skip_refused_for_a_with_block(redis_client):
    with pytest.raises(InvalidLockArgument, match="with block"):
        with locked("x", on_contended="skip"):
            pass


def test_bad_unique_task_arguments():
    with pytest.raises(InvalidLockArgumentType, match="decorates a Task"):
        unique_task("k")(lambda: None)
    with pytest.raises(InvalidLockArgument, match="pending_timeout"):
        unique_task("k", pending_timeout=0)
    with pytest.raises(InvalidLockArgument, match="on_duplicate"):
        unique_task("k", on_duplicate="ignore")
    with pytest.raises(InvalidLockArgument):
        unique_task("k", on_contended="retry")
    with pytest.raises(InvalidLockArgument, match="unique already"):
        unique_task("k:{n}")(unique)
