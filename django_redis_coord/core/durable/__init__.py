"""The lock whose grant is acknowledged by replicas (WAIT), and its asyncio twin (rules, sync, aio)."""
