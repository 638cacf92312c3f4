"""Views holding a side of a read-write lock (``@locked(..., mode=...)``), for tests/django/test_rwlock.py.

As in :mod:`tests.testapp.views`, a holding view announces itself (``entered:<name>``) and stays
inside until the test sets ``go:<name>``; it answers with its hold's mode, fence and validity.
"""

from __future__ import annotations

from django.http import HttpResponse

from django_redis_coord import locked

from .views import ahold_until_released, hold_until_released


def describe(request) -> HttpResponse:
    held = request.coord_lock
    return HttpResponse(f"{held.mode} {held.name} fence={held.fence} valid={held.valid}")


@locked("report:{name}", mode="read", timeout=30)
def read_report(request, name):
    hold_until_released(name)
    return describe(request)


@locked("report:{name}", mode="write", timeout=30)
def write_report(request, name):
    hold_until_released(name)
    return describe(request)


@locked("report:{name}", mode="read", timeout=30)
async def aread_report(request, name):
    await ahold_until_released(name)
    return describe(request)


@locked("report:{name}", mode="write", timeout=30)
async def awrite_report(request, name):
    await ahold_until_released(name)
    return describe(request)
