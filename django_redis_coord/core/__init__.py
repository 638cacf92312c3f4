"""The Django-free core: the primitives, their asyncio twins, the Lua scripts and Redis key layout,
the watchdog, waiting, events and listing reads.  Nothing here imports Django, nor any module of
the package outside this folder."""
