"""Views of the integration tests.  A holding view stays inside until the test sets ``go:<name>``.

The views announce themselves by incrementing ``entered:<name>`` so a test knows the lock is
taken before it sends the competing request.
"""

from __future__ import annotations

import asyncio
import os
import time

import redis
import redis.asyncio
from django.conf import settings
from django.db.models import F
from django.http import HttpResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views import View

from django_redis_coord import locked
from django_redis_coord.decorator.locked import current_lock

from .models import Account

HOLD_LIMIT = 15.0
_clients: dict[int, redis.Redis] = {}


def flags() -> redis.Redis:
    """A plain client of the test server (one per process)."""
    client = _clients.get(os.getpid())
    if client is None:
        client = _clients[os.getpid()] = redis.Redis.from_url(settings.REDIS_URL)
    return client


def hold_until_released(name: str) -> None:
    client = flags()
    client.incr(f"entered:{name}")
    deadline = time.monotonic() + HOLD_LIMIT
    while not client.exists(f"go:{name}") and time.monotonic() < deadline:
        time.sleep(0.01)


async def ahold_until_released(name: str) -> None:
    client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
    try:
        await client.incr(f"entered:{name}")
        deadline = time.monotonic() + HOLD_LIMIT
        while not await client.exists(f"go:{name}") and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        await client.aclose()


def describe(request) -> HttpResponse:
    held = request.coord_lock
    return HttpResponse(f"{held.name} fence={held.fence}")


@locked("hold:{name}", timeout=30)
def hold(request, name):
    hold_until_released(name)
    return describe(request)


@locked("hold:{name}", timeout=30)
async def ahold(request, name):
    await ahold_until_released(name)
    return describe(request)


@locked("cbv:{name}", timeout=30)
class HoldView(View):
    def get(self, request, name):
        hold_until_released(name)
        return describe(request)


class MethodHoldView(View):
    @locked("cbvm:{name}", timeout=30)
    def get(self, request, name):
        hold_until_released(name)
        return describe(request)


@method_decorator(locked("cbvd:{name}", timeout=30), name="dispatch")
class MethodDecoratorView(View):
    def get(self, request, name):
        hold_until_released(name)
        return describe(request)


@locked("acbv:{name}", timeout=30)
class AsyncHoldView(View):
    async def get(self, request, name):
        await ahold_until_released(name)
        return describe(request)


@locked("stream:{name}", timeout=30)
def stream(request, name):
    def chunks():
        for number in range(3):
            yield f"{number}\n"

    return StreamingHttpResponse(chunks())


@locked("stream:{name}", timeout=30)
async def astream(request, name):
    async def chunks():
        for number in range(3):
            yield f"{number}\n"

    return StreamingHttpResponse(chunks())


@locked("boom:{name}", timeout=30)
def boom(request, name):
    raise ValueError(f"boom {name}")


@locked("boom:{name}", timeout=30)
async def aboom(request, name):
    raise ValueError(f"boom {name}")


@locked("limited:{name}", limit=2, timeout=30)
def limited(request, name):
    hold_until_released(name)
    return HttpResponse(f"fence={request.coord_lock.fence}")


@locked("limited:{name}", limit=2, timeout=30)
async def alimited(request, name):
    await ahold_until_released(name)
    return HttpResponse(f"fence={request.coord_lock.fence}")


@locked("wait:{name}", timeout=30, wait=10)
def waiting(request, name):
    hold_until_released(name)
    return describe(request)


@locked("await:{name}", timeout=30, wait=60)
async def await_turn(request, name):
    """Served under an ASGI server by the wait-hub test: says whether another request was inside
    at the same time, and the hold's fence and token (the test checks their order)."""
    client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
    try:
        inside = await client.incr(f"inside:{name}")
        await asyncio.sleep(0.001)
        await client.decr(f"inside:{name}")
    finally:
        await client.aclose()
    held = request.coord_lock
    return HttpResponse(f"{inside} {held.fence} {held.local.token.decode()}")


@locked("user:{user.pk}")
def per_user(request):
    return describe(request)


@locked("user:{user.pk}")
async def aper_user(request):
    return describe(request)


@locked("item:{query[item]}")
def by_query(request):
    return describe(request)


@locked("tenant:{headers[X-Tenant]}")
def by_header(request):
    return describe(request)


@locked("pair:{headers[X-A]}:{headers[X-B]}")
def by_two_headers(request):
    return describe(request)


@locked(key=lambda request: request.headers.get("X-Key"))
def by_callable_header(request):
    return describe(request)


@locked
def default_key(request):
    return HttpResponse(current_lock().name)


@locked(key=lambda request, name: f"callable:{name[::-1]}")
def by_callable(request, name):
    return describe(request)


@locked("rollback:{name}", timeout=0.3, rollback_on_loss=True)
def rollback(request, name):
    Account.objects.filter(name=name).update(balance=F("balance") + 100)
    time.sleep(float(request.GET.get("sleep", "0")))
    return describe(request)


@locked("renewed:{name}", timeout=1.5, auto_renew=True, rollback_on_loss=True)
def renewed(request, name):
    Account.objects.filter(name=name).update(balance=F("balance") + 1)
    hold_until_released(name)
    return describe(request)


@locked("fenced:{name}", timeout=30)
def fenced(request, name):
    from django_redis_coord import fenced_update

    applied = fenced_update(
        Account.objects.filter(name=name), request.coord_lock.fence, balance=int(request.GET["balance"])
    )
    return HttpResponse("applied" if applied else "refused")


@locked("avail:{name}", timeout=30)
def availability(request, name):
    if request.GET.get("hold"):
        hold_until_released(name)
    return HttpResponse(f"ran locked={current_lock() is not None}")


@locked("avail:{name}", timeout=30)
async def aavailability(request, name):
    return HttpResponse(f"ran locked={current_lock() is not None}")


@locked("rendered:{name}", timeout=30)
def rendered(request, name):
    from django.template import engines
    from django.template.response import TemplateResponse

    template = engines["django"].from_string("held while rendering: {{ probe }}")
    # Called by the template engine when the response is rendered, after the view returned.
    probe = lambda: bool(flags().exists(f"rendered:{name}"))  # noqa: E731
    return TemplateResponse(request, template, {"probe": probe})
