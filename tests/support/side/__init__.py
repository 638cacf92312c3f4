"""What a test written once for threads and asyncio tasks needs on each side (docs/twins.md)."""
