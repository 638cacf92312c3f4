"""Waking waiters: one pub/sub connection per client shared by every waiter (rules, sync, aio)."""
