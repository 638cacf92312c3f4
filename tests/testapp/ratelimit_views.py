"""Views under ``@rate_limited`` for tests/django/test_ratelimit.py."""

from django.http import HttpResponse
from django.views import View

from django_redis_coord import rate_limited
from django_redis_coord.ratelimited import current_reply


@rate_limited("rl:{name}", rate="3/m", burst=2)
def gcra(request, name):
    reply = current_reply(request)  # None when nothing decided (the kill switch)
    return HttpResponse(f"ran remaining={reply.remaining} reset_after={reply.reset_after!r}" if reply else "ran")


@rate_limited("arl:{name}", rate="3/m", burst=2)
async def agcra(request, name):
    return HttpResponse("ran")


@rate_limited("rl-cbv:{name}", rate="2/m")
class LimitedView(View):
    def get(self, request, name):
        return HttpResponse("ran")


@rate_limited("arl-cbv:{name}", rate="2/m")
class AsyncLimitedView(View):
    async def get(self, request, name):
        return HttpResponse("ran")


@rate_limited("rl-window:{name}", rate="2/m", algorithm="window")
def window(request, name):
    return HttpResponse("ran")


# Limits whose state lives for an hour: a page that lists them (the admin's rate-limits page in a
# browser) finds them however slow the machine is between the calls and the listing.
@rate_limited("rl-hourly:{name}", rate="3/h", burst=2)
def hourly(request, name):
    return HttpResponse("ran")


@rate_limited("rl-window-hourly:{name}", rate="2/h", algorithm="window")
def hourly_window(request, name):
    return HttpResponse("ran")


@rate_limited("rl-user:{user.pk}", rate="2/m")
def per_user(request):
    return HttpResponse("ran")


@rate_limited("rl-header:{headers[X-Client]}", rate="2/m")
def by_header(request):
    return HttpResponse("ran")


@rate_limited("rl-query:{query[q]}", rate="1/s")
async def aby_query(request):
    return HttpResponse("ran")


@rate_limited("rl-fast:{name}", rate="5/s", burst=1)
def fast(request, name):
    return HttpResponse("ran")


@rate_limited("rl-deny:{name}", rate="5/m", on_unavailable="deny")
def deny(request, name):
    return HttpResponse("ran")


@rate_limited("rl-allow:{name}", rate="5/m", on_unavailable="allow")
async def aallow(request, name):
    return HttpResponse("ran")


@rate_limited("rl-outer:{name}", rate="10/m", policy="outer")
@rate_limited("rl-inner:{name}", rate="1/m", policy="inner")
def stacked(request, name):
    return HttpResponse("ran")
