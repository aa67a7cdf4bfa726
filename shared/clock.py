"""Clocks: the one protocol every time reading goes through, and a fake for tests.

Owns the rule "safety decisions use a monotonic clock": liveness, leases, retries and
timeouts read `monotonic_ms`; `wall_ms` is only stamped into commands and shown to people,
never compared with another reading to decide anything. A wall-clock step (NTP, an operator)
therefore moves no lease and no liveness verdict. The real clock is `shared.system_clock`;
this module reads none, so the pure core may import it. Code that counts in seconds reads
`monotonic_s(clock)`, the same reading as a float. Product code reads the time through a
`Clock` only, but for the few exceptions `tests/unit/test_clock_reads.py` names.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Clock", "FakeClock", "monotonic_s"]


class Clock(Protocol):
    def monotonic_ms(self) -> int:
        """Milliseconds from an arbitrary origin; never goes backwards."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch; may jump either way. Timestamps only."""
        ...


def monotonic_s(clock: Clock) -> float:
    """`clock.monotonic_ms()` in seconds, for the code whose bounds are seconds."""
    return clock.monotonic_ms() / 1000


class FakeClock:
    """A clock tests move by hand: `advance` moves both readings, `step_wall` only the wall."""

    __slots__ = ("_mono", "_wall")

    def __init__(self, *, monotonic_ms: int = 0, wall_ms: int = 1_700_000_000_000) -> None:
        self._mono = monotonic_ms
        self._wall = wall_ms

    def monotonic_ms(self) -> int:
        return self._mono

    def wall_ms(self) -> int:
        return self._wall

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"monotonic time cannot go back ({ms} ms)")
        self._mono += ms
        self._wall += ms

    def step_wall(self, ms: int) -> None:
        """An NTP or operator step: the wall clock jumps (either way), monotonic does not."""
        self._wall += ms
