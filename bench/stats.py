"""The one percentile every benchmark reports, in a module light enough for the child
processes that measure (`bench.load`, `bench.disk_floor`) to import without the harness."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["percentile"]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    # The smallest value with at least q% of the sample at or below it (rank 1-based).
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered) / 100)))
    return ordered[rank - 1]
