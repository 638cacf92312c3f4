"""The asyncio side of the tests written once (their sync twins use :mod:`tests.support.side.sync`)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(scenario: Coroutine[Any, Any, T]) -> T:
    """Run a test's scenario in an event loop of its own; its result."""
    return asyncio.run(scenario)
