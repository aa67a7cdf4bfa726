"""A dropped pipeline's objects deleted from the store: `ripple pipelines drop --purge`.

Owns which objects are a recorded pipeline's: everything under the numbers of every
generation it ever had (`source/p{n}/`, `checkpoints/p{n}/`, `deadletter/p{n}/`): its
current numbers, each earlier generation's (`past`) and those a rescale reserved (its build
may have written under them before the drop), all read from its describe view before the
drop; and its results tables (`results/{name}/i{incarnation}/`, pipeline.spec.results).
Invariant: only those prefixes are touched, for numbers the coordinator gave that pipeline
(never reused, so no other pipeline's object, nor `default`'s, is ever under them) and for
its own incarnation's results (a later pipeline of the same name has another), and only once
the pipeline is gone from the cluster, so no owner is processing or publishing it any more.
Deleting is idempotent: a purge run again finds less or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pipeline.source import partition_prefix
from pipeline.spec.results import results_prefix
from shared.checkpoint_ref import checkpoints_prefix
from shared.routing import SLOT_BASE

__all__ = [
    "Purgeable",
    "numbers_ever",
    "pipeline_prefixes",
    "purge",
    "purge_all",
    "purge_results",
]


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


def purge_results(store: Purgeable, described: Mapping[str, Any]) -> int:
    """Delete the results tables of the pipeline `described` (its describe view, read before
    the drop), hidden version files included; returns how many objects there were."""
    keys = store.list_keys(results_prefix(str(described["name"]), int(described["incarnation"])))
    for key in keys:
        store.delete(key)
    return len(keys)
