"""A recorded pipeline's partition state: each key's spec state and first offset, merged under
the key limit, and its checkpoint encoding (format 2).

A windowed spec's state is keyed by (key, window start in microseconds) and the key limit
counts those rows; it also holds the watermark basis (`basis_us`, the largest event time
merged) and the final windows closed since (`closed`, appended in order and trimmed by their
publisher), both in the checkpoint when present (a checkpoint without them decodes as before,
and an unwindowed state encodes to the bytes it always did). See pipeline/spec/windows.py.

Each closed row is published once, in the windows file named after the FIRST checkpoint that
held it (`named`: segments (offset, rows) over a prefix of `closed`; the rows after them are
named by the next checkpoint written). A written checkpoint names its unnamed rows in memory
(`named_at`), and decoding a checkpoint names them after its own offset, so every owner that
holds a row, whoever wrote the checkpoint it loaded, publishes it under the same name.

Owns `SpecPartitionState` and how one micro-batch's partial states fold into it. Invariant:
as in `pipeline.state` for `default`, new keys are admitted in order of their first offset
(then the key), so the admitted set does not depend on how the input was cut into batches,
and keys beyond the limit come back as dead letters, never dropped. The checkpoint encoding
is deterministic (keys sorted, outputs in the spec's order), so a retried write of the same
state has the same bytes, and it names the spec version it was computed under: a checkpoint
is only ever loaded under that version.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from pipeline.spec.aggregations import KeyState, Output, SketchOps, merge_states
from pipeline.spec.state_codec import ext_default, ext_hook, tupled
from pipeline.spec.windows import ClosedRow, close_windows
from shared.spec.model import WindowSpec

__all__ = [
    "KEYS_UNLIMITED",
    "SPEC_CHECKPOINT_FORMAT_VERSION",
    "SpecCheckpoint",
    "SpecCheckpointError",
    "SpecPartitionState",
    "admission_order",
    "decode_spec_checkpoint",
    "encode_spec_checkpoint",
    "merge_spec_batch",
]

SPEC_CHECKPOINT_FORMAT_VERSION = 2
# A recorded pipeline's key limit when its setting is 0: none (a bound no partition reaches,
# so the merges here and a rescale's build need no case of their own).
KEYS_UNLIMITED = sys.maxsize


class SpecCheckpointError(ValueError):
    """A format-2 checkpoint that does not decode."""


@dataclass(slots=True)
class SpecPartitionState:
    values: dict[Any, KeyState] = field(default_factory=dict)  # key -> output -> state
    firsts: dict[Any, int] = field(default_factory=dict)  # key -> its first offset
    # Windowed specs only: the largest event time merged (microseconds; None: none yet), and
    # the final windows' rows closed since their publisher last trimmed them.
    basis_us: int | None = None
    closed: list[ClosedRow] = field(default_factory=list)
    # (offset of the first checkpoint that held them, rows) over a prefix of `closed`.
    named: list[tuple[int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.values)

    def named_at(self, offset: int) -> SpecPartitionState:
        """This state with its unnamed closed rows named after the checkpoint at `offset`."""
        named = unnamed_segment(self.named, len(self.closed), offset)
        return self if named == self.named else dataclasses.replace(self, named=named)

    def segments(self, offset: int) -> list[tuple[int, list[ClosedRow]]]:
        """The closed rows by the windows file they belong in (unnamed ones: `offset`'s)."""
        out, at = [], 0
        for name, n in self.named_at(offset).named:
            out.append((name, self.closed[at : at + n]))
            at += n
        return out

    def trimmed(self, rows: int) -> SpecPartitionState:
        """Without the first `rows` closed rows (published), whole segments only."""
        named = trimmed_segments(self.named, rows)
        return dataclasses.replace(self, closed=self.closed[rows:], named=named)


def unnamed_segment(
    named: Sequence[tuple[int, int]], closed: int, offset: int
) -> list[tuple[int, int]]:
    """`named` with the rows after its segments (of `closed` in all) named after `offset`."""
    rest = closed - sum(n for _, n in named)
    return list(named) if rest <= 0 else [*named, (offset, rest)]


def trimmed_segments(named: Sequence[tuple[int, int]], rows: int) -> list[tuple[int, int]]:
    """The segments left once the first `rows` closed rows are gone: whole segments only (rows
    past every segment are unnamed ones, which no windows file holds yet)."""
    out, left = [], rows
    for name, n in named:
        if left >= n:
            left -= n
        elif left:
            raise ValueError(f"trimming {rows} closed rows cuts a segment")
        else:
            out.append((name, n))
    return out


def merge_spec_batch(
    outputs: Sequence[Output],
    state: SpecPartitionState,
    batch: Mapping[Any, KeyState],
    batch_firsts: Mapping[Any, int],
    max_keys: int,
    sketches: SketchOps,
    window: WindowSpec | None = None,
    batch_max_us: int | None = None,
) -> tuple[SpecPartitionState, dict[Any, KeyState]]:
    """`state` with one batch's partial states merged in under the key limit (the input is not
    modified), and the dead letters: the partial states of new keys that did not fit. With a
    `window`, the basis moves to `batch_max_us` if later, and the windows it makes final are
    appended to `closed` and evicted."""
    if max_keys <= 0:
        raise ValueError(f"max_keys must be positive, got {max_keys}")
    new_keys = sorted(
        (k for k in batch if k not in state.values), key=lambda k: admission_order(k, batch_firsts)
    )
    room = max(0, max_keys - len(state.values))
    admitted, refused = new_keys[:room], new_keys[room:]
    refused_set = set(refused)
    taken = {k: v for k, v in batch.items() if k not in refused_set}
    merged = merge_states(outputs, state.values, taken, sketches)
    firsts = dict(state.firsts)
    for key in admitted:
        firsts[key] = batch_firsts[key]
    dead = {k: batch[k] for k in refused}
    if window is None:
        kept = SpecPartitionState(
            values=merged, firsts=firsts, closed=list(state.closed), named=list(state.named)
        )
        return kept, dead
    basis = state.basis_us
    if batch_max_us is not None and (basis is None or batch_max_us > basis):
        basis = batch_max_us
    rows, final = close_windows(outputs, window, merged, basis, sketches)
    for key in final:
        del merged[key], firsts[key]
    closed = [*state.closed, *rows]
    merged_state = SpecPartitionState(
        values=merged, firsts=firsts, basis_us=basis, closed=closed, named=list(state.named)
    )
    return merged_state, dead


def _order(key: Any) -> tuple[Any, ...]:
    # A null key (a transform may yield one) sorts after every other key; a windowed state's
    # (key, window start) by key, then start.
    if isinstance(key, tuple):
        return (*_order(key[0]), key[1])
    return (key is None, "" if key is None else key)


def admission_order(key: Any, firsts: Mapping[Any, int]) -> tuple[Any, ...]:
    """The order new keys are admitted in under the key limit: first offset, then key."""
    return (firsts[key], *_order(key))


def _sorted_keys(keys: Any) -> list[Any]:
    return sorted(keys, key=_order)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecCheckpoint:
    partition: int
    epoch: int
    offset: int
    spec_version: str
    state: SpecPartitionState


def encode_spec_checkpoint(
    partition: int,
    epoch: int,
    offset: int,
    spec_version: str,
    outputs: Sequence[Output],
    state: SpecPartitionState,
) -> bytes:
    names = [o.spec.name for o in outputs]
    rows = [
        [key, state.firsts[key], [state.values[key][n] for n in names]]
        for key in _sorted_keys(state.values)
    ]
    doc: dict[str, Any] = {
        "v": SPEC_CHECKPOINT_FORMAT_VERSION,
        "partition": partition,
        "epoch": epoch,
        "offset": offset,
        "spec": spec_version,
        "outputs": names,
        "keys": rows,
    }
    # Only when there is any: an unwindowed state's bytes are what they always were.
    if state.basis_us is not None:
        doc["basis_us"] = state.basis_us
    if state.closed:
        doc["closed"] = state.closed
    if state.named:
        doc["named"] = [list(seg) for seg in state.named]
    return bytes(msgpack.packb(doc, use_bin_type=True, default=ext_default))


def decode_spec_checkpoint(data: bytes) -> SpecCheckpoint:
    try:
        # Untyped until checked: every field is converted below, anything else refused.
        doc: Any = msgpack.unpackb(data, raw=False, ext_hook=ext_hook, strict_map_key=False)
        if doc.get("v") != SPEC_CHECKPOINT_FORMAT_VERSION:
            raise SpecCheckpointError(f"not a format-2 checkpoint: {doc.get('v')!r}")
        names = [str(n) for n in doc["outputs"]]
        state = SpecPartitionState()
        for key, first, values in doc["keys"]:
            if len(values) != len(names):
                raise SpecCheckpointError(
                    f"key {key!r} has {len(values)} outputs, not {len(names)}"
                )
            key = tupled(key)  # a windowed state's (key, window start)
            state.values[key] = {n: tupled(v) for n, v in zip(names, values, strict=True)}
            state.firsts[key] = int(first)
        basis = doc.get("basis_us")
        state.basis_us = None if basis is None else int(basis)
        state.closed = [dict(row) for row in doc.get("closed", [])]
        state.named = [(int(at), int(n)) for at, n in doc.get("named", [])]
        if sum(n for _, n in state.named) > len(state.closed):
            raise SpecCheckpointError(f"named segments {state.named} pass the closed rows")
        # This checkpoint was the first to hold its unnamed rows: they are named after it.
        state = state.named_at(int(doc["offset"]))
        return SpecCheckpoint(
            partition=int(doc["partition"]),
            epoch=int(doc["epoch"]),
            offset=int(doc["offset"]),
            spec_version=str(doc["spec"]),
            state=state,
        )
    except SpecCheckpointError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, msgpack.UnpackException) as exc:
        raise SpecCheckpointError(f"checkpoint does not decode: {exc}") from exc
