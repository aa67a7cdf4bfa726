"""The leader's event-loop stall, as a running total the failure detector discounts.

Owns the measure `coordinator/core/liveness.py` credits to every worker's silence: how long,
in all, this process's event loop was late to wake a sleeper by more than `STALL_FLOOR_MS`
(the loop busy with a flood of requests, the process descheduled or collecting). A
heartbeat that arrives while the loop is stalled is read only when it is free again, so
that time is the leader's, not the worker's.

`LoopStall` is pure (times come in); its sampler, a task of the leader duties
(`coordinator/service/duties.py`), sleeps `STALL_SAMPLE_PERIOD_MS` at a time and reports
each sleep and wake. The total also counts the stall in progress: read while the sampler's
wake is overdue, it includes the lateness so far, so a death check that runs right after a
stall, before the sampler's wake, still sees it.

Invariant: `total_ms(now)` never decreases as `now` grows, and grows no faster than `now`
(the stall over any span is at most the span), so it never credits more than the time
that passed.
"""

from __future__ import annotations

__all__ = ["STALL_FLOOR_MS", "STALL_SAMPLE_PERIOD_MS", "LoopStall"]

# Lateness up to this is the loop's ordinary jitter (a timer's granularity, a short
# collection): not counted, so a healthy leader judges silence exactly as without the credit.
STALL_FLOOR_MS = 100
# How often the sampler sleeps and wakes; a stall shows in the total within one period.
STALL_SAMPLE_PERIOD_MS = 50


class LoopStall:
    """The total stall: what past wakes were late beyond the floor, plus the lateness of the
    wake now due, if any."""

    __slots__ = ("_due_ms", "_total_ms", "floor_ms")

    def __init__(self, floor_ms: int = STALL_FLOOR_MS) -> None:
        self.floor_ms = floor_ms
        self._total_ms = 0  # the late wakes' stall, counted when each came
        self._due_ms: int | None = None  # when the sampler's wake is due, while it sleeps

    def _late_ms(self, now_ms: int) -> int:
        if self._due_ms is None:
            return 0
        return max(0, now_ms - self._due_ms - self.floor_ms)

    def sleeping(self, due_ms: int) -> None:
        """The sampler went to sleep, to wake at `due_ms`."""
        self._due_ms = due_ms

    def woke(self, now_ms: int) -> None:
        """The sampler woke at `now_ms`; its lateness past the floor joins the total."""
        self._total_ms += self._late_ms(now_ms)
        self._due_ms = None

    def total_ms(self, now_ms: int) -> int:
        """The stall in all up to `now_ms`, the one in progress included."""
        return self._total_ms + self._late_ms(now_ms)
