"""Bounded waits: poll a condition until it holds, or fail saying what was awaited.

Tests and benchmarks wait on conditions, never on time passing; every wait has a bound, and
the last error the condition raised is in the failure so a timeout says why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["GiveUp", "wait_until", "wait_until_async"]

T = TypeVar("T")


class GiveUp(AssertionError):
    """Raised by a condition that can no longer come true (the process it waits on exited):
    ends the wait at once with its message instead of at the timeout."""


def wait_until(
    pred: Callable[[], T | None], what: str, timeout_s: float = 20.0, every_s: float = 0.05
) -> T:
    """Poll `pred` until it returns a truthy value, at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
        except GiveUp:
            raise
        except Exception as exc:
            last_exc = exc
        time.sleep(every_s)
    raise AssertionError(
        f"timed out after {timeout_s} s waiting for {what} (last error: {last_exc})"
    )


async def wait_until_async(
    pred: Callable[[], T | None], what: str, timeout_s: float = 20.0, every_s: float = 0.005
) -> T:
    """`wait_until` for a test on the event loop: the loop runs between polls, so what it
    drives (timers, tasks) can make `pred` true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        await asyncio.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
