"""The routing generations this worker knows: the partition count of each, index = generation.

Learned from the coordinator's health when the worker starts, and from every host, warm and
cut call that carries a `routing` (docs/pipeline.md "Rescaling"), so a worker started before
a rescale learns the new generation from the host call of one of its partitions. The
processor reads the source log of every generation it knows (`pipeline/processing.py`).
Invariant: the counts only grow by new generations; a known generation's count never
changes (a call that says otherwise is refused, and nothing is learned from it).
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.errors import RequestError

__all__ = ["Generations"]


class Generations:
    def __init__(self, counts: Sequence[int] = ()) -> None:
        self.counts: tuple[int, ...] = tuple(counts)

    @property
    def current(self) -> int:
        """The newest generation known (-1 before the worker knows any)."""
        return len(self.counts) - 1

    @property
    def partitions_max(self) -> int:
        """The largest partition number + 1 of any known generation (a path's bound)."""
        return max(self.counts, default=0)

    def learn(self, counts: Sequence[int]) -> bool:
        """Know `counts` (every generation's count from 0); whether it added a generation.
        Raises a 409 `routing_conflict` when a generation's count differs from the known."""
        counts = tuple(counts)
        shared = min(len(counts), len(self.counts))
        if counts[:shared] != self.counts[:shared]:
            raise RequestError(
                f"routing {list(counts)} disagrees with the routing known here {list(self.counts)}",
                field="routing",
                code="routing_conflict",
            )
        if len(counts) <= len(self.counts):
            return False
        self.counts = counts
        return True
