"""@rate_limited on Celery tasks, run by a real worker (the fixtures of tests/test_celery.py):
``on_limited`` "skip", "raise" and "retry" (the retry's countdown is the refusal's retry_after,
rounded up)."""

from __future__ import annotations

import pytest

celery = pytest.importorskip("celery")

from django_redis_coord.decorator.contention import is_skipped  # noqa: E402
from tests.integrations import test_celery  # noqa: E402
from tests.integrations.test_celery import fresh  # noqa: E402

# The worker tests/test_celery.py starts (module-scoped fixtures), shared here.
broker, celery_app, worker = test_celery.broker, test_celery.celery_app, test_celery.worker


def test_a_limited_task_is_skipped(worker, celery_app, redis_client):
    account = fresh()
    assert celery_app.rate_skip.delay(account).get(timeout=20) == "sent"
    second = celery_app.rate_skip.delay(account)
    value = second.get(timeout=20)
    assert is_skipped(value) and second.state == "SUCCESS" and 1 <= value["retry_after"] <= 60
    assert len(celery_app.runs(f"rate_skip:{account}")) == 1


def test_a_limited_task_raises_rate_limit_exceeded(worker, celery_app, redis_client):
    account = fresh()
    assert celery_app.rate_raise.delay(account).get(timeout=20) == "sent"
    second = celery_app.rate_raise.delay(account)
    with pytest.raises(Exception) as raised:
        second.get(timeout=20)
    assert type(raised.value).__name__ == "RateLimitExceeded" and second.state == "FAILURE"
    assert len(celery_app.runs(f"rate_raise:{account}")) == 1


def test_a_limited_task_retries_when_its_slot_opens(worker, celery_app, redis_client):
    """Rate 1 per 2 s: the second task, sent at once, is refused (retry_after just under 2 s),
    retried with countdown 2, and then admitted: it runs once, on a later attempt."""
    account = fresh()
    first = celery_app.rate_retry.delay(account)
    assert first.get(timeout=20) == "sent"
    second = celery_app.rate_retry.delay(account)
    assert second.get(timeout=30) == "sent"
    runs = [run.split(":") for run in celery_app.runs(f"rate_retry:{account}")]
    assert len(runs) == 2
    (_pid, retries_first, _at_first), (_pid2, retries_second, _at_second) = runs
    assert retries_first == "0" and int(retries_second) >= 1
