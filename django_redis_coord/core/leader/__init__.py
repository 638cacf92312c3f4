"""Leader election on a lock that its leader keeps extending, and its asyncio twin (rules, sync, aio)."""
