"""Which old partitions feed each new partition when one routing generation follows another.

A rescale (docs/pipeline.md "Rescaling") builds every partition of the new generation from
the checkpoints of the old partitions that may hold its keys: `feeders` names them, and
`moved_fraction` says what share of the keys changes partition number (what a dry run
shows). Both count over the 2**32 hashes of `shared.routing.key_hash`, each key group
holding exactly 2**32 / KEY_GROUPS of them, so the numbers are exact for uniformly hashed
keys. Invariant: a key's old partition is always among the feeders of its new partition.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import pairwise
from math import gcd

from shared.routing import KEY_GROUPS, Routing, partition_of_group

__all__ = ["HASHES", "feeders", "feeders_max", "moved_fraction"]

HASHES = 2**32
# Hashes per key group: h = group + KEY_GROUPS * t for t in [0, _PER_GROUP).
_PER_GROUP = HASHES // KEY_GROUPS


def _check_pair(old: Routing, new: Routing) -> None:
    if new.generation <= old.generation or not new.by_key_groups:
        raise ValueError(
            f"generation {new.generation} cannot follow generation {old.generation}: a new "
            "generation is a later key-group generation"
        )


def feeders(old: Routing, new: Routing) -> dict[int, tuple[int, ...]]:
    """New partition -> the old partitions (ascending) that may hold any of its keys.

    From a key-group generation: exactly the old partitions whose group range meets the new
    one's (at most ceil(old/new) + 1 of them). From generation 0 (modulo ``P``): a key of
    group ``k`` is in old partition ``(k + KEY_GROUPS * t) mod P`` for some ``t``, which is
    exactly the residues congruent to ``k`` modulo ``gcd(P, KEY_GROUPS)`` when
    ``P / gcd(P, KEY_GROUPS) <= 2**32 / KEY_GROUPS`` (every count up to KEY_GROUPS), and a
    superset of them above that; in practice every old partition unless P divides KEY_GROUPS.
    """
    _check_pair(old, new)
    out: dict[int, tuple[int, ...]] = {}
    for q in range(new.partitions):
        groups = new.groups(q)
        if old.by_key_groups:
            first = partition_of_group(groups.start, old.partitions)
            last = partition_of_group(groups.stop - 1, old.partitions)
            out[q] = tuple(range(first, last + 1))
            continue
        d = gcd(old.partitions, KEY_GROUPS)
        classes = _classes(groups, d)
        out[q] = tuple(r for r in range(old.partitions) if r % d in classes)
    return out


def _classes(groups: range, d: int) -> set[int]:
    """The residues modulo ``d`` of a generation-0 key in ``groups`` (see `feeders`)."""
    return {k % d for k in groups[:d]}  # d consecutive groups cover every class


def feeders_max(old: Routing, new: Routing) -> int:
    """The most feeders any new partition has: ``max(len(f) for f in feeders(old, new)
    .values())`` counted without listing them, so it costs O(KEY_GROUPS + new) however many
    old partitions there are (a dry run of a large generation 0 shows it)."""
    _check_pair(old, new)
    if old.by_key_groups:
        return max(
            partition_of_group(g.stop - 1, old.partitions)
            - partition_of_group(g.start, old.partitions)
            + 1
            for g in map(new.groups, range(new.partitions))
        )
    d = gcd(old.partitions, KEY_GROUPS)
    # Each residue class modulo d holds old.partitions // d old partitions.
    return max(len(_classes(new.groups(q), d)) for q in range(new.partitions)) * (
        old.partitions // d
    )


def _hashes_staying(group: int, old_partitions: int, new_partition: int) -> int:
    """How many hashes of ``group`` (modulo generation 0 with ``old_partitions``) have old
    partition ``new_partition``: the t in [0, _PER_GROUP) with
    (group + KEY_GROUPS * t) = new_partition (mod old_partitions)."""
    if new_partition >= old_partitions:
        return 0
    d = gcd(KEY_GROUPS, old_partitions)
    c = (new_partition - group) % old_partitions
    if c % d:
        return 0
    period = old_partitions // d
    t0 = (c // d) * pow(KEY_GROUPS // d, -1, period) % period if period > 1 else 0
    return (_PER_GROUP - 1 - t0) // period + 1 if t0 < _PER_GROUP else 0


def moved_fraction(old: Routing, new: Routing) -> Fraction:
    """The share of keys (of the hash space) whose partition number differs between ``old``
    and ``new``."""
    _check_pair(old, new)
    if old.by_key_groups:
        # Sweep the breakpoints of both range partitions: O(old + new) intervals.
        cuts = sorted(
            {0, KEY_GROUPS}
            | {old.groups(p).start for p in range(old.partitions)}
            | {new.groups(q).start for q in range(new.partitions)}
        )
        moved_groups = sum(
            b - a
            for a, b in pairwise(cuts)
            if partition_of_group(a, old.partitions) != partition_of_group(a, new.partitions)
        )
        return Fraction(moved_groups, KEY_GROUPS)
    staying = sum(
        _hashes_staying(k, old.partitions, partition_of_group(k, new.partitions))
        for k in range(KEY_GROUPS)
    )
    return 1 - Fraction(staying, HASHES)
