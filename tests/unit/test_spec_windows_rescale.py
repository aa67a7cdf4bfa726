"""A windowed pipeline's rescale build, through `PipelineBuild` on a local store without
Spark: the cuts' unpublished final windows are published under each old partition's names
(each row in the file of the first checkpoint that held it), a rerun or the old owner's own
late publish adds nothing, and the windows the carried watermark makes final are in the new
partitions' checkpoints, for their first owner to publish."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.checkpoint import CheckpointStore
from pipeline.pipeline_build import PipelineBuild
from pipeline.source import generation_base
from pipeline.spec.aggregations import outputs_of
from pipeline.spec.partition_state import (
    SpecCheckpoint,
    SpecPartitionState,
    encode_spec_checkpoint,
)
from pipeline.spec.results import WINDOWS, publish, table_prefix, windows_key
from pipeline.spec.windows import US_PER_S, utc
from pipeline.store import LocalStore
from shared.messages.pipeline_rescale import PipelineBuildRequest
from shared.routing import SLOT_BASE
from shared.spec.parse import parse_spec
from tests.unit.test_pipeline_spec_merge import SetSketches

SPEC = """
[schema]
ddl = "host STRING, ms BIGINT, at TIMESTAMP"
key = "host"
[[aggregations]]
name = "n"
fn = "count"
[window]
column = "at"
size = "1m"
lateness = "30s"
"""
MINUTE = 60 * US_PER_S
OLD_FIRST, NEW_FIRST, NEW_COUNT = SLOT_BASE + 10, SLOT_BASE + 30, 3
CUT = generation_base(0) + 90  # both old partitions' cut offset


def row(host: str, start_min: int, n: int) -> dict[str, Any]:
    start = start_min * MINUTE
    return {"key": host, "window_start": utc(start), "window_end": utc(start + MINUTE), "n": n}


def describe() -> dict[str, Any]:
    old = {"first_slot": OLD_FIRST, "partitions": 2, "routing_generation": 0}
    rescale = {"first_slot": NEW_FIRST, "partitions": NEW_COUNT, "generation": 1}
    return {"name": "w", "incarnation": 1, "state": "active", "spec_text": SPEC,
            "settings": {"max_keys_per_partition": 0}, "past": [], **old,
            "rescale": {**rescale, "spec_text": SPEC}}  # fmt: skip


def _state(ck: object) -> SpecPartitionState:
    assert isinstance(ck, SpecCheckpoint)
    return ck.state


async def test_the_build_publishes_the_cuts_closed_rows_once_under_their_names(
    tmp_path: Path,
) -> None:
    store = LocalStore(str(tmp_path))
    checkpoints = CheckpointStore(store)
    spec = parse_spec(SPEC)
    outputs = outputs_of(spec)
    # Partition 10's cut holds a row its loaded checkpoint (at 40) held first, and one of its
    # own; 11's cut holds none, and an open window the max basis (3m40s) makes final.
    first = SpecPartitionState(
        values={("a", 3 * MINUTE): {"n": 1}},
        firsts={("a", 3 * MINUTE): 80},
        basis_us=3 * MINUTE + 10 * US_PER_S,
        closed=[row("a", 0, 2), row("b", 1, 1)],
        named=[(40, 1)],
    )
    second = SpecPartitionState(
        values={("c", 2 * MINUTE): {"n": 4}}, firsts={("c", 2 * MINUTE): 5},
        basis_us=3 * MINUTE + 40 * US_PER_S,
    )  # fmt: skip
    cuts = []
    for p, st in ((OLD_FIRST, first), (OLD_FIRST + 1, second)):
        data = encode_spec_checkpoint(p, 4, CUT, spec.version, outputs, st)
        uri = checkpoints.write_encoded(p, 4, CUT, data)
        cuts.append({"partition": p, "offset": CUT, "uri": uri})
    # The first owner of 40 published it before: that row's file is there already.
    publish(store, "w", 1, spec, outputs, OLD_FIRST, 40, SpecPartitionState(
        closed=[row("a", 0, 2)]), SetSketches)  # fmt: skip
    call = PipelineBuildRequest.from_json({
        "pipeline": "w", "incarnation": 1, "generation": 1, "first_slot": NEW_FIRST,
        "partitions": NEW_COUNT, "epoch": 5, "cuts": cuts,
        "spec_sha256": hashlib.sha256(SPEC.encode()).hexdigest(),
    })  # fmt: skip

    async def get(path: str) -> dict[str, Any]:
        return describe()

    builder = PipelineBuild(get, checkpoints, SetSketches, results=store)
    built = await builder.run(call)
    table = str(tmp_path / table_prefix("w", 1, WINDOWS))
    rows = pd.read_parquet(table)
    assert sorted(zip(rows["host"], rows["n"], strict=True)) == [("a", 2), ("b", 1)]
    assert store.get(windows_key("w", 1, OLD_FIRST, CUT))  # b's, under the cut's name
    # A rerun, and the old owner's own publish of its cut, write nothing new.
    files = {k: store.get(k) for k in store.list_keys("results/")}
    assert await builder.run(call) == built
    cut_state = _state(checkpoints.read_any(cuts[0]["uri"]))
    publish(store, "w", 1, spec, outputs, OLD_FIRST, CUT, cut_state, SetSketches)
    assert {k: store.get(k) for k in store.list_keys("results/")} == files
    # c's window [2m, 3m) is final at the carried watermark 3m10s: closed at the build, in
    # the new partition's checkpoint; a's [3m, 4m) stays open.
    states = [_state(checkpoints.read_any(b.uri)) for b in built]
    closed = [(r["key"], r["n"]) for s in states for r in s.closed]
    assert closed == [("c", 4)]
    assert [k for s in states for k in s.values] == [("a", 3 * MINUTE)]
    assert {s.basis_us for s in states} == {3 * MINUTE + 40 * US_PER_S}
