"""Safety suite settings: longer variants are marked ``slow`` and left out unless asked for.

``pytest tests/safety`` runs the bounded version (what CI runs).  Select the slow variants with
``-m slow`` (or any ``-m`` expression that names them: ``-m "not serial"``, as dev.py runs, keeps
them out), or set ``DCOORD_SLOW=1`` to run all.
"""

from __future__ import annotations

import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in config.getoption("markexpr") or os.environ.get("DCOORD_SLOW") == "1":
        return
    keep, drop = [], []
    for item in items:
        inside = str(item.path).startswith(HERE + os.sep)
        (drop if inside and item.get_closest_marker("slow") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def lock_server(redis_servers):
    """A private redis-server for one test (the suite may pause, kill and restart it)."""
    (server,) = redis_servers(1)
    return server
