"""The fallback decision for a partition whose recorded checkpoint cannot be loaded.

Owns the chain a partition walks down when its owner keeps answering the host call with
``checkpoint_unavailable`` (the store lost the object, a bad reference, an emptied store
after a restart): its earlier accepted checkpoints, newest first, then a full replay from
offset 0 while the source log still starts there, and only then ``stuck`` (an operator
resets it). Every step is lossless: replay is deterministic, so an older starting point
only costs replay time. Pure: the leader's executor (or planner) counts the failures of one
(partition, epoch) and asks ``decide``; whatever it returns is committed as one command,
which ``apply`` validates again against the state it lands on.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.core.commands import FallBack, FinalCheckpoint, MarkStuck
from coordinator.core.model import NOTE_LEN_MAX, Partition, PartitionStatus

__all__ = ["CHECKPOINT_UNAVAILABLE", "FallbackPolicy", "decide"]

# The error code a worker answers the host call with when it cannot load the checkpoint.
CHECKPOINT_UNAVAILABLE = "checkpoint_unavailable"


@dataclass(frozen=True, slots=True, kw_only=True)
class FallbackPolicy:
    # Host failures in a row with CHECKPOINT_UNAVAILABLE, at one epoch, before falling back:
    # a store that is briefly unreachable should not cost a replay.
    after_failures: int
    # Whether the source log still starts at offset 0, so that hosting with no checkpoint
    # replays everything. True for this product's source log, which never truncates; a
    # source with retention must set it False (then the chain ends in ``stuck``).
    full_replay: bool

    def __post_init__(self) -> None:
        if self.after_failures < 1:
            raise ValueError(f"after_failures must be at least 1, got {self.after_failures}")


def decide(
    part: Partition, failures: int, error: str, policy: FallbackPolicy, now_ms: int
) -> FallBack | MarkStuck | None:
    """The command to commit after ``failures`` CHECKPOINT_UNAVAILABLE answers in a row for
    ``part`` at its current epoch (``error`` is the last one's message), or None (not yet,
    or nothing to fall back from, or already stuck)."""
    if part.status is not PartitionStatus.ASSIGNING or part.owner is None:
        return None
    if part.checkpoint is None or part.stuck or failures < policy.after_failures:
        return None
    failed = f"checkpoint at offset {part.checkpoint.offset} unavailable ({error})"
    if part.earlier:
        older = part.earlier[0]
        return FallBack(
            partition=part.partition,
            epoch=part.epoch,
            checkpoint=FinalCheckpoint(offset=older.offset, uri=older.uri, epoch=older.epoch),
            note=_clip(f"{failed}; falling back to offset {older.offset}"),
            now_ms=now_ms,
        )
    if policy.full_replay:
        return FallBack(
            partition=part.partition,
            epoch=part.epoch,
            checkpoint=None,
            note=_clip(f"{failed}; full replay from offset 0"),
            now_ms=now_ms,
        )
    return MarkStuck(
        partition=part.partition,
        epoch=part.epoch,
        note=_clip(f"{failed}; no earlier checkpoint and the source log is truncated"),
        now_ms=now_ms,
    )


def _clip(note: str) -> str:
    return note if len(note) <= NOTE_LEN_MAX else note[: NOTE_LEN_MAX - 3] + "..."
