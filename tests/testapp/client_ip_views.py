"""Views keyed by the client's address, for tests/django/test_client_ip.py."""

from django.http import HttpResponse

from django_redis_coord import client_ip, locked, rate_limited
from django_redis_coord.decorators import current_lock


@rate_limited("ip", rate="2/m")
def per_ip(request):
    return HttpResponse(client_ip(request))


@rate_limited(key="ip", rate="2/m")
async def aper_ip(request):
    return HttpResponse(client_ip(request))


@rate_limited("login:{client_ip}", rate="2/m")
def login(request):
    return HttpResponse("ran")


@rate_limited(key=lambda request: f"callable:{client_ip(request)}", rate="2/m")
def by_callable(request):
    return HttpResponse("ran")


@locked("ip-lock:{client_ip}", timeout=10)
def locked_per_ip(request):
    return HttpResponse(current_lock().name)
