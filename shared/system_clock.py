"""The process's real clock (the `shared.clock.Clock` protocol).

Owns the two time readings of a running process: `monotonic_ms` for every safety decision
(leases, liveness, retries, timeouts) and `wall_ms` for timestamps only. The coordinator
and the worker read this one clock.
"""

from __future__ import annotations

import time

__all__ = ["SYSTEM_CLOCK", "SystemClock"]


class SystemClock:
    """Monotonic for decisions, wall time for stamps."""

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


SYSTEM_CLOCK = SystemClock()
