"""The gate a test opens to let a run of the test app end: ``gate:<name>``, a list the test pushes to."""

import time

#: One BLPOP waits at most this long: below the client's socket timeout (5 s by default), which
#: would otherwise end a longer blocking call with a TimeoutError before the gate opens.
STEP = 1


def wait_for_gate(client, name: str, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``gate:<name>``; whether it opened."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if client.blpop([f"gate:{name}"], timeout=max(0.01, min(STEP, deadline - time.monotonic()))):
            return True
    return False
