"""wait_until: poll a condition with a deadline, for tests that watch other processes and threads."""

from __future__ import annotations

import time


def wait_until(condition, timeout: float, what: str, interval: float = 0.01):
    """Return the condition's first truthy value; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
