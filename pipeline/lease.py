"""The worker's lease: permission to process that expires without coordinator contact.

Invariant: ``valid(now_ms)`` is true only within ``lease_ms`` of the SEND time of the last
heartbeat the leader acknowledged. The coordinator's heartbeat timeout runs from the moment
it received that heartbeat (later than the send), and is longer than the lease, so a worker
always stops processing and checkpointing before the coordinator can hand its partitions to
someone else. Pure: callers pass a monotonic ``now_ms``; tests use a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["Lease"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    lease_ms: int
    # None until the first acknowledged heartbeat: a fresh worker holds no lease.
    renewed_at_ms: int | None = None

    def __post_init__(self) -> None:
        if self.lease_ms <= 0:
            raise ValueError(f"lease_ms must be positive, got {self.lease_ms}")

    def renewed(self, sent_at_ms: int) -> Lease:
        """The lease after a heartbeat sent at ``sent_at_ms`` was acknowledged."""
        # Acknowledgements can arrive out of order; an older one must not shorten the lease.
        if self.renewed_at_ms is not None and sent_at_ms <= self.renewed_at_ms:
            return self
        return replace(self, renewed_at_ms=sent_at_ms)

    def valid(self, now_ms: int) -> bool:
        return self.remaining_ms(now_ms) > 0

    def remaining_ms(self, now_ms: int) -> int:
        if self.renewed_at_ms is None:
            return 0
        return max(0, self.renewed_at_ms + self.lease_ms - now_ms)
