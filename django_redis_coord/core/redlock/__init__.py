"""Redlock over several independent masters, and its asyncio twin (rules, commands, sync, aio)."""
