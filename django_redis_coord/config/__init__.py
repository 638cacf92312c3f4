"""Settings and clients: ``DJANGO_REDIS_COORD`` read and checked, the Redis clients made from it, and
the primitives built from both (the ``lock()`` shortcuts, the Django signals hook)."""
