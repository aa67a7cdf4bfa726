"""The fallback decision for a partition whose recorded checkpoint cannot be loaded.

Owns the chain a partition walks down when its owner keeps answering the host call with
``checkpoint_unavailable`` (the store lost the object, a bad reference, an emptied store
after a restart): its earlier accepted checkpoints, newest first, then a full replay from
offset 0 while the source log still starts there and the partition table is generation 0's,
and only then ``stuck`` (an operator resets it). A partition a rescale made starts from the
state its build moved there, which no replay of its own log rebuilds, so its chain ends in
``stuck``. Every step is lossless: replay is deterministic, so an older starting point
only costs replay time. Pure: the planner (coordinator/core/planner.py) counts the failures
of one (partition, epoch) in an ``UnavailableCounts`` and asks ``fallbacks_due`` at each
plan; whatever it returns is committed as one command, which ``apply`` validates again
against the state it lands on.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.core.commands import FallBack, FinalCheckpoint, MarkStuck
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    NOTE_LEN_MAX,
    Partition,
    PartitionEpoch,
    PartitionStatus,
)
from coordinator.core.partition_table import PartitionTable

__all__ = [
    "CHECKPOINT_UNAVAILABLE",
    "FallbackPolicy",
    "UnavailableCounts",
    "decide",
    "fallbacks_due",
    "target_of",
]

# The error code a worker answers the host call with when it cannot load the checkpoint.
CHECKPOINT_UNAVAILABLE = "checkpoint_unavailable"
# Why a chain ends without a full replay, by whether the table is a rescale's.
_WHY = {False: "source log truncated", True: "a rescale's partition replays only from its build"}
# (partition, epoch) pairs whose failures are counted at once; the oldest is dropped beyond.
COUNTED_KEYS_MAX = 100_000


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
    part: Partition,
    failures: int,
    error: str,
    policy: FallbackPolicy,
    now_ms: int,
    rescaled: bool = False,
) -> FallBack | MarkStuck | None:
    """The command to commit after ``failures`` CHECKPOINT_UNAVAILABLE answers in a row for
    ``part`` at its current epoch (``error`` is the last one's message), or None (not yet,
    or nothing to fall back from, or already stuck). `rescaled`: the table is a rescale's,
    so there is no full replay."""
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
    if policy.full_replay and not rescaled:
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
        # The conclusion first: tables cut this note to fit a row.
        note=_clip(f"no lossless fallback ({_WHY[rescaled]}, no earlier checkpoint): {failed}"),
        now_ms=now_ms,
    )


class UnavailableCounts:
    """Host failures in a row that were CHECKPOINT_UNAVAILABLE, per (partition, epoch), with
    the last one's message.

    The leader's own in-memory state (not replicated, lost with leadership: a new leader
    counts afresh, which only delays a fallback). Any other failure breaks the row.
    """

    def __init__(self, keys_max: int = COUNTED_KEYS_MAX) -> None:
        self._counts: dict[PartitionEpoch, tuple[int, str]] = {}
        self._keys_max = keys_max

    def observe(self, key: PartitionEpoch, error: str, message: str = "") -> int:
        """Count one failed host call of ``key`` with error code ``error``; the row so far."""
        before, _ = self._counts.pop(key, (0, ""))
        count = before + 1 if error == CHECKPOINT_UNAVAILABLE else 0
        if count:
            # Re-inserted last: eviction drops the longest-idle key.
            self._counts[key] = (count, message)
            while len(self._counts) > self._keys_max:
                del self._counts[next(iter(self._counts))]
        return count

    def due(self, after_failures: int) -> list[tuple[PartitionEpoch, int, str]]:
        """(key, failures, last message) of the rows that reached ``after_failures``."""
        return [(k, n, msg) for k, (n, msg) in self._counts.items() if n >= after_failures]

    def forget(self, key: PartitionEpoch) -> None:
        self._counts.pop(key, None)

    def clear(self) -> None:
        self._counts.clear()


def fallbacks_due(
    partitions: PartitionTable,
    counts: UnavailableCounts,
    policy: FallbackPolicy,
    now_ms: int,
    rescaled: bool = False,
) -> list[FallBack | MarkStuck]:
    """The fallback commands due now, one per partition whose row of failures at its
    current epoch reached the policy's threshold. Every row that was due is forgotten, so a
    command that does not commit is planned again only after as many new failures."""
    out: list[FallBack | MarkStuck] = []
    for key, failures, message in counts.due(policy.after_failures):
        counts.forget(key)
        p, epoch = key
        part = partitions.get(p)
        if part is not None and part.epoch == epoch:
            # Only `default`'s table is ever a rescale's.
            mine = rescaled and part.pipeline == DEFAULT_PIPELINE
            cmd = decide(part, failures, message, policy, now_ms, mine)
            if cmd is not None:
                out.append(cmd)
    return out


def target_of(cmd: FallBack | MarkStuck) -> str:
    """What the command falls back to, as the metric label says it."""
    if isinstance(cmd, MarkStuck):
        return "stuck"
    return "replay" if cmd.checkpoint is None else "checkpoint"


def _clip(note: str) -> str:
    return note if len(note) <= NOTE_LEN_MAX else note[: NOTE_LEN_MAX - 3] + "..."
