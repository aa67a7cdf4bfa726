"""Partitions whose micro-batches keep failing, as their workers report them in heartbeats.

Leader-only and in memory, like liveness and load (nothing here is replicated): a new leader
learns it again from the next heartbeats. A report counts only while it is about the
partition's current owner at the current epoch, so a report from a worker that has since
lost the partition (or died) never shows.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FailingPartition", "FailingReports"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FailingPartition:
    epoch: int
    failures: int  # micro-batches in a row that failed
    error: str  # the last failure's first line


class FailingReports:
    def __init__(self) -> None:
        # worker id -> partition -> its latest report; replaced whole by each heartbeat, so
        # its size is bounded by the workers and the partitions they may report.
        self._by_worker: dict[str, dict[int, FailingPartition]] = {}

    def record(self, worker_id: str, reports: dict[int, FailingPartition]) -> None:
        if reports:
            self._by_worker[worker_id] = reports
        else:
            self._by_worker.pop(worker_id, None)

    def of(self, partition: int, owner: str | None, epoch: int) -> FailingPartition | None:
        if owner is None:
            return None
        report = self._by_worker.get(owner, {}).get(partition)
        return report if report is not None and report.epoch == epoch else None

    def count(self, worker_id: str, owned: dict[int, int]) -> int:
        """How many of ``owned`` (partition -> current epoch) the worker reports failing."""
        reports = self._by_worker.get(worker_id, {})
        return sum(1 for p, r in reports.items() if owned.get(p) == r.epoch)

    def clear(self) -> None:
        self._by_worker.clear()
