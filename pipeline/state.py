"""Per-key aggregate state of a partition and how batches merge into it.

Invariant: merging is associative and order-insensitive over disjoint offset ranges, so
folding micro-batches in any split equals aggregating everything at once. ``last`` is decided
by the larger offset, never by arrival order. The key limit is enforced deterministically:
new keys are admitted in order of their first offset, so the admitted set does not depend on
how the input was cut into batches (a new owner replaying with different batch boundaries
reaches the same state), and keys beyond the limit come back as dead-letter rows, never
silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "MAX_KEYS_PER_PARTITION_DEFAULT",
    "KeyState",
    "PartitionState",
    "aggregate_records",
    "merge",
    "merge_batch",
    "merge_states",
]

MAX_KEYS_PER_PARTITION_DEFAULT = 2000


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyState:
    count: int
    sum: float
    min: float
    max: float
    last: float
    last_offset: int
    # The key's first offset: what makes key admission under the limit batch-independent.
    first_offset: int

    @staticmethod
    def of(value: float, offset: int) -> KeyState:
        return KeyState(
            count=1,
            sum=value,
            min=value,
            max=value,
            last=value,
            last_offset=offset,
            first_offset=offset,
        )


PartitionState = dict[str, KeyState]


def merge(a: KeyState, b: KeyState) -> KeyState:
    """Combine the aggregates of two disjoint sets of records of one key."""
    later = a if a.last_offset >= b.last_offset else b
    return KeyState(
        count=a.count + b.count,
        sum=a.sum + b.sum,
        min=min(a.min, b.min),
        max=max(a.max, b.max),
        last=later.last,
        last_offset=later.last_offset,
        first_offset=min(a.first_offset, b.first_offset),
    )


def aggregate_records(records: Iterable[tuple[str, float, int]]) -> PartitionState:
    """Pure-Python reference aggregation of ``(key, value, offset)`` rows (the test oracle)."""
    out: PartitionState = {}
    for key, value, offset in records:
        one = KeyState.of(value, offset)
        prev = out.get(key)
        out[key] = one if prev is None else merge(prev, one)
    return out


def merge_states(a: Mapping[str, KeyState], b: Mapping[str, KeyState]) -> PartitionState:
    """Union of two states, merging keys present in both (no key limit)."""
    out = dict(a)
    for key, st in b.items():
        prev = out.get(key)
        out[key] = st if prev is None else merge(prev, st)
    return out


def merge_batch(
    state: Mapping[str, KeyState],
    batch_rows: Mapping[str, KeyState],
    max_keys: int = MAX_KEYS_PER_PARTITION_DEFAULT,
) -> tuple[PartitionState, dict[str, KeyState]]:
    """Merge one batch's per-key aggregates into ``state`` under the key limit.

    The batch must cover offsets after everything in ``state``. Returns the new state (the
    input is not modified) and the dead-letter rows: the aggregates of keys that are new and
    did not fit, for the worker to write to a dead-letter segment and count.
    """
    if max_keys <= 0:
        raise ValueError(f"max_keys must be positive, got {max_keys}")
    out = dict(state)
    dead: dict[str, KeyState] = {}
    new_keys: list[str] = []
    for key, st in batch_rows.items():
        prev = out.get(key)
        if prev is not None:
            out[key] = merge(prev, st)
        else:
            new_keys.append(key)
    new_keys.sort(key=lambda k: (batch_rows[k].first_offset, k))
    room = max(0, max_keys - len(out))
    for key in new_keys[:room]:
        out[key] = batch_rows[key]
    for key in new_keys[room:]:
        dead[key] = batch_rows[key]
    return out, dead
