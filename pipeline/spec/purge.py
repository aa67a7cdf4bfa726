"""A dropped pipeline's objects deleted from the store: `ripple pipelines drop --purge`.

Owns which objects are a recorded pipeline's: everything under its partitions' numbers
(`source/p{n}/`, `checkpoints/p{n}/`, `deadletter/p{n}/`). Invariant: only those prefixes are
touched, for numbers the coordinator gave that pipeline (never reused, so no other pipeline's
object, nor `default`'s, is ever under them), and only once the pipeline is gone from the
cluster, so no owner is processing it any more. Deleting is idempotent: a purge run again
finds less or nothing.
"""

from __future__ import annotations

from typing import Protocol

from pipeline.source import partition_prefix
from shared.checkpoint_ref import checkpoints_prefix
from shared.routing import SLOT_BASE

__all__ = ["Purgeable", "pipeline_prefixes", "purge"]


class Purgeable(Protocol):
    def list_keys(self, prefix: str) -> list[str]: ...

    def delete(self, key: str) -> None: ...


def pipeline_prefixes(numbers: range) -> list[str]:
    """Every key prefix a recorded pipeline's partitions `numbers` keep objects under."""
    if numbers.start < SLOT_BASE:
        raise ValueError(f"partition numbers below {SLOT_BASE} are `default`'s, never purged")
    return [
        prefix
        for n in numbers
        for prefix in (partition_prefix(n), checkpoints_prefix(n), f"deadletter/p{n:05d}/")
    ]


def purge(store: Purgeable, numbers: range) -> int:
    """Delete every object of the partitions `numbers`; returns how many there were."""
    deleted = 0
    for prefix in pipeline_prefixes(numbers):
        for key in store.list_keys(prefix):
            store.delete(key)
            deleted += 1
    return deleted
