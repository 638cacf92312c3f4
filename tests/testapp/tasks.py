"""Tasks run by a real django-tasks-db worker in tests/integrations/test_django_tasks.py.

Each records its runs in Redis (``runs:<name>`` counts them, ``started:<name>`` says one started)
and waits for the test to push ``gate:<name>``, so the test decides how long it runs, however slow
the machine: the wait's own limit, :data:`GATE_WAIT`, only ends a run whose test ended without
opening the gate (the tests' own timeouts are shorter).  The wait is a series of one-second BLPOPs:
a longer one would outlast the client's socket timeout (``DEFAULT_CLIENT_OPTIONS``: 5 s) and end
the run with a ``TimeoutError``."""

import time

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

from django_redis_coord import locked
from django_redis_coord.config.connection import get_async_client, get_client
from django_redis_coord.integrations.django_tasks import unique_task

GATE_WAIT = 600
GATE_STEP = 1


def _run(name: str) -> None:
    client = get_client()
    client.incr(f"runs:{name}")
    client.rpush(f"started:{name}", 1)
    deadline = time.monotonic() + GATE_WAIT
    while time.monotonic() < deadline and not client.blpop([f"gate:{name}"], timeout=GATE_STEP):
        pass


async def _arun(name: str) -> None:
    client = get_async_client()
    await client.incr(f"runs:{name}")
    await client.rpush(f"started:{name}", 1)
    deadline = time.monotonic() + GATE_WAIT
    while time.monotonic() < deadline and not await client.blpop([f"gate:{name}"], timeout=GATE_STEP):
        pass


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


# The same two with a 10 s hold, for tests of uniqueness under many enqueues: their runs must not
# lose the key to a renewal that a loaded machine delays past a 2 s TTL (that loss, signalled, is
# tested with the 2 s tasks above).
@unique_task("steady:{day}", timeout=10)
@task
def steady_report(day: str) -> str:
    _run(f"steady:{day}")
    return day


@unique_task("asteady:{day}", timeout=10)
@task
async def steady_areport(day: str) -> str:
    await _arun(f"asteady:{day}")
    return day


@unique_task("pair:{pair}", timeout=2)
@task
def unique_pair(pair: tuple) -> str:
    """Enqueued with a tuple, run with the list JSON made of it: one key for both."""
    _run(f"pair:{pair[0]}")
    return "done"


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


# -- @rate_limited ---------------------------------------------------------------------------------
from django_redis_coord import rate_limited  # noqa: E402


@rate_limited("rl-task:{day}", rate="1/m", on_limited="skip")
@task
def limited_report(day: str) -> str:
    get_client().incr(f"runs:rl-task:{day}")
    return "done"


@rate_limited("rl-atask:{day}", rate="1/m", on_limited="raise")
@task
async def limited_areport(day: str) -> str:
    await get_async_client().incr(f"runs:rl-atask:{day}")
    return "done"
