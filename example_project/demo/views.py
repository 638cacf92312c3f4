from django.http import HttpResponse

from django_redis_coord import Lock


def index(request):
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    with Lock(client, "demo:index", timeout=5) as lock:
        return HttpResponse(f"django_redis_coord demo: you held demo:index with fence {lock.fence}\n")
