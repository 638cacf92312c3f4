"""The counting semaphore and its asyncio twin (rules, sync, aio)."""
