"""One partition's input rate: how fast its source log grows, in records per second, smoothed.

Owns the estimate a worker reports in its heartbeats for each partition it holds (the
leader's load-aware placement weighs partitions by it: docs/design.md §4). Each listing of
the source log's end is a sample; the estimate is an exponentially weighted average with a
half-life of RATE_HALF_LIFE_S, so one burst does not move partitions and a lasting change
does within a minute or two.

Invariant: the estimate is None until two listings at least RATE_SAMPLE_S_MIN apart have
been seen, and never negative (a source end that goes backwards restarts the estimate's
baseline rather than counting a negative rate).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RATE_HALF_LIFE_S", "RATE_SAMPLE_S_MIN", "InputRate"]

RATE_HALF_LIFE_S = 30.0
# Listings closer together than this are folded into the next sample: a rate over a few
# milliseconds says more about the listing's timing than about the source.
RATE_SAMPLE_S_MIN = 1.0


@dataclass(slots=True)
class InputRate:
    rate_per_s: float | None = None
    # The baseline of the next sample: a source end and when it was listed (monotonic s).
    end: int | None = None
    at_s: float = 0.0

    def observe(self, end: int, at_s: float) -> None:
        """The source log's end as listed at `at_s` (monotonic seconds)."""
        if self.end is None or end < self.end or at_s < self.at_s:
            self.end, self.at_s = end, at_s
            return
        elapsed_s = at_s - self.at_s
        if elapsed_s < RATE_SAMPLE_S_MIN:
            return
        sample = (end - self.end) / elapsed_s
        if self.rate_per_s is None:
            self.rate_per_s = sample
        else:
            weight = 1.0 - 0.5 ** (elapsed_s / RATE_HALF_LIFE_S)
            self.rate_per_s += weight * (sample - self.rate_per_s)
        self.end, self.at_s = end, at_s
