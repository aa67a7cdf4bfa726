"""The routing generations of a recorded pipeline a worker may hold, as its describe shows them.

Owns reading a describe's (or listing row's) ranges. Invariant: a range is returned only if its
numbers are recorded ones (first slot at or above SLOT_BASE, at least one partition): an entry
not set up yet is no range, so no partition is ever placed in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.routing import SLOT_BASE

__all__ = ["GenerationRange", "ranges_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationRange:
    """One routing generation's partition numbers: first_slot .. first_slot + partitions - 1,
    and its spec's text when the describe gives it with the range."""

    first_slot: int
    partitions: int
    generation: int
    spec_text: str | None = None

    def contains(self, partition: int) -> bool:
        return self.first_slot <= partition < self.first_slot + self.partitions


def _range(entry: object) -> GenerationRange | None:
    """A range from a describe's entry ({first_slot, partitions, routing_generation (a
    rescale's: generation), spec_text?}); None when it is not one (not set up yet: first_slot
    0)."""
    if not isinstance(entry, Mapping):
        return None
    first, count = _int(entry.get("first_slot")), _int(entry.get("partitions"))
    # A rescale's record names its new routing generation `generation`.
    generation = _int(entry.get("routing_generation", entry.get("generation", 0)))
    if first is None or count is None or generation is None:
        return None
    if first < SLOT_BASE or count < 1 or generation < 0:
        return None
    text = entry.get("spec_text")
    return GenerationRange(
        first_slot=first,
        partitions=count,
        generation=generation,
        # "" in a rescale's record once its spec is the pipeline's: the describe's then.
        spec_text=text if isinstance(text, str) and text else None,
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def ranges_of(body: Mapping[str, Any]) -> list[GenerationRange]:
    """Every range of a pipeline's describe (or listing row) that a worker may hold: the
    current one, the one a rescale in flight builds (`rescale`) and the earlier ones
    (`past`), each when present."""
    entries: list[object] = [body, body.get("rescale")]
    past = body.get("past")
    if isinstance(past, list):
        entries.extend(past)
    return [r for r in map(_range, entries) if r is not None]
