"""A spec run as one Spark batch job (the equality oracle), and micro-batch by micro-batch.

Owns both evaluations of a spec over rows the caller holds (a pyarrow table of the record's
columns and `offset`). Invariant: `batch_job` computes each output with Spark's own aggregate
over all the rows in one groupBy (count, sum, min, max, min_by/max_by on the offset, an HLL
sketch's estimate; a mean as that sum over that count), independently of the merge code;
`Incremental` aggregates each batch on Spark, merges the partial states, and must give the
same outputs, exactly, for any split of the rows into batches. Across rescales and spec
updates, `generations_job` is the oracle of a pipeline's every generation: each output of the
newest spec over the rows of the generations since it last started empty
(`rescale_build.carried_outputs`), every key of any generation present. `windowed_job` is
the oracle of a windowed spec over one partition's rows: the lateness rule by Spark's own
window function over the whole offset order, the windows by Spark's `window()`, so neither
shares code with the worker's (pipeline/spec/windows.py). `windowed_generations_job` is that
oracle across rescales: each generation's partitions' lateness by their own offset order
from the basis carried in, the basis carried into generation g + 1 the max over generation
g's final bases (every partition's: the carried one and its rows' event times), and a key's
windows final at the watermark of the partition it routes to in the last generation.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipeline.source import generation_base
from pipeline.spec.aggregations import (
    KeyState,
    Output,
    SketchOps,
    finals,
    merge_states,
    outputs_of,
)
from pipeline.spec.frames import spec_rows
from pipeline.spec.produce import key_text
from pipeline.spec.rescale_build import carried_outputs
from pipeline.spec.run import arrow_schema, generation_log
from pipeline.spec.sketches import SparkSketches, canonical
from pipeline.store import ObjectStore
from shared.routing import Routing
from shared.spec.model import AggFn, AggregationSpec, PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import SparkSession

__all__ = [
    "Generation",
    "Incremental",
    "Outputs",
    "WindowedOutputs",
    "batch_job",
    "batch_partials",
    "generations_job",
    "output_starts",
    "windowed_generations_job",
    "windowed_job",
]

OFFSET = "offset"
Outputs = dict[Any, dict[str, Any]]  # key -> output name -> value


def _whole(out: Output) -> list[SparkColumn]:
    """The output over all the rows at once, as Spark computes it (mean: its sum and count)."""
    from pyspark.sql import functions as F

    fn, col, alias = out.spec.fn, out.spec.column, out.part
    if fn is AggFn.COUNT:
        return [F.count(F.lit(1) if col is None else F.col(col)).alias(alias("v"))]
    assert col is not None
    by_fn = {
        AggFn.SUM: F.sum(col),
        AggFn.MIN: F.min(col),
        AggFn.MAX: F.max(col),
        AggFn.FIRST: F.min_by(col, OFFSET),
        AggFn.LAST: F.max_by(col, OFFSET),
        AggFn.APPROX_DISTINCT: F.hll_sketch_estimate(
            canonical(F.hll_sketch_agg(col, out.spec.lg_config_k))
        ),
    }
    if fn is AggFn.MEAN:
        return [F.sum(col).alias(alias("sum")), F.count(col).alias(alias("n"))]
    return [by_fn[fn].alias(alias("v"))]


def _value(out: Output, row: dict[str, Any]) -> Any:
    if out.spec.fn is AggFn.MEAN:
        return out.mean(row[out.part("sum")], int(row[out.part("n")]))
    return row[out.part("v")]


def batch_job(spark: SparkSession, spec: PipelineSpec, table: pa.Table) -> Outputs:
    """The spec over every row of `table` as one Spark batch job: the equality oracle."""
    if table.num_rows == 0:
        return {}
    outputs = outputs_of(spec)
    df = spec_rows(spark, spec, table)
    columns = [c for out in outputs for c in _whole(out)]
    rows: list[dict[str, Any]] = df.groupBy(spec.key).agg(*columns).toArrow().to_pylist()
    return {r[spec.key]: {o.spec.name: _value(o, r) for o in outputs} for r in rows}


def batch_partials(spark: SparkSession, spec: PipelineSpec, table: pa.Table) -> dict[Any, KeyState]:
    """One micro-batch's partial state per key: one Spark job."""
    outputs = outputs_of(spec)
    df = spec_rows(spark, spec, table)
    columns = [c for out in outputs for c in out.partials()]
    rows: list[dict[str, Any]] = df.groupBy(spec.key).agg(*columns).toArrow().to_pylist()
    return {r[spec.key]: {o.spec.name: o.state_of_row(r) for o in outputs} for r in rows}


class Incremental:
    """The spec applied batch by batch, its state merged as a worker's would be."""

    def __init__(
        self, spark: SparkSession, spec: PipelineSpec, sketches: SketchOps | None = None
    ) -> None:
        self.spark = spark
        self.spec = spec
        self.outputs = outputs_of(spec)
        self.sketches = sketches if sketches is not None else SparkSketches(spark)
        self.state: dict[Any, KeyState] = {}

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        batch = batch_partials(self.spark, self.spec, table)
        self.state = merge_states(self.outputs, self.state, batch, self.sketches)

    def results(self) -> Outputs:
        return finals(self.outputs, self.state, self.sketches)


@dataclass(frozen=True, slots=True, kw_only=True)
class Generation:
    """One routing generation of a recorded pipeline: its partitions' numbers and the spec
    its rows ran under."""

    generation: int
    first_slot: int
    partitions: int
    spec: PipelineSpec


def output_starts(specs: Sequence[PipelineSpec]) -> dict[str, int]:
    """Each output of the last spec -> the first of `specs` (one per generation, in order)
    whose rows it is computed over: it started empty at that generation's cut and was
    carried by every spec update since."""
    last = len(specs) - 1
    starts: dict[str, int] = {}
    for agg in specs[last].aggregations:
        i = last
        while i > 0 and agg.name in carried_outputs(specs[i - 1], specs[i]):
            i -= 1
        starts[agg.name] = i
    return starts


def empty_output(agg: AggregationSpec) -> Any:
    """An output over no rows: what a key with none since its output started reads as."""
    return 0 if agg.fn in (AggFn.COUNT, AggFn.APPROX_DISTINCT) else None


def generation_rows(store: ObjectStore, gen: Generation) -> pa.Table:
    """Every row of one generation (its spec's columns and `offset`)."""
    schema = arrow_schema(gen.spec.schema)
    log = generation_log(store, gen.generation, gen.first_slot, gen.partitions, schema)
    tables = [log.read_segment(s) for s in log.generation_segments(gen.generation)]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def in_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """An earlier version's rows in a later version's columns: one it lacks or types another
    way is null (no output carried across the update reads such a column: a carried output's
    input has one type in both, and a transform carries nothing across a schema change)."""
    columns = [
        table.column(f.name)
        if f.name in table.column_names and table.schema.field(f.name).type == f.type
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def generations_job(
    spark: SparkSession, store: ObjectStore, generations: Sequence[Generation]
) -> Outputs:
    """The oracle of a pipeline over every generation (in order): each output of the newest
    spec by one Spark batch job over the rows since it started, every key that any
    generation's rows have, an output with no rows since it started read as over none."""
    if not generations:
        return {}
    specs = [g.spec for g in generations]
    newest = specs[-1]
    tables = [generation_rows(store, g) for g in generations]
    keys: set[Any] = set()
    for spec, table in zip(specs, tables, strict=True):
        if table.num_rows:
            found = spec_rows(spark, spec, table).select(spec.key).distinct()
            keys.update(found.toArrow().column(0).to_pylist())
    starts = output_starts(specs)
    schema = arrow_schema(newest.schema)
    computed: dict[int, Outputs] = {}
    for start in sorted(set(starts.values())):
        chosen = tuple(a for a in newest.aggregations if starts[a.name] == start)
        since = pa.concat_tables([in_columns(t, schema) for t in tables[start:]])
        computed[start] = batch_job(spark, dataclasses.replace(newest, aggregations=chosen), since)
    return {
        key: {
            a.name: computed[starts[a.name]].get(key, {}).get(a.name, empty_output(a))
            for a in newest.aggregations
        }
        for key in keys
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowedOutputs:
    """A windowed spec over one partition's rows: its final windows and its open ones (rows
    of {key, window_start, window_end, outputs...}, by window start then key), and the
    offsets of its late records."""

    closed: list[dict[str, Any]]
    open: list[dict[str, Any]]
    late: list[int]


def windowed_job(spark: SparkSession, spec: PipelineSpec, table: pa.Table) -> WindowedOutputs:
    """The windowed spec over every row of one partition (`table`) as one Spark batch job."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = spec.window
    assert window is not None
    outputs = outputs_of(spec)
    df = spec_rows(spark, spec, table)
    event = F.col(window.column)
    earlier = F.max(event).over(Window.orderBy(OFFSET).rowsBetween(Window.unboundedPreceding, -1))
    lateness = F.expr(f"INTERVAL {window.lateness_s} SECONDS")
    marked = df.withColumn(
        "__late", event.isNull() | F.coalesce(event < earlier - lateness, F.lit(False))
    )
    late = marked.where("__late").select(OFFSET).toArrow().column(0).to_pylist()
    on_time = marked.where(~F.col("__late"))
    top = df.agg(F.max(event).alias("m")).toArrow().to_pylist()[0]["m"]
    spans = F.window(event, f"{window.size_s} seconds", f"{window.slide_s} seconds")
    columns = [c for out in outputs for c in _whole(out)]
    rows = (
        on_time.groupBy(spec.key, spans.alias("w"))
        .agg(*columns)
        .select(spec.key, "w.start", "w.end", *_part_names(outputs))
        .toArrow()
        .to_pylist()
    )
    watermark = None if top is None else top - datetime.timedelta(seconds=window.lateness_s)
    closed: list[dict[str, Any]] = []
    still_open: list[dict[str, Any]] = []
    for r in rows:
        row = {
            "key": r[spec.key],
            "window_start": r["start"],
            "window_end": r["end"],
            **{o.spec.name: _value(o, r) for o in outputs},
        }
        final = watermark is not None and r["end"] <= watermark
        (closed if final else still_open).append(row)
    for found in (closed, still_open):
        found.sort(key=lambda r: (r["window_start"], r["key"] is None, str(r["key"])))
    return WindowedOutputs(closed=closed, open=still_open, late=sorted(late))


def _partition_rows(store: ObjectStore, gen: Generation) -> dict[int, pa.Table]:
    """Each partition number of `gen` -> its rows (the spec's columns and `offset`)."""
    schema = arrow_schema(gen.spec.schema)
    log = generation_log(store, gen.generation, gen.first_slot, gen.partitions, schema)
    base = generation_base(gen.generation)
    out: dict[int, pa.Table] = {}
    for n in range(gen.first_slot, gen.first_slot + gen.partitions):
        tables = [log.read_segment(s) for s in log.segments(n, base)]
        out[n] = pa.concat_tables(tables) if tables else schema.empty_table()
    return out


def windowed_generations_job(
    spark: SparkSession, store: ObjectStore, generations: Sequence[Generation]
) -> tuple[WindowedOutputs, list[tuple[int, int]]]:
    """A windowed pipeline over every generation (in order, one spec throughout): its final
    and open windows over every partition (its `late` empty), and its late records as
    (partition, offset)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spec = generations[-1].spec
    window = spec.window
    if window is None or any(g.spec.version != spec.version for g in generations):
        raise ValueError("the windowed oracle runs one windowed spec over every generation")
    outputs = outputs_of(spec)
    lateness = datetime.timedelta(seconds=window.lateness_s)
    carried: datetime.datetime | None = None
    late: list[tuple[int, int]] = []
    on_time = None
    tops: dict[int, datetime.datetime | None] = {}
    for gen in generations:
        tops = {}
        for n, table in _partition_rows(store, gen).items():
            df = spec_rows(spark, spec, table)
            event = F.col(window.column)
            earlier = F.max(event).over(
                Window.orderBy(OFFSET).rowsBetween(Window.unboundedPreceding, -1)
            )
            basis = earlier if carried is None else F.greatest(earlier, F.lit(carried))
            marked = df.withColumn(
                "__late",
                event.isNull() | F.coalesce(event < basis - F.lit(lateness), F.lit(False)),
            )
            late += [(n, o) for o in marked.where("__late").toArrow().column(OFFSET).to_pylist()]
            kept = marked.where(~F.col("__late")).drop("__late")
            on_time = kept if on_time is None else on_time.unionByName(kept)
            top = df.agg(F.max(event).alias("m")).toArrow().to_pylist()[0]["m"]
            tops[n] = max((t for t in (top, carried) if t is not None), default=None)
        carried = max((t for t in tops.values() if t is not None), default=carried)
    assert on_time is not None  # at least one generation, each with at least one partition
    spans = F.window(F.col(window.column), f"{window.size_s} seconds", f"{window.slide_s} seconds")
    rows = (
        on_time.groupBy(spec.key, spans.alias("w"))
        .agg(*[c for out in outputs for c in _whole(out)])
        .select(spec.key, "w.start", "w.end", *_part_names(outputs))
        .toArrow()
        .to_pylist()
    )
    last = generations[-1]
    routing = Routing(generation=last.generation, partitions=last.partitions)
    closed: list[dict[str, Any]] = []
    still_open: list[dict[str, Any]] = []
    for r in rows:
        key = r[spec.key]
        n = last.first_slot + routing.partition_for(key_text(key))
        top = tops.get(n) if n in tops else carried
        row = {
            "key": key,
            "window_start": r["start"],
            "window_end": r["end"],
            **{o.spec.name: _value(o, r) for o in outputs},
        }
        final = top is not None and r["end"] <= top - lateness
        (closed if final else still_open).append(row)
    for found in (closed, still_open):
        found.sort(key=lambda r: (r["window_start"], r["key"] is None, str(r["key"])))
    return WindowedOutputs(closed=closed, open=still_open, late=[]), sorted(late)


def _part_names(outputs: Sequence[Output]) -> list[str]:
    names: list[str] = []
    for o in outputs:
        names += [o.part("sum"), o.part("n")] if o.spec.fn is AggFn.MEAN else [o.part("v")]
    return names
