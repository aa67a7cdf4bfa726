"""A recorded pipeline rescaled twice, the first time with a spec update, equals its batch job
over every generation, exactly (HLL distinct counts and means included).

The worker's side is played here with its own functions on Spark: each partition's rows
merged in micro-batches (`batch_partials`, `merge_spec_batch`), its state checkpointed at the
cut, the old partitions sealed, the new ones built (`rescale_build.build`), producers
following the seals, and the new partitions merging on from their generation's base. The
oracle is `generations_job`, which computes every output from the source log alone.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pipeline.source import generation_base
from pipeline.spec.aggregations import finals, outputs_of
from pipeline.spec.oracle import Generation, batch_partials, generations_job
from pipeline.spec.partition_state import (
    SpecPartitionState,
    decode_spec_checkpoint,
    merge_spec_batch,
)
from pipeline.spec.produce import SpecProducer
from pipeline.spec.rescale_build import build
from pipeline.spec.run import PipelineInfo, PipelineRun
from pipeline.spec.sketches import SparkSketches
from pipeline.store import LocalStore
from shared.routing import SLOT_BASE
from shared.spec.parse import parse_spec
from tests.unit.test_spec_rescale_source import OLD

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

BIG = 1_000_000
OLD_SPEC = """
[schema]
ddl = "k STRING, v BIGINT, tag STRING"
key = "k"
[[aggregations]]
name = "n"
fn = "count"
[[aggregations]]
name = "total"
fn = "sum"
column = "v"
[[aggregations]]
name = "tags"
fn = "approx_distinct"
column = "tag"
[[aggregations]]
name = "avg"
fn = "mean"
column = "v"
[[aggregations]]
name = "head"
fn = "first"
column = "v"
[[aggregations]]
name = "tail"
fn = "last"
column = "tag"
"""
# The update: a new column; `avg` dropped, `head` redefined, two new outputs.
NEW_SPEC = (
    OLD_SPEC.replace("v BIGINT, tag STRING", "v BIGINT, tag STRING, w BIGINT")
    .replace('name = "avg"\nfn = "mean"\ncolumn = "v"', 'name = "wavg"\nfn = "mean"\ncolumn = "w"')
    .replace('fn = "first"\ncolumn = "v"', 'fn = "first"\ncolumn = "w"')
    + '[[aggregations]]\nname = "wtags"\nfn = "approx_distinct"\ncolumn = "w"\n'
)


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def rows(rng: random.Random, n: int, keys: range, with_w: bool) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        row: dict[str, Any] = {
            "k": f"c{rng.choice(keys)}",
            "v": None if rng.random() < 0.05 else rng.randint(-1000, 1000),
            "tag": f"t{rng.randrange(40)}",
        }
        if with_w:
            row["w"] = rng.randint(0, 9)
        out.append(row)
    return out


def processed(
    spark: SparkSession, run: PipelineRun, p: int, state: SpecPartitionState, start: int
) -> tuple[SpecPartitionState, int]:
    """Partition `p`'s rows from `start` merged into `state` in two or three micro-batches,
    as a worker merges them; and the offset after them."""
    table, end = run.read(p, start, BIG)
    sketches = SparkSketches(spark)
    step = max(1, table.num_rows // 2 - 1)
    for at in range(0, table.num_rows, step):
        batch = table.slice(at, step)
        firsts: dict[Any, int] = {}
        for key, offset in zip(
            batch.column(run.spec.key).to_pylist(), batch.column("offset").to_pylist(), strict=True
        ):
            firsts.setdefault(key, offset)
        values = batch_partials(spark, run.spec, batch)
        state, dead = merge_spec_batch(run.outputs, state, values, firsts, BIG, sketches)
        assert not dead
    return state, end


def cut_and_build(
    spark: SparkSession,
    store: LocalStore,
    old: PipelineInfo,
    new: PipelineInfo,
    states: dict[int, SpecPartitionState],
) -> dict[int, SpecPartitionState]:
    """Checkpoint each old partition at its cut, seal it, and build the new partitions."""
    run = PipelineRun(old, store)
    sealing = run.log.followed_by(new.routing)
    cuts: dict[int, bytes] = {}
    for p, state in states.items():
        cut = sealing.seal(p, old.generation)
        cuts[p] = run.encode(p, 3, cut, state)
    built = build(
        run.spec,
        parse_spec(new.spec_text),
        cuts,
        new.routing,
        new.first_slot,
        4,
        BIG,
        SparkSketches(spark),
    )
    return {q: decode_spec_checkpoint(b.checkpoint).state for q, b in built.items()}


def test_two_rescales_one_with_a_spec_update_equal_the_batch_job(
    spark: SparkSession, tmp_path: Path
) -> None:
    rng = random.Random(41)
    store = LocalStore(str(tmp_path))
    gen0 = dataclasses.replace(OLD, first_slot=SLOT_BASE + 8, spec_text=OLD_SPEC)
    gen1 = dataclasses.replace(gen0, first_slot=SLOT_BASE + 30, partitions=4, generation=1)
    gen1 = dataclasses.replace(gen1, spec_text=NEW_SPEC)
    gen2 = dataclasses.replace(gen1, first_slot=SLOT_BASE + 50, partitions=2, generation=2)
    described = [gen1]
    producer = SpecProducer(store, gen0, lambda: described[-1])

    producer.produce(rows(rng, 400, range(30), with_w=False))
    run0 = PipelineRun(gen0, store)
    states = {
        p: processed(spark, run0, p, SpecPartitionState(), 0)[0]
        for p in range(gen0.first_slot, gen0.first_slot + gen0.partitions)
    }
    states = cut_and_build(spark, store, gen0, gen1, states)
    # Keys c0 .. c4 have no row after the first cut: their new outputs are over no rows. The
    # first call meets the seals and follows them; rows with the new column come after.
    producer.produce(rows(rng, 30, range(5, 36), with_w=False))
    assert producer.info == gen1
    producer.produce(rows(rng, 270, range(5, 36), with_w=True))
    run1 = PipelineRun(gen1, store)
    states = {p: processed(spark, run1, p, s, generation_base(1))[0] for p, s in states.items()}
    described.append(gen2)
    states = cut_and_build(spark, store, gen1, gen2, states)
    producer.produce(rows(rng, 200, range(10, 40), with_w=True))
    run2 = PipelineRun(gen2, store)
    states = {p: processed(spark, run2, p, s, generation_base(2))[0] for p, s in states.items()}

    outputs = outputs_of(run2.spec)
    got: dict[Any, dict[str, Any]] = {}
    for state in states.values():
        got.update(finals(outputs, state.values, SparkSketches(spark)))
    generations = [
        Generation(
            generation=i.generation,
            first_slot=i.first_slot,
            partitions=i.partitions,
            spec=parse_spec(i.spec_text),
        )
        for i in (gen0, gen1, gen2)
    ]
    expected = generations_job(spark, store, generations)
    assert got == expected
    assert len(got) == 40
    assert got["c0"]["wtags"] == 0 and got["c0"]["head"] is None and got["c0"]["n"] > 0
    assert got["c20"]["wtags"] > 0 and got["c20"]["tags"] > 0
