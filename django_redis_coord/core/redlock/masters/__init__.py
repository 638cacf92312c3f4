"""What a Redlock's two halves do differently: asking every master at once (a thread pool, or
``asyncio.gather``) and keeping a hold per thread or per task (docs/twins.md)."""
