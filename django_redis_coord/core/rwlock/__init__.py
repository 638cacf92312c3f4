"""The read-write lock and its asyncio twin (rules, sync, aio)."""
