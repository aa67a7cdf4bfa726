"""A recorded pipeline as a worker runs it: its spec, its partitions' numbers, its source log
and its micro-batch job on Spark; and the registry that finds the pipeline of a partition.

Owns the worker's side of a recorded pipeline. Invariant: a partition number at or above
SLOT_BASE belongs to exactly one (pipeline, incarnation, routing generation) for all time (the
coordinator never reuses one, and a rescale gives its new generation fresh numbers), so the
run found for it once stays right for as long as the worker holds the partition, and a
rescale's old and new generations are two runs that coexist on a worker; its state is
computed only under the spec the coordinator recorded (parsed here from the recorded text,
never from anything the worker imports), and a checkpoint is loaded only if it names that
spec's version.

Store layout: a pipeline's partition n keeps the layout `default`'s use, under its own number
(`source/p{n}/`, `checkpoints/p{n}/`, `deadletter/p{n}/`; a later routing generation g's
source under `source/g{g}/p{n}/`, its partitions numbered afresh): numbers are never reused,
so no two pipelines, incarnations of one name, or generations of one pipeline share an object.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.source import SourceLog
from pipeline.spec.aggregations import KeyState, SketchOps, finals, outputs_of
from pipeline.spec.frames import rows_ddl, transformed
from pipeline.spec.partition_state import (
    KEYS_UNLIMITED,
    SpecCheckpoint,
    SpecPartitionState,
    encode_spec_checkpoint,
)
from pipeline.spec.ranges import GenerationRange, ranges_of
from pipeline.spec.windows import (
    CARRIED,
    EVENT_US,
    LATE,
    WINDOW_START,
    mark_late,
    window_rows,
    windowed,
)
from pipeline.store import ObjectStore
from shared.errors import ClientError, UnavailableError
from shared.routing import SLOT_BASE, Routing
from shared.spec.ddl import ColumnType, Schema, TypeKind
from shared.spec.parse import parse_spec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "PARTITIONS_PER_JOB_MAX",
    "BatchPartials",
    "GenerationRange",
    "PipelineInfo",
    "PipelineRun",
    "PipelineRuns",
    "arrow_schema",
    "dead_letter_bytes",
    "generation_log",
    "ranges_of",
]

log = logging.getLogger(__name__)

# One Spark job reads each partition's rows as its own branch (the transform cannot carry the
# partition through): past this many branches a batch is split into several jobs.
PARTITIONS_PER_JOB_MAX = 32
# Recorded pipelines one worker keeps runs of (each holds a parsed spec and a source log).
RUNS_MAX = 256
# How often a worker reads the pipelines' states (pause and resume reach it within this, plus
# the answering node's lag): one small read per worker per interval, on any node.
STATES_REFRESH_S = 1.0
# Pipelines described, past the listing, to find an old generation's number when the listing
# does not show past ranges (the candidates are those whose current first slot is above it).
DESCRIBES_MAX = 8
FIRST_OFFSET = "__first_offset"
PARTITION = "__partition"


def _arrow_type(t: ColumnType) -> pa.DataType:
    kinds: dict[TypeKind, pa.DataType] = {
        TypeKind.STRING: pa.string(),
        TypeKind.BOOLEAN: pa.bool_(),
        TypeKind.INT: pa.int32(),
        TypeKind.BIGINT: pa.int64(),
        TypeKind.DOUBLE: pa.float64(),
        TypeKind.DATE: pa.date32(),
        # Spark's TIMESTAMP is an instant: microseconds, UTC.
        TypeKind.TIMESTAMP: pa.timestamp("us", tz="UTC"),
    }
    if t.kind is TypeKind.DECIMAL:
        return pa.decimal128(t.precision, t.scale)
    return kinds[t.kind]


def arrow_schema(schema: Schema) -> pa.Schema:
    """The source log's columns for a spec's records: its schema, then `offset`."""
    fields = [pa.field(c.name, _arrow_type(c.type)) for c in schema.columns]
    return pa.schema([*fields, pa.field("offset", pa.int64(), nullable=False)])


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineInfo:
    """What the coordinator recorded of a pipeline (its describe), as the worker needs it:
    one routing generation of it."""

    name: str
    incarnation: int
    first_slot: int
    partitions: int
    spec_text: str
    max_keys_per_partition: int
    # Its routing generation: 0 until a rescale (or a spec update) starts a new one, whose
    # partitions have fresh numbers (first_slot up) and offsets from generation_base(g).
    generation: int = 0

    @property
    def routing(self) -> Routing:
        """Where its records go: this generation's partition (0 .. partitions - 1) of a key."""
        return Routing(generation=self.generation, partitions=self.partitions)

    def contains(self, partition: int) -> bool:
        return self.first_slot <= partition < self.first_slot + self.partitions

    @classmethod
    def from_describe(
        cls, body: Mapping[str, Any], chosen: GenerationRange | None = None
    ) -> PipelineInfo:
        """The describe's current generation, or its range `chosen` (of `ranges_of`), whose
        spec is the range's own text when given, else the describe's: a checkpoint of another
        version is refused on load (`PipelineRun.problem`), never merged."""
        spec_text = str(body["spec_text"])
        first_slot, partitions = int(body["first_slot"]), int(body["partitions"])
        generation = int(body.get("routing_generation", 0))
        if chosen is not None:
            first_slot, partitions, generation = (
                chosen.first_slot,
                chosen.partitions,
                chosen.generation,
            )
            spec_text = chosen.spec_text if chosen.spec_text is not None else spec_text
        return cls(
            name=str(body["name"]),
            incarnation=int(body["incarnation"]),
            first_slot=first_slot,
            partitions=partitions,
            spec_text=spec_text,
            max_keys_per_partition=int(body["settings"]["max_keys_per_partition"]),
            generation=generation,
        )

    @classmethod
    def newest(cls, body: Mapping[str, Any]) -> PipelineInfo:
        """The describe's newest generation a producer may write to: a rescale's reserved
        numbers from its start (their logs begin at generation_base(g), where the build's
        checkpoints start, so rows appended before the partitions are hosted are processed
        after), else the current generation."""
        current = int(body.get("routing_generation", 0))
        ahead = [r for r in ranges_of(body) if r.generation > current]
        if not ahead:
            return cls.from_describe(body)
        return cls.from_describe(body, max(ahead, key=lambda r: r.generation))


def generation_log(
    store: ObjectStore, generation: int, first_slot: int, partitions: int, schema: pa.Schema
) -> SourceLog:
    """The source log of one generation of a recorded pipeline: its partitions first_slot ..
    first_slot + partitions - 1, offsets from generation_base(generation). A SourceLog has one
    base for every generation it knows, while each generation of a recorded pipeline has
    fresh numbers: so each generation is read through a log of its own, in which the earlier
    generations are placeholders of one partition that name no object (their numbers are
    other ones) and are never read. Its `followed_by(next routing)` seals this generation."""
    return SourceLog(store, [1] * generation + [partitions], base=first_slot, schema=schema)


@dataclass(slots=True)
class BatchPartials:
    """One partition's micro-batch as its Spark job left it: each key's partial state and
    first offset (a windowed spec's keys are (key, window start)); and for a windowed spec,
    its late rows (the aggregated columns and offset, by offset) and its largest event time."""

    values: dict[Any, KeyState] = field(default_factory=dict)
    firsts: dict[Any, int] = field(default_factory=dict)
    late: pa.Table | None = None
    max_us: int | None = None


class PipelineRun:
    """One recorded pipeline on this worker: everything its partitions are processed with."""

    def __init__(self, info: PipelineInfo, store: ObjectStore) -> None:
        self.info = info
        self.spec = parse_spec(info.spec_text)
        self.version = self.spec.version
        self.outputs = outputs_of(self.spec)
        self.schema = arrow_schema(self.spec.schema)
        self.log = generation_log(
            store, info.generation, info.first_slot, info.partitions, self.schema
        )
        # The pipeline's own key limit; 0 in its settings: none (its state is on disk).
        self.max_keys = info.max_keys_per_partition or KEYS_UNLIMITED
        # Not ACTIVE as last read (paused, dropping, gone): its partitions are held, their
        # offsets and checkpoints kept, and nothing is processed.
        self.paused = False

    @property
    def name(self) -> str:
        return self.info.name

    def encode(self, partition: int, epoch: int, offset: int, state: SpecPartitionState) -> bytes:
        return encode_spec_checkpoint(partition, epoch, offset, self.version, self.outputs, state)

    def problem(self, ck: SpecCheckpoint) -> str | None:
        """Why `ck` cannot be this pipeline's state, if it cannot."""
        if ck.spec_version != self.version:
            return f"the checkpoint is of spec {ck.spec_version}, the pipeline runs {self.version}"
        names = {o.spec.name for o in self.outputs}
        for values in ck.state.values.values():
            if set(values) != names:
                return f"the checkpoint's outputs {sorted(values)} are not the spec's"
            break
        return None

    def read(self, partition: int, from_offset: int, rows_max: int) -> tuple[pa.Table, int]:
        """Blocking: the partition's records from `from_offset`, whole segments only, at most
        about `rows_max` rows (one segment at least); and the offset after them."""
        tables: list[pa.Table] = []
        end, rows = from_offset, 0
        for segment in self.log.segments(partition, from_offset):
            if tables and rows + segment.count > rows_max:
                break
            table = self.log.read_segment(segment)
            if segment.first_offset < from_offset:
                table = table.slice(from_offset - segment.first_offset)
            tables.append(table)
            rows += table.num_rows
            end = segment.end_offset
        if not tables:
            return self.schema.empty_table(), from_offset
        return pa.concat_tables(tables), end

    def partials(
        self,
        spark: SparkSession,
        tables: Mapping[int, pa.Table],
        carried: Mapping[int, int | None] | None = None,
    ) -> dict[int, BatchPartials]:
        """Blocking: each partition's batch partials, one Spark job per PARTITIONS_PER_JOB_MAX
        partitions; `carried` is each partition's watermark basis before it (windowed)."""
        out: dict[int, BatchPartials] = {}
        parts = sorted(p for p, t in tables.items() if t.num_rows)
        for start in range(0, len(parts), PARTITIONS_PER_JOB_MAX):
            chunk = {p: tables[p] for p in parts[start : start + PARTITIONS_PER_JOB_MAX]}
            out.update(self._job(spark, chunk, carried or {}))
        return out

    def _job(
        self,
        spark: SparkSession,
        tables: Mapping[int, pa.Table],
        carried: Mapping[int, int | None],
    ) -> dict[int, BatchPartials]:
        from pyspark.sql import functions as F

        # One local relation for every partition's rows; each partition's branch filters its
        # rows, runs the transform, and names its partition again after it.
        rows = pa.concat_tables(
            [
                t.append_column(PARTITION, pa.array([p] * t.num_rows, pa.int64()))
                for p, t in tables.items()
            ]
        )
        df = spark.createDataFrame(rows, schema=f"{rows_ddl(self.spec.schema)}, {PARTITION} BIGINT")
        window = self.spec.window
        branches: list[DataFrame] = []
        for p in tables:
            branch = df.where(F.col(PARTITION) == F.lit(p)).drop(PARTITION)
            branch = transformed(branch, self.spec).withColumn(PARTITION, F.lit(p))
            if window is not None:
                branch = branch.withColumn(CARRIED, F.lit(carried.get(p)).cast("bigint"))
            branches.append(branch)
        union = branches[0]
        for b in branches[1:]:
            union = union.unionByName(b)
        out: dict[int, BatchPartials] = {p: BatchPartials() for p in tables}
        key, by = self.spec.key, [PARTITION, self.spec.key]
        if window is not None:
            union = mark_late(union, window, PARTITION)
            self._late(union, out)
            union = windowed(union.where(~F.col(LATE)), window)
            by.append(WINDOW_START)
        columns = [c for o in self.outputs for c in o.partials()]
        if window is not None:
            # The batch's largest event time is an on-time record's (a late one is below an
            # earlier record's): read per group here rather than by a job of its own.
            columns.append(F.max(EVENT_US).alias(EVENT_US))
        result = (
            union.groupBy(*by).agg(*columns, F.min("offset").alias(FIRST_OFFSET)).toArrow()
        ).to_pylist()
        for r in result:
            part = out[int(r[PARTITION])]
            k = r[key] if window is None else (r[key], int(r[WINDOW_START]))
            part.values[k] = {o.spec.name: o.state_of_row(r) for o in self.outputs}
            part.firsts[k] = int(r[FIRST_OFFSET])
            if window is not None:
                top = int(r[EVENT_US])
                part.max_us = top if part.max_us is None else max(part.max_us, top)
        return {p: b for p, b in out.items() if b.values or b.late is not None}

    def _late(self, marked: DataFrame, out: dict[int, BatchPartials]) -> None:
        """Each partition's late rows into `out`."""
        from pyspark.sql import functions as F

        late = marked.where(F.col(LATE)).drop(LATE, CARRIED, EVENT_US).toArrow()
        for p, part in out.items():
            mine = late.filter(pc.equal(late.column(PARTITION), p)).drop_columns([PARTITION])
            if mine.num_rows:
                part.late = mine.sort_by("offset")

    def results(
        self, state: SpecPartitionState, sketches: SketchOps, keys: list[Any] | None = None
    ) -> dict[Any, dict[str, Any]]:
        """The outputs of `keys` (None: every key) as the spec names them; a windowed spec's
        are each key's open windows, {"windows": [{window_start, window_end, outputs...}]}."""
        window = self.spec.window
        if window is not None:
            wanted = None if keys is None else set(keys)
            open_rows = {k: v for k, v in state.values.items() if wanted is None or k[0] in wanted}
            out: dict[Any, dict[str, Any]] = {}
            for row in window_rows(self.outputs, window, open_rows, sketches):
                out.setdefault(row.pop("key"), {"windows": []})["windows"].append(row)
            return out
        chosen = (
            state.values
            if keys is None
            else {k: state.values[k] for k in keys if k in state.values}
        )
        return finals(self.outputs, chosen, sketches)

    def dead_letter_bytes(self, partition: int, rows: Mapping[Any, KeyState]) -> bytes:
        return dead_letter_bytes(partition, rows)

    @staticmethod
    def dead_letter_bytes_late(rows: pa.Table) -> bytes:
        """A windowed spec's late records as Parquet: the aggregated columns and offset."""
        sink = io.BytesIO()
        pq.write_table(rows, sink)
        return sink.getvalue()


def dead_letter_bytes(partition: int, rows: Mapping[Any, KeyState]) -> bytes:
    """A recorded pipeline's dead letters: each refused key and its partial state's outputs'
    repr (the raw records stay in the source log, to be processed again)."""
    keys = sorted(rows, key=lambda k: (k is None, "" if k is None else str(k)))
    table = pa.table(
        {
            "partition": pa.array([partition] * len(keys), pa.int64()),
            "key": pa.array([None if k is None else str(k) for k in keys], pa.string()),
            "state": pa.array([repr(rows[k]) for k in keys], pa.string()),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


class PipelineRuns:
    """The recorded pipelines this worker has partitions of, one run per (pipeline,
    incarnation, routing generation), found by partition number: during a rescale the old
    generation's partitions (held until the new table replaces them) and the new one's are
    two runs side by side."""

    def __init__(
        self,
        get: Callable[[str], Awaitable[dict[str, Any]]],
        store: ObjectStore,
    ) -> None:
        self._get = get  # a GET of the coordinator's API
        self._store = store
        self._runs: dict[tuple[str, int, int], PipelineRun] = {}
        self._refreshed_s = float("-inf")

    async def refresh(self, now_s: float) -> None:
        """Read which pipelines are ACTIVE, at most every STATES_REFRESH_S; a failed read
        keeps the states last read (the next round asks again). Every generation's run of a
        pipeline follows its pause."""
        if not self._runs or now_s - self._refreshed_s < STATES_REFRESH_S:
            return
        self._refreshed_s = now_s
        try:
            listing = await self._get("/v1/pipelines")
        except ClientError as exc:
            log.warning("reading the pipelines' states failed: %s", exc)
            return
        states = {(str(p["name"]), int(p["incarnation"])): p["state"] for p in listing["pipelines"]}
        for run in self._runs.values():
            paused = states.get((run.name, run.info.incarnation)) != "active"
            if paused != run.paused:
                log.info("pipeline %s %s", run.name, "paused" if paused else "resumed")
            run.paused = paused

    def cached(self, partition: int) -> PipelineRun | None:
        for run in self._runs.values():
            if run.info.contains(partition):
                return run
        return None

    async def of(self, partition: int) -> PipelineRun | None:
        """The run of `partition`'s pipeline generation; None for `default`'s numbers.
        Raises UnavailableError (the leader retries its call) when no recorded pipeline has
        it."""
        if partition < SLOT_BASE:
            return None
        run = self.cached(partition)
        if run is not None:
            return run
        listing = await self._get("/v1/pipelines")
        rows = [p for p in listing["pipelines"] if int(p.get("first_slot") or 0) >= SLOT_BASE]
        named = [p for p in rows if any(r.contains(partition) for r in ranges_of(p))]
        if not named:
            # A listing without past ranges: an old generation's numbers are below its
            # pipeline's current first slot (numbers only grow).
            above = sorted((p for p in rows if int(p["first_slot"]) > partition), key=_first_slot)
            named = above[:DESCRIBES_MAX]
        for p in named:
            body = await self._get(f"/v1/pipelines/{p['name']}")
            chosen = next((r for r in ranges_of(body) if r.contains(partition)), None)
            if chosen is not None:
                return self._made(body, chosen)
        raise UnavailableError(
            f"partition {partition} is no recorded pipeline's", code="unavailable"
        )

    def _made(self, body: Mapping[str, Any], chosen: GenerationRange) -> PipelineRun:
        info = PipelineInfo.from_describe(body, chosen)
        # Host calls of one pipeline's partitions arrive together and all miss the cache: the
        # first to come back makes the run, the others share it, so that one object carries
        # the pipeline's pause to every partition.
        key = (info.name, info.incarnation, info.generation)
        made = self._runs.get(key)
        if made is not None:
            return made
        if len(self._runs) >= RUNS_MAX:
            # A held partition keeps its run (its runtime holds it); only the lookup is lost.
            self._runs.pop(next(iter(self._runs)))
        run = PipelineRun(info, self._store)
        run.paused = body["state"] != "active"
        if run.paused:
            log.info("pipeline %s paused", run.name)  # as a change read later says
        self._runs[key] = run
        return run


def _first_slot(row: Mapping[str, Any]) -> int:
    return int(row["first_slot"])
