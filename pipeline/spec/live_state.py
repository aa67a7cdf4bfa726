"""A hosted recorded-pipeline partition's live state, on disk: its rows in a `StateStore`, its
watermark basis and its closed windows beside them.

Owns `LiveState`: the store-backed form of `SpecPartitionState` (which stays the form of a
rescale's cut and build checkpoints and of format 2), and how one micro-batch folds into it.
Invariants:
- a merge reads only the batch's keys (one multi-get), writes only the merged rows (one
  write batch) and deletes only the final windows' rows: the state is never copied whole;
- it decides what `merge_spec_batch` decides for the same state and batch: new keys admitted
  in order of (first offset, key) under the key limit (0: none), the rest returned as dead
  letters; a windowed spec's basis only grows and a window past the watermark is appended to
  `closed` and evicted;
- the rows are the state: `snapshot` and `from_state` convert both ways without loss.

Row layout: an unwindowed spec's row is `pack_key(key) -> pack_value((first offset, outputs))`;
a windowed spec's is keyed `pack_key((window start, key))` so the rows of one window start
are one key prefix (evicting a final window is a seek, not a scan), and the distinct open
window starts (a handful: size and lateness over slide) are kept in memory to read one key's
open windows with one multi-get.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rocksdict

from pipeline.spec.aggregations import KeyState, Output, SketchOps, merge_states
from pipeline.spec.partition_state import (
    SpecPartitionState,
    admission_order,
    trimmed_segments,
    unnamed_segment,
)
from pipeline.spec.state_codec import pack_key, pack_value, unpack_key, unpack_value
from pipeline.spec.state_store import StateStore
from pipeline.spec.windows import US_PER_S, ClosedRow, window_rows
from shared.spec.model import WindowSpec

__all__ = [
    "LOAD_ROWS_MAX",
    "WORKER_BLOCK_CACHE_BYTES",
    "LiveState",
    "Merge",
    "worker_cache",
]

# One block cache for every store of a worker: its bound is the worker's read memory for
# state, whatever the number of partitions it hosts.
WORKER_BLOCK_CACHE_BYTES = 256 * 1024 * 1024
LOAD_ROWS_MAX = 4096  # rows written per batch when a whole state is loaded into a store


def worker_cache(capacity_bytes: int = WORKER_BLOCK_CACHE_BYTES) -> rocksdict.Cache:
    """The block cache the stores of one worker share."""
    return rocksdict.Cache(capacity_bytes)


@dataclass(frozen=True, slots=True)
class Merge:
    """A batch prepared against the state: the rows to write (state key, first offset,
    outputs) and the dead letters (new keys over the limit, their partial states)."""

    rows: list[tuple[Any, int, KeyState]]
    dead: dict[Any, KeyState]
    batch_max_us: int | None


@dataclass(slots=True)
class LiveState:
    store: StateStore
    window: WindowSpec | None = None
    # Windowed specs only: the largest event time merged (microseconds; None: none yet), the
    # final windows' rows closed since their publisher last trimmed them, and the window
    # starts of the rows held.
    basis_us: int | None = None
    closed: list[ClosedRow] = field(default_factory=list)
    # (offset of the first checkpoint that held them, rows) over a prefix of `closed`: the
    # windows file each belongs in (pipeline.spec.partition_state).
    named: list[tuple[int, int]] = field(default_factory=list)
    open_starts: set[int] = field(default_factory=set)

    @classmethod
    def create(
        cls,
        directory: Path,
        window: WindowSpec | None,
        cache: rocksdict.Cache | None = None,
    ) -> LiveState:
        """An empty state in `directory`; whatever a previous owner left there is removed
        first (a partition hosted again starts from its checkpoint, never from old rows)."""
        shutil.rmtree(directory, ignore_errors=True)
        return cls(store=StateStore.open(directory, cache), window=window)

    @classmethod
    def from_state(
        cls,
        directory: Path,
        window: WindowSpec | None,
        state: SpecPartitionState,
        cache: rocksdict.Cache | None = None,
    ) -> LiveState:
        """`state` (a loaded format-2 checkpoint) written into a fresh store: no dirty marks,
        a loaded checkpoint is no change since it."""
        live = cls.create(directory, window, cache)
        live.basis_us, live.closed = state.basis_us, list(state.closed)
        live.named = list(state.named)
        try:
            encoded = sorted(
                (pack_key(live._store_key(k)), pack_value((state.firsts[k], v)))
                for k, v in state.values.items()
            )
            for start in range(0, len(encoded), LOAD_ROWS_MAX):
                live.store.append_new(encoded[start : start + LOAD_ROWS_MAX])
        except BaseException:
            live.destroy()  # half a state is no state: the load fails whole
            raise
        if window is not None:
            live.open_starts = {k[1] for k in state.values}
        return live

    def __len__(self) -> int:
        return self.store.count()

    def close(self) -> None:
        self.store.close()

    def destroy(self) -> None:
        """Close the store and delete its directory (the partition was released or closed)."""
        self.store.destroy()

    # The store's key of a state key: a windowed state's (key, start) is stored (start, key).
    def _store_key(self, key: Any) -> Any:
        return key if self.window is None else (key[1], key[0])

    def _state_key(self, stored: Any) -> Any:
        return stored if self.window is None else (stored[1], stored[0])

    def _held(self, keys: Sequence[Any]) -> dict[Any, tuple[int, KeyState]]:
        found = self.store.get_many([self._store_key(k) for k in keys])
        return {self._state_key(k): (int(v[0]), dict(v[1])) for k, v in found.items()}

    # Reads.
    def values_of(self, keys: Sequence[Any]) -> SpecPartitionState:
        """The rows of `keys` as a (small) SpecPartitionState: a windowed spec's keys are the
        plain keys, each read in every open window."""
        if self.window is not None:
            keys = [(k, s) for k in keys for s in sorted(self.open_starts)]
        held = self._held(keys)
        return SpecPartitionState(
            values={k: v for k, (_, v) in held.items()},
            firsts={k: f for k, (f, _) in held.items()},
            basis_us=self.basis_us,
        )

    def rows(self) -> Iterator[tuple[Any, int, KeyState]]:
        """Every row (state key, first offset, outputs), from a snapshot, in the store's order."""
        for k, v in self.store.rows():
            yield self._state_key(k), int(v[0]), dict(v[1])

    def head(self, rows_max: int) -> tuple[SpecPartitionState, bool]:
        """At most `rows_max` rows, and whether there were more: a bounded listing."""
        out = SpecPartitionState(basis_us=self.basis_us)
        for key, first, values in self.rows():
            if len(out.values) == rows_max:
                return out, True
            out.values[key], out.firsts[key] = values, first
        return out, False

    def snapshot(self) -> SpecPartitionState:
        """The whole state in memory (a rescale's cut, a format-2 checkpoint): its size is the
        state's, the documented limit of those two."""
        out = SpecPartitionState(
            basis_us=self.basis_us, closed=list(self.closed), named=list(self.named)
        )
        for key, first, values in self.rows():
            out.values[key], out.firsts[key] = values, first
        return out

    # The micro-batch.
    def prepare(
        self,
        outputs: Sequence[Output],
        batch: Mapping[Any, KeyState],
        batch_firsts: Mapping[Any, int],
        max_keys: int,
        sketches: SketchOps,
        batch_max_us: int | None = None,
    ) -> Merge:
        """One batch's partial states folded with the rows they touch, under the key limit
        (`max_keys`; 0: none), nothing written yet: the caller writes the dead letters first,
        then `commit`s, so a failed write leaves the state before the batch."""
        if max_keys < 0:
            raise ValueError(f"max_keys must be 0 (no limit) or positive, got {max_keys}")
        held = self._held(list(batch))
        new_keys = sorted(
            (k for k in batch if k not in held), key=lambda k: admission_order(k, batch_firsts)
        )
        refused: list[Any] = []
        if max_keys > 0:
            refused = new_keys[max(0, max_keys - len(self)) :]
        refused_set = set(refused)
        taken = {k: v for k, v in batch.items() if k not in refused_set}
        merged = merge_states(outputs, {k: v for k, (_, v) in held.items()}, taken, sketches)
        rows = [(k, held[k][0] if k in held else batch_firsts[k], merged[k]) for k in taken]
        return Merge(rows=rows, dead={k: batch[k] for k in refused}, batch_max_us=batch_max_us)

    def commit(self, merge: Merge, outputs: Sequence[Output], sketches: SketchOps) -> None:
        """Write a prepared batch: its rows in one write batch, then (windowed) the basis
        moves and the windows it makes final are appended to `closed` and evicted."""
        self.store.put_many((self._store_key(k), (first, v)) for k, first, v in merge.rows)
        if self.window is None:
            return
        self.open_starts.update(k[1] for k, _, _ in merge.rows)
        top = merge.batch_max_us
        if top is not None and (self.basis_us is None or top > self.basis_us):
            self.basis_us = top
        self._close(outputs, sketches)

    def merge(
        self,
        outputs: Sequence[Output],
        batch: Mapping[Any, KeyState],
        batch_firsts: Mapping[Any, int],
        max_keys: int,
        sketches: SketchOps,
        batch_max_us: int | None = None,
    ) -> dict[Any, KeyState]:
        """`prepare` and `commit` at once; the dead letters."""
        prepared = self.prepare(outputs, batch, batch_firsts, max_keys, sketches, batch_max_us)
        self.commit(prepared, outputs, sketches)
        return prepared.dead

    def _close(self, outputs: Sequence[Output], sketches: SketchOps) -> None:
        """Append the final windows at the basis to `closed` and evict their rows: one seek per
        final window start."""
        window = self.window
        if window is None or self.basis_us is None:
            return
        watermark = self.basis_us - window.lateness_s * US_PER_S
        size = window.size_s * US_PER_S
        for start in sorted(s for s in self.open_starts if s + size <= watermark):
            prefix = _start_prefix(start)
            final: dict[Any, KeyState] = {}
            for k, v in self.store.raw_rows_from(prefix):
                stored = unpack_key(k)
                final[(stored[1], stored[0])] = dict(unpack_value(v)[1])
            rows = window_rows(outputs, window, final, sketches)
            self.store.delete_many((s, k) for k, s in final)
            self.closed.extend(rows)
            self.open_starts.discard(start)

    def name_at(self, offset: int) -> None:
        """Name the unnamed closed rows after the checkpoint at `offset`, just written: the
        first to hold them, so their windows file is that checkpoint's."""
        self.named = unnamed_segment(self.named, len(self.closed), offset)

    def trim_closed(self, published: int) -> None:
        """Drop the first `published` closed rows (merges only append to `closed`), whole
        segments only."""
        self.named = trimmed_segments(self.named, published)
        del self.closed[:published]


def _start_prefix(start: int) -> bytes:
    # pack_key((start, key)) is a 2-array header, then the start, then the key: the bytes of
    # a 2-tuple's first element are a prefix of every such key, and only of those.
    with_key = pack_key((start, None))
    return with_key[: -len(pack_key(None))]
