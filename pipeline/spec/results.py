"""A recorded pipeline's results in its store as plain Parquet tables: where they live, their
columns, and how one accepted checkpoint is published into them.

Layout (docs/pipeline.md, "Results"), per pipeline incarnation, one directory per table::

    results/{name}/i{incarnation}/windows/p{partition:05d}-o{offset:020d}.parquet   appended
    results/{name}/i{incarnation}/snapshot/p{partition:05d}.parquet                 replaced

`windows` holds final windows (the `closed` rows of a checkpoint, appended once), `snapshot`
the current outputs of every key (one file per partition, each key in exactly one). Readers
need no Ripple code: every visible `.parquet` file is complete and committed, and the only
other names in a table directory start with "." (the store's temp and version files), which
Spark, pyarrow and DuckDB's `*.parquet` glob all skip.

Invariant: only a checkpoint the coordinator ACCEPTED is published (a fenced owner's never
is), and publishing one is idempotent: a windows file's name is its partition and its
checkpoint's offset, and every accepted checkpoint of a partition at one offset holds the
same state (replay is deterministic, a new owner starts from the loaded one), so a second
publish of it, by a late old owner or by the new owner's first checkpoint at the offset it
loaded, finds the name taken and writes nothing (create-only). A snapshot file is replaced
only by a newer offset's (`put_newer`), so an old owner resumed after a pause never puts an
older snapshot over a newer one.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.spec.aggregations import Output, SketchOps, finals
from pipeline.spec.partition_state import SpecPartitionState
from pipeline.spec.run import arrow_schema
from pipeline.spec.windows import ClosedRow
from shared.spec.ddl import Column, ColumnType, Schema, TypeKind
from shared.spec.model import AggFn, PipelineSpec

__all__ = [
    "RESULTS_PREFIX",
    "SNAPSHOT",
    "WINDOWS",
    "Published",
    "ResultsStore",
    "output_type",
    "publish",
    "results_prefix",
    "snapshot_key",
    "snapshot_schema",
    "table_prefix",
    "windows_key",
    "windows_schema",
]

RESULTS_PREFIX = "results"
WINDOWS = "windows"
SNAPSHOT = "snapshot"
WINDOW_START, WINDOW_END = "window_start", "window_end"
# The Spark types of the outputs Spark's own aggregates give (sum widens a decimal by 10
# digits, avg by 4 digits of precision and scale), capped at Spark's widest decimal.
DECIMAL_PRECISION_MAX = 38
SUM_EXTRA_PRECISION = 10
MEAN_EXTRA_DIGITS = 4


class ResultsStore(Protocol):
    """What publishing needs of a store (pipeline.store's LocalStore, S3Store, CountedStore):
    create-only puts for the appended table, version-checked replaces for the snapshot."""

    def put_if_absent(self, key: str, data: bytes) -> bool: ...

    def put_newer(self, key: str, data: bytes, version: int) -> bool: ...


def results_prefix(name: str, incarnation: int) -> str:
    """Every object of one incarnation of a pipeline's results (a purge deletes them)."""
    return f"{RESULTS_PREFIX}/{name}/i{incarnation}/"


def table_prefix(name: str, incarnation: int, table: str) -> str:
    """The directory a reader points at: one table's files and nothing else."""
    return f"{results_prefix(name, incarnation)}{table}/"


def windows_key(name: str, incarnation: int, partition: int, offset: int) -> str:
    return f"{table_prefix(name, incarnation, WINDOWS)}p{partition:05d}-o{offset:020d}.parquet"


def snapshot_key(name: str, incarnation: int, partition: int) -> str:
    return f"{table_prefix(name, incarnation, SNAPSHOT)}p{partition:05d}.parquet"


def _arrow(t: ColumnType) -> pa.DataType:
    # The source log's mapping of a DDL type (one column's schema), so the two never differ.
    return arrow_schema(Schema(columns=(Column(name="c", type=t),))).field("c").type


def output_type(out: Output) -> ColumnType:
    """The Spark type of an output as `finals` gives it (Spark's type for the same agg)."""
    fn, column = out.spec.fn, out.column_type
    if fn in (AggFn.COUNT, AggFn.APPROX_DISTINCT):
        return ColumnType(kind=TypeKind.BIGINT)
    assert column is not None  # every other fn reads a column
    if fn is AggFn.SUM:
        if column.kind is TypeKind.DECIMAL:
            precision = min(DECIMAL_PRECISION_MAX, column.precision + SUM_EXTRA_PRECISION)
            return ColumnType(kind=TypeKind.DECIMAL, precision=precision, scale=column.scale)
        return ColumnType(kind=TypeKind.BIGINT)
    if fn is AggFn.MEAN:
        if column.kind is TypeKind.DECIMAL:
            return ColumnType(
                kind=TypeKind.DECIMAL,
                precision=min(DECIMAL_PRECISION_MAX, column.precision + MEAN_EXTRA_DIGITS),
                scale=min(DECIMAL_PRECISION_MAX, column.scale + MEAN_EXTRA_DIGITS),
            )
        return ColumnType(kind=TypeKind.DOUBLE)
    return column  # min, max, first, last: the column's own


def _key_field(spec: PipelineSpec) -> pa.Field:
    column = spec.aggregated.column(spec.key)
    assert column is not None  # the parser requires the key among the aggregated columns
    return pa.field(spec.key, _arrow(column.type))


def _output_fields(outputs: Sequence[Output]) -> list[pa.Field]:
    return [pa.field(o.spec.name, _arrow(output_type(o))) for o in outputs]


def snapshot_schema(spec: PipelineSpec, outputs: Sequence[Output]) -> pa.Schema:
    """The snapshot table's columns: the key, then every output in the spec's order."""
    return pa.schema([_key_field(spec), *_output_fields(outputs)])


def windows_schema(spec: PipelineSpec, outputs: Sequence[Output]) -> pa.Schema:
    """The windows table's columns: the key, the window's bounds, then every output."""
    bound = _arrow(ColumnType(kind=TypeKind.TIMESTAMP))
    return pa.schema(
        [
            _key_field(spec),
            pa.field(WINDOW_START, bound, nullable=False),
            pa.field(WINDOW_END, bound, nullable=False),
            *_output_fields(outputs),
        ]
    )


def _parquet(rows: list[dict[str, Any]], schema: pa.Schema) -> bytes:
    # Deterministic for the same rows: a republish writes the same bytes.
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink)
    return sink.getvalue()


def _keyed(spec: PipelineSpec, rows: Sequence[ClosedRow]) -> list[dict[str, Any]]:
    """Closed rows as the table's: their "key" under the spec's key column's name."""
    return [{spec.key: r["key"], **{k: v for k, v in r.items() if k != "key"}} for r in rows]


def _sorted(keys: Any) -> list[Any]:
    return sorted(keys, key=lambda k: (k is None, "" if k is None else k))


@dataclass(frozen=True, slots=True)
class Published:
    """What one publish wrote: each count is 0 when the file was there already (or newer)."""

    windows_rows: int
    snapshot_rows: int


def publish(
    store: ResultsStore,
    name: str,
    incarnation: int,
    spec: PipelineSpec,
    outputs: Sequence[Output],
    partition: int,
    offset: int,
    state: SpecPartitionState,
    sketches: Callable[[], SketchOps],
) -> Published:
    """Blocking: publish the state of one ACCEPTED checkpoint (`partition` at `offset`): its
    closed windows appended (create-only, so once), each in the file named after the first
    checkpoint that held it (`SpecPartitionState.named`; the unnamed ones: this one), so a
    row a new owner carried from the checkpoint it loaded lands in the file its first owner
    wrote or would have; its keys' outputs as the partition's snapshot unless a newer
    offset's is there (a windowed spec has none: its keys' rows are open windows, and its
    results are the final ones). `sketches` is asked only when an output is a sketch."""
    windows_rows = 0
    schema = windows_schema(spec, outputs)
    for at, rows in state.segments(offset):
        if store.put_if_absent(
            windows_key(name, incarnation, partition, at), _parquet(_keyed(spec, rows), schema)
        ):
            windows_rows += len(rows)
    if spec.window is not None:
        return Published(windows_rows=windows_rows, snapshot_rows=0)
    needs_spark = any(o.spec.fn is AggFn.APPROX_DISTINCT for o in outputs) and state.values
    outs = finals(outputs, state.values, sketches() if needs_spark else _NO_SKETCHES)
    rows = [{spec.key: key, **outs[key]} for key in _sorted(outs)]
    data = _parquet(rows, snapshot_schema(spec, outputs))
    written = store.put_newer(snapshot_key(name, incarnation, partition), data, offset)
    return Published(windows_rows=windows_rows, snapshot_rows=len(rows) if written else 0)


class _NoSketches:
    """A spec without sketches: `finals` never asks."""

    def union(self, pairs: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        raise AssertionError("no sketch to merge")

    def estimate(self, sketches: Sequence[bytes]) -> list[int]:
        raise AssertionError("no sketch to estimate")


_NO_SKETCHES = _NoSketches()
