"""A dropped pipeline's objects deleted from the store: `ripple pipelines drop --purge`.

Owns which objects are a recorded pipeline's: everything under the numbers of every
generation it ever had (`source/p{n}/`, `checkpoints/p{n}/`, `deadletter/p{n}/`): its
current numbers, each earlier generation's (`past`) and those a rescale reserved (its build
may have written under them before the drop), all read from its describe view before the
drop. Invariant: only those prefixes are touched, for numbers the coordinator gave that
pipeline (never reused, so no other pipeline's object, nor `default`'s, is ever under them),
and only once the pipeline is gone from the cluster, so no owner is processing it any more.
Deleting is idempotent: a purge run again finds less or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pipeline.source import partition_prefix
from shared.checkpoint_ref import checkpoints_prefix
from shared.routing import SLOT_BASE

__all__ = ["Purgeable", "numbers_ever", "pipeline_prefixes", "purge", "purge_all"]


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


def _numbers(first: Any, count: Any) -> range:
    return range(int(first), int(first) + int(count))


def numbers_ever(described: Mapping[str, Any]) -> tuple[range, ...]:
    """Every number range a pipeline's describe view (`GET /v1/pipelines/{name}`) names, oldest
    first and each once: its past generations', its current one's once set up (first_slot
    0: never set up) and a rescale's reserved numbers."""
    ranges = [_numbers(g["first_slot"], g["partitions"]) for g in described.get("past") or ()]
    if int(described["first_slot"]):
        ranges.append(_numbers(described["first_slot"], described["partitions"]))
    r = described.get("rescale")
    if r is not None:
        ranges.append(_numbers(r["first_slot"], r["partitions"]))
    return tuple(dict.fromkeys(n for n in ranges if len(n)))


def purge_all(store: Purgeable, ranges: tuple[range, ...]) -> int:
    """Delete every object of every range in `ranges`; returns how many there were."""
    return sum(purge(store, numbers) for numbers in ranges)
