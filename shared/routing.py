"""Key routing: the one function that maps a record key to its partition.

Producers, workers and the client SDK all route with exactly this function (the pipeline
imports it from here; there is no second copy), so a key's records and its lookups always
land on the same partition for a given partition count.
"""

from __future__ import annotations

import mmh3

__all__ = ["partition_for_key"]


def partition_for_key(key: str, total_partitions: int) -> int:
    """Return the partition (0 <= p < total_partitions) that owns ``key``."""
    if total_partitions <= 0:
        raise ValueError(f"total_partitions must be positive, got {total_partitions}")
    # Unsigned so the modulo is never negative; mmh3 hashes the UTF-8 bytes of the string.
    return int(mmh3.hash(key, signed=False)) % total_partitions
