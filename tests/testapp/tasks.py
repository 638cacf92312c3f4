"""Tasks run by a real django-tasks-db worker in tests/test_django_tasks.py.

Each records its runs in Redis (``runs:<name>`` counts them, ``started:<name>`` says one started)
and waits for the test to push ``gate:<name>`` (at most 30 s), so a test decides how long it runs."""

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

from django_redis_coord import locked
from django_redis_coord.connection import get_async_client, get_client
from django_redis_coord.tasks import unique_task


def _run(name: str) -> None:
    client = get_client()
    client.incr(f"runs:{name}")
    client.rpush(f"started:{name}", 1)
    client.blpop([f"gate:{name}"], timeout=30)


async def _arun(name: str) -> None:
    client = get_async_client()
    await client.incr(f"runs:{name}")
    await client.rpush(f"started:{name}", 1)
    await client.blpop([f"gate:{name}"], timeout=30)


@unique_task("report:{day}", timeout=2)
@task
def unique_report(day: str) -> str:
    _run(f"report:{day}")
    return day


@unique_task("areport:{day}", timeout=2)
@task
async def unique_areport(day: str) -> str:
    await _arun(f"areport:{day}")
    return day


@task
@locked("nightly:{region}", timeout=5, auto_renew=True, on_contended="skip")
def nightly_under(region: str) -> str:
    _run(f"nightly:{region}")
    return "done"


@locked("nightly:{region}", timeout=5, auto_renew=True, on_contended="skip")
@task
async def nightly_over(region: str) -> str:
    await _arun(f"nightly:{region}")
    return "done"


@locked("nightly:{region}", timeout=5, auto_renew=True)
@task
def nightly_raise(region: str) -> str:
    _run(f"nightly:{region}")
    return "done"
