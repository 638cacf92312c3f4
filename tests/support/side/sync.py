"""The sync side of the tests written once (their asyncio sources use :mod:`tests.support.side.aio`)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def run(scenario: T) -> T:
    """A test's scenario, which already ran (a sync call returns its result)."""
    return scenario
