"""The lock: :class:`~django_redis_coord.core.lock.sync.Lock` and its asyncio twin (rules, sync, aio)."""
