"""One fill per cache key on a miss, the others wait for it (rules, sync, aio)."""
