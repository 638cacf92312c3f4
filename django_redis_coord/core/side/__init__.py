"""What differs between a thread and an asyncio task, behind the same names on both sides:
:mod:`.sync` (threads) and :mod:`.aio` (asyncio tasks).  The generated twins import the asyncio
side (``from ..side.aio import X``), which the generator turns into the sync one (docs/twins.md)."""
