"""The fair waiting queue shared by locks, semaphores, read-write locks and leaders (rules, sync, aio)."""
