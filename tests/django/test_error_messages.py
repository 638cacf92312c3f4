"""Errors a newcomer meets say what is wrong and with which lock or arguments."""

from __future__ import annotations

import asyncio

import pytest

from django_redis_coord import KeyTemplateError, Lock, locked
from django_redis_coord.asyncio import Lock as AsyncLock
from django_redis_coord.core.exceptions import LockError


def test_releasing_twice_names_the_lock(redis_client):
    lock = Lock(redis_client, "twice:sync", timeout=5)
    lock.acquire()
    lock.release()
    with pytest.raises(LockError, match="'twice:sync'"):
        lock.release()


def test_releasing_twice_names_the_lock_asyncio(async_redis):
    async def main() -> None:
        lock = AsyncLock(async_redis(), "twice:async", timeout=5)
        await lock.acquire()
        await lock.release()
        with pytest.raises(LockError, match="'twice:async'"):
            await lock.release()

    asyncio.run(main())


def test_a_kwargs_view_missing_a_key_field_lists_the_arguments_it_got(rf, redis_client):
    @locked("order:{pk}")
    def view(request, **kwargs):
        return kwargs

    with pytest.raises(KeyTemplateError) as caught:
        view(rf.get("/"), slug="spring-sale", page=2)
    message = str(caught.value)
    assert "{pk}" in message and "'order:{pk}'" in message
    assert "slug" in message and "page" in message  # the arguments the URL gave
