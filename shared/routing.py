"""Key routing: the one function that maps a record key to its partition, per generation.

Producers, workers and the client SDK all route with exactly these functions (the pipeline
imports them from here; there is no second copy), so a key's records and its lookups always
land on the same partition for a given routing generation.

A routing generation is a partition count plus a rule. Generation 0 is the layout a cluster
starts with: ``mmh3(key) mod total_partitions``. Every later generation (made by a rescale,
docs/pipeline.md "Rescaling") routes through ``KEY_GROUPS`` fixed key groups: key -> group
by ``mmh3(key) mod KEY_GROUPS``, and groups -> partitions in contiguous ranges, so any count
up to ``KEY_GROUPS`` works and a key-group generation's partition owns one range of groups.
Invariant: for a given generation and key, every caller computes the same partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import mmh3

__all__ = [
    "KEY_GROUPS",
    "SLOT_BASE",
    "Routing",
    "first_group",
    "key_group",
    "key_hash",
    "partition_for_key",
    "partition_of_group",
]

# Fixed for every cluster and generation: changing it would re-route every key of every
# key-group generation. A power of two, so the 2**32 hashes fall evenly on the groups; the
# largest partition count a rescale can reach.
KEY_GROUPS = 65_536
# The first number a recorded pipeline's partitions are carried under (the coordinator's
# partition table, the workers' gates, the store's keys): above every number `default` uses.
SLOT_BASE = 1 << 20


def key_hash(key: str) -> int:
    """The unsigned 32-bit mmh3 hash of the UTF-8 bytes of ``key`` (what every rule starts from)."""
    return int(mmh3.hash(key, signed=False))


def partition_for_key(key: str, total_partitions: int) -> int:
    """Return the partition (0 <= p < total_partitions) that owns ``key`` in generation 0."""
    if total_partitions <= 0:
        raise ValueError(f"total_partitions must be positive, got {total_partitions}")
    # Unsigned so the modulo is never negative; mmh3 hashes the UTF-8 bytes of the string.
    return key_hash(key) % total_partitions


def key_group(key: str) -> int:
    """The key group (0 <= g < KEY_GROUPS) of ``key``."""
    return key_hash(key) % KEY_GROUPS


def partition_of_group(group: int, partitions: int) -> int:
    """The partition owning key group ``group`` when ``partitions`` share the groups: the
    groups are cut into ``partitions`` contiguous ranges whose sizes differ by at most one."""
    return group * partitions // KEY_GROUPS


def first_group(partition: int, partitions: int) -> int:
    """The first key group of ``partition`` (its range is [first_group(p), first_group(p + 1)))."""
    # The smallest g with g * partitions // KEY_GROUPS >= partition.
    return -(-partition * KEY_GROUPS // partitions)


@dataclass(frozen=True, slots=True, kw_only=True)
class Routing:
    """One routing generation: its number and its partition count."""

    generation: int
    partitions: int

    def __post_init__(self) -> None:
        if self.generation < 0:
            raise ValueError(f"generation must be >= 0, got {self.generation}")
        if self.partitions <= 0:
            raise ValueError(f"partitions must be positive, got {self.partitions}")
        if self.generation > 0 and self.partitions > KEY_GROUPS:
            raise ValueError(
                f"a key-group generation has at most KEY_GROUPS={KEY_GROUPS} partitions, "
                f"got {self.partitions}"
            )

    @property
    def by_key_groups(self) -> bool:
        return self.generation > 0

    def partition_for(self, key: str) -> int:
        """The partition (0 <= p < partitions) that owns ``key`` in this generation."""
        if not self.by_key_groups:
            return partition_for_key(key, self.partitions)
        return partition_of_group(key_group(key), self.partitions)

    def groups(self, partition: int) -> range:
        """The key groups ``partition`` owns (a key-group generation only)."""
        if not self.by_key_groups:
            raise ValueError("generation 0 routes by modulo, not by key-group ranges")
        if not 0 <= partition < self.partitions:
            raise ValueError(f"partition {partition} not in [0, {self.partitions})")
        return range(
            first_group(partition, self.partitions), first_group(partition + 1, self.partitions)
        )
