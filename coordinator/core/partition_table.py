"""The partition records of the replicated state, by the number each is carried under.

Owns `PartitionTable`: what `ClusterState.partitions` is. A partition is found by its
number (``table[p]``, ``p in table``), the table iterates its records in ascending number,
and ``of(pipeline)`` iterates one pipeline's. Invariant: every record sits under its own
``partition`` field and in its own ``pipeline``'s index, and iteration is in ascending
number, whatever order records were written in. Numbers are identities, not positions:
`default`'s partitions are 0 .. total_partitions - 1 and a recorded pipeline's start at its
``first_slot`` (SLOT_BASE and up), so readers ask ``p in table``, never ``p < len(table)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

from coordinator.core.model import DEFAULT_PIPELINE, SLOT_BASE, Partition, PipelineName

__all__ = ["PartitionTable"]


class PartitionTable:
    """Partition records by number, iterated in ascending number.

    Only `ClusterState` writes it (``put``, ``add``, ``remove``, ``swap``, and a whole new
    table at Bootstrap, a rescale's StatesBuilt and a snapshot's decode); everyone else reads.
    """

    __slots__ = ("_by_number", "_by_pipeline")

    def __init__(self, records: Iterable[Partition] = ()) -> None:
        ordered = sorted(records, key=lambda r: r.partition)
        # A dict keeps insertion order: built in ascending number, `put` replaces a record in
        # place and `add` only appends numbers above every one held, so iterating it is
        # iterating in ascending number.
        # Keyed by plain int: a lookup is the hot path of every tick at 100k partitions.
        self._by_number: dict[int, Partition] = {r.partition: r for r in ordered}
        if len(self._by_number) != len(ordered):
            raise ValueError("two partition records under one number")
        for r in ordered:
            if (r.pipeline == DEFAULT_PIPELINE) != (r.partition < SLOT_BASE):
                raise ValueError(f"partition {r.partition} of {r.pipeline} is out of its range")
        # A recorded pipeline's numbers; `default`'s are all those below SLOT_BASE, found
        # from the front of `_by_number`, so a copy of the table does not copy an index of
        # every partition twice.
        self._by_pipeline: dict[PipelineName, dict[int, None]] = {}
        for r in ordered:
            if r.pipeline != DEFAULT_PIPELINE:
                self._by_pipeline.setdefault(r.pipeline, {})[r.partition] = None

    def __getitem__(self, p: int) -> Partition:
        return self._by_number[p]

    def __contains__(self, p: object) -> bool:
        return p in self._by_number

    def __iter__(self) -> Iterator[Partition]:
        return iter(self._by_number.values())

    def __len__(self) -> int:
        return len(self._by_number)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartitionTable):
            return NotImplemented
        return list(self._by_number.values()) == list(other._by_number.values())

    __hash__ = None  # type: ignore[assignment]  # mutable: equal tables may not stay equal

    def __repr__(self) -> str:
        return f"PartitionTable({list(self._by_number.values())!r})"

    def get(self, p: int) -> Partition | None:
        return self._by_number.get(p)

    def of(self, pipeline: str) -> Iterator[Partition]:
        """One pipeline's records, in ascending number."""
        if pipeline == DEFAULT_PIPELINE:
            # The first ones in number order: every other pipeline's are above SLOT_BASE.
            return itertools.islice(self._by_number.values(), self.count_of(pipeline))
        numbers = self._by_pipeline.get(PipelineName(pipeline), {})
        return (self._by_number[p] for p in numbers)

    def count_of(self, pipeline: str) -> int:
        if pipeline == DEFAULT_PIPELINE:
            return len(self._by_number) - sum(len(x) for x in self._by_pipeline.values())
        return len(self._by_pipeline.get(PipelineName(pipeline), ()))

    def put(self, record: Partition) -> None:
        """Replace the record under ``record.partition``, which must be in the table, of the
        same pipeline."""
        old = self._by_number.get(record.partition)
        if old is None:
            raise KeyError(record.partition)
        if old.pipeline != record.pipeline:
            raise ValueError(f"partition {record.partition} is {old.pipeline}'s")
        self._by_number[record.partition] = record

    def add(self, records: Sequence[Partition]) -> None:
        """Append records numbered above every number held, in ascending number."""
        top = next(reversed(self._by_number), -1)
        for r in records:
            if r.partition <= top:
                raise ValueError(f"partition {r.partition} is not above {top}")
            top = r.partition
        for r in records:
            if r.pipeline == DEFAULT_PIPELINE or r.partition < SLOT_BASE:
                raise ValueError(f"partition {r.partition} is not a recorded pipeline's")
        for r in records:
            self._by_number[r.partition] = r
            self._by_pipeline.setdefault(r.pipeline, {})[r.partition] = None

    def remove(self, pipeline: str) -> tuple[Partition, ...]:
        """Drop one recorded pipeline's records; they are returned."""
        if pipeline == DEFAULT_PIPELINE:
            raise ValueError("default's table is replaced, never removed")
        numbers = self._by_pipeline.pop(PipelineName(pipeline), {})
        return tuple(self._by_number.pop(p) for p in numbers)

    def swap(self, pipeline: str, records: Sequence[Partition]) -> tuple[Partition, ...]:
        """Replace one recorded pipeline's records with `records` (its new generation's, in
        ascending number, none of them held); the old ones are returned. Numbers reserved
        before another pipeline's were made sit below them, so the dict is rebuilt in number
        order then (a pass over the table, once per rescale)."""
        if any(r.pipeline != pipeline or r.partition in self._by_number for r in records):
            raise ValueError(f"the new records are not new numbers of {pipeline}")
        old = self.remove(pipeline)
        top = next(reversed(self._by_number), -1)
        if records and records[0].partition < top:
            rest = list(self._by_number.values())
            self._by_number = {}
            for r in sorted([*rest, *records], key=lambda r: r.partition):
                self._by_number[r.partition] = r
            self._by_pipeline[PipelineName(pipeline)] = {r.partition: None for r in records}
        else:
            self.add(records)
        return old

    def copy(self) -> PartitionTable:
        """A table of the same (frozen, shared) records: a pointer copy per record."""
        out = PartitionTable()
        out._by_number = dict(self._by_number)
        out._by_pipeline = {name: dict(ps) for name, ps in self._by_pipeline.items()}
        return out
