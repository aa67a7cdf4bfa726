"""The build of a recorded pipeline's rescale (or spec update): every new partition's starting
checkpoint, from the old partitions' checkpoints at their cuts.

Owns `build` and the rule of which outputs a spec update carries (`carried_outputs`). The new
generation's partitions have fresh numbers (`new_first_slot` up, never one of the old ones)
and start at `generation_base(generation)`, above every offset of the old generation: so each
key's first offset (the key limit's admission order) and `first`/`last` by offset keep their
meaning across the cut with the states copied as they are. Each key goes to the new partition
its new routing names over the key's text, as a producer routes the key's records
(`produce.key_text`); a key found in two old partitions (only a transform that rewrites keys
makes one) is merged, lower old partition first, with the smaller first offset. Then the key
limit applies as to a batch (`merge_spec_batch` into an empty state): at most `max_keys` keys,
admitted by (first offset, key), and the others come back as dead-letter rows, never dropped.

Spec update: an output whose definition is the same in both specs (name, aggregation and its
parameters, input column and its type, under the same key and the same transform) carries
its state; every other output of the new spec starts with no rows at the cut, as `None`, the
identity every output's merge already has (a count's `None` reads as 0, a distinct count's as
0, any other output's as null, what Spark's aggregates give over no values); an output the
new spec drops is dropped. A change of the key column (or its type) is refused: a key's
state under one key means nothing under another.

Windowed specs (docs/pipeline.md "Windows"): the state is keyed (key, window start) and each
row goes where its key routes, so a key's open windows stay together. Every new partition
starts with the WATERMARK BASIS `max` of the cut partitions' bases: a function of the cut
offsets (each cut's basis is its partition's largest event time below the cut), so every
builder decides the same. It is at least each old partition's basis, so no record the old
generation found late is on time in the new one's view of that key, and the windows it
makes final are closed at the build: appended to the new partition's `closed` (published by
its first owner under the new partition's base offset) and evicted. The cuts' own `closed`
rows are not carried: they are the old partitions', published under their cut's name
(pipeline.pipeline_build). The window itself (column, size, slide, lateness) cannot change
in a spec update: its open rows mean nothing under another window.

Invariant: `build` is a pure function of its arguments (given a deterministic `SketchOps`),
and its checkpoints' bytes are deterministic, so a rerun writes the same objects; every key
of the cuts lands in exactly one new partition, in its state or in its dead letters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.source import generation_base, generation_of
from pipeline.spec.aggregations import KeyState, Output, SketchOps, merge_states, outputs_of
from pipeline.spec.partition_state import (
    SpecCheckpointError,
    SpecPartitionState,
    decode_spec_checkpoint,
    encode_spec_checkpoint,
    merge_spec_batch,
)
from pipeline.spec.produce import key_text
from shared.routing import SLOT_BASE, Routing
from shared.spec.model import PipelineSpec

__all__ = ["BuiltPartition", "RescaleBuildError", "build", "carried_outputs"]


class RescaleBuildError(ValueError):
    """The build's input is not what a build of this rescale needs (a cut that does not
    decode, of another spec version, partition or generation; a key column changed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltPartition:
    """A new partition's starting checkpoint and the keys the key limit refused."""

    checkpoint: bytes
    dead: dict[Any, KeyState]


def carried_outputs(old: PipelineSpec, new: PipelineSpec) -> frozenset[str]:
    """The names of the new spec's outputs that carry their state from the old spec's.
    Raises RescaleBuildError when the key column or its type changed."""
    old_key, new_key = old.aggregated.column(old.key), new.aggregated.column(new.key)
    if old.key != new.key or old_key is None or new_key is None or old_key.type != new_key.type:
        raise RescaleBuildError(
            f"the key column changed ({old.key!r} -> {new.key!r}): a spec update keeps the key; "
            "a new key is a new pipeline"
        )
    if old.transform != new.transform:
        return frozenset()  # every column the aggregations read may have changed
    if old.transform is not None and old.schema != new.schema:
        return frozenset()  # the transform reads the whole record: its input changed
    before = {a.name: a for a in old.aggregations}
    carried = set()
    for agg in new.aggregations:
        prior = before.get(agg.name)
        if prior != agg:
            continue
        if agg.column is not None:
            was, now = old.aggregated.column(agg.column), new.aggregated.column(agg.column)
            if was is None or now is None or was.type != now.type:
                continue
        carried.add(agg.name)
    return frozenset(carried)


def build(
    old: PipelineSpec,
    new: PipelineSpec,
    cuts: Mapping[int, bytes],
    routing: Routing,
    new_first_slot: int,
    epoch: int,
    max_keys: int,
    sketches: SketchOps,
) -> dict[int, BuiltPartition]:
    """Every new partition (new_first_slot .. new_first_slot + routing.partitions - 1) ->
    its checkpoint at generation_base(routing.generation), under `new`'s version, and its
    dead letters. `cuts` maps each old partition number to its checkpoint at the cut.
    `sketches` unions the distinct-count sketches of a key found in two old partitions."""
    _check(cuts, routing, new_first_slot, max_keys)
    if old.window != new.window:
        # The coordinator refuses these (a 409 before anything is proposed): never built.
        raise RescaleBuildError("a spec update keeps the window: a new window is a new pipeline")
    carried = carried_outputs(old, new)
    new_outputs = outputs_of(new)
    old_names = {o.spec.name for o in outputs_of(old)}
    values: dict[int, dict[Any, KeyState]] = {q: {} for q in range(routing.partitions)}
    firsts: dict[int, dict[Any, int]] = {q: {} for q in range(routing.partitions)}
    basis: int | None = None
    for p in sorted(cuts):
        state = _cut_state(old, p, cuts[p], routing.generation - 1, old_names)
        if state.basis_us is not None and (basis is None or state.basis_us > basis):
            basis = state.basis_us
        again: dict[int, dict[Any, KeyState]] = {}
        for key, held in state.values.items():
            # A windowed state's key is (key, window start): routed by the key.
            q = routing.partition_for(key_text(key[0] if new.window is not None else key))
            kept = _projected(new_outputs, held, carried)
            first = state.firsts[key]
            if key in values[q]:
                again.setdefault(q, {})[key] = kept
                firsts[q][key] = min(firsts[q][key], first)
            else:
                values[q][key] = kept
                firsts[q][key] = first
        for q, batch in sorted(again.items()):
            prior = {k: values[q][k] for k in batch}
            values[q].update(merge_states(new_outputs, prior, batch, sketches))
    base = generation_base(routing.generation)
    out: dict[int, BuiltPartition] = {}
    for q in range(routing.partitions):
        # The carried basis closes the windows it makes final (none without a window).
        admitted, dead = merge_spec_batch(
            new_outputs,
            SpecPartitionState(basis_us=basis if new.window is not None else None),
            values[q],
            firsts[q],
            max_keys,
            sketches,
            new.window,
            None,
        )
        number = new_first_slot + q
        data = encode_spec_checkpoint(number, epoch, base, new.version, new_outputs, admitted)
        out[number] = BuiltPartition(checkpoint=data, dead=dead)
    return out


def _check(cuts: Mapping[int, bytes], routing: Routing, new_first_slot: int, max_keys: int) -> None:
    if not routing.by_key_groups:
        raise RescaleBuildError("a rescale builds a key-group generation (generation >= 1)")
    if max_keys <= 0:
        raise RescaleBuildError(f"max_keys must be positive, got {max_keys}")
    if new_first_slot < SLOT_BASE:
        raise RescaleBuildError(f"new_first_slot {new_first_slot} is below SLOT_BASE={SLOT_BASE}")
    fresh = range(new_first_slot, new_first_slot + routing.partitions)
    reused = sorted(p for p in cuts if p in fresh)
    if reused:
        raise RescaleBuildError(f"the new partitions reuse old numbers {reused}")


def _cut_state(
    old: PipelineSpec, partition: int, data: bytes, generation: int, names: set[str]
) -> SpecPartitionState:
    """The old partition's state at its cut, checked to be what the build was told."""
    try:
        ck = decode_spec_checkpoint(data)
    except SpecCheckpointError as exc:
        raise RescaleBuildError(f"the cut of partition {partition}: {exc}") from exc
    if ck.partition != partition:
        raise RescaleBuildError(f"the cut of partition {partition} is partition {ck.partition}'s")
    if ck.spec_version != old.version:
        raise RescaleBuildError(
            f"the cut of partition {partition} is of spec {ck.spec_version}, "
            f"the old generation ran {old.version}"
        )
    if generation_of(ck.offset) != generation:
        raise RescaleBuildError(
            f"the cut of partition {partition} at {ck.offset} is not in generation {generation}"
        )
    for key, held in ck.state.values.items():
        if set(held) != names:
            raise RescaleBuildError(
                f"the cut of partition {partition}: key {key!r} has outputs {sorted(held)}, "
                f"not the old spec's {sorted(names)}"
            )
    return ck.state


def _projected(outputs: tuple[Output, ...], held: KeyState, carried: frozenset[str]) -> KeyState:
    """A key's old state as the new spec's: carried outputs kept, new ones with no rows."""
    return {o.spec.name: held[o.spec.name] if o.spec.name in carried else None for o in outputs}
