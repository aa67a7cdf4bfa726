"""Records of a recorded pipeline into its source log: typed by its spec, routed by its key.

Owns how a producer's rows (JSON objects, one per record) become the pipeline's segments.
Invariant: every row is checked against the spec's schema before anything is appended, so
a bad row (a missing key, a value of the wrong type) refuses the whole call with the row and
column named and appends nothing; rows are routed by their key's text (`key_text`) over the
partitions of the pipeline's newest routing generation (`shared.routing`, as `default` routes
its keys), order kept within a partition. A partition sealed by a rescale sends the rows not
yet appended to the generation the pipeline's description names next, each row landing once.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from pipeline.records import jsonl_values
from pipeline.source import (
    SEALS_FOLLOWED_MAX,
    SEGMENT_RECORDS_MAX,
    SourceInputError,
    SourceSealed,
)
from pipeline.spec.run import PipelineInfo, PipelineRun
from pipeline.store import ObjectStore, StoreError
from shared.errors import RippleError, UnavailableError
from shared.spec.ddl import Column, TypeKind

__all__ = ["ROWS_PER_CALL_MAX", "RowError", "SpecProducer", "key_text", "load_rows"]

ROWS_PER_CALL_MAX = 1_000_000  # one produce call's rows, held in memory at once


def key_text(key: Any) -> str:
    """The text a key is routed by: its column value's `str`, as every producer routes it (a
    null key, which only a transform can yield, routes as the empty text)."""
    return "" if key is None else str(key)


def _converter(column: Column) -> Callable[[Any], Any]:
    """A JSON value as the column's Python value (pyarrow then checks its type and range)."""
    kind = column.type.kind
    if kind is TypeKind.DECIMAL:
        return lambda v: None if v is None else decimal.Decimal(str(v))
    if kind is TypeKind.TIMESTAMP:
        return lambda v: v if not isinstance(v, str) else _instant(v)
    if kind is TypeKind.DATE:
        return lambda v: v if not isinstance(v, str) else datetime.date.fromisoformat(v)
    return lambda v: v


def _instant(text: str) -> datetime.datetime:
    value = datetime.datetime.fromisoformat(text)
    # An instant without a zone is read as UTC (Spark's TIMESTAMP is an instant).
    return value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)


class RowError(SourceInputError):
    """A row the spec's schema refuses: its index in the call and the column at fault."""

    def __init__(self, row: int, column: str | None, problem: object) -> None:
        where = f"row {row}" if column is None else f"row {row}, column {column!r}"
        super().__init__(f"{where}: {problem}")
        self.row = row
        self.column = column


class SpecProducer:
    """Appends a recorded pipeline's rows to its source log, routed by its newest generation.

    `describe` reads the pipeline's description again (the coordinator's); a producer given
    one follows a rescale: an append that meets a sealed partition re-reads it and routes the
    rows not yet appended by the newer generation, as `source.Producer` does for `default`.
    """

    def __init__(
        self,
        store: ObjectStore,
        info: PipelineInfo,
        describe: Callable[[], PipelineInfo] | None = None,
    ) -> None:
        self.store = store
        self.describe = describe
        self._use(info)

    def _use(self, info: PipelineInfo) -> None:
        self.run = PipelineRun(info, store=self.store)
        self.info = info
        columns = self.run.spec.schema.columns
        self._converters = {c.name: _converter(c) for c in columns}
        self._record_schema = pa.schema(list(self.run.schema)[:-1])  # all but `offset`

    def table(self, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
        """`rows` as the spec's typed columns; SourceInputError names the first bad row."""
        if len(rows) > ROWS_PER_CALL_MAX:
            raise SourceInputError(f"{len(rows)} rows exceed ROWS_PER_CALL_MAX={ROWS_PER_CALL_MAX}")
        key = self.run.spec.key
        names = set(self._converters)
        convs = list(self._converters.items())
        typed: list[dict[str, Any]] = []
        for i, row in enumerate(rows):
            unknown = sorted(set(row) - names)
            if unknown:
                raise RowError(i, unknown[0], f"{unknown} are not columns of the spec's schema")
            if row.get(key) is None:
                raise RowError(i, key, "the key column is missing or null")
            typed.append({n: _converted(i, n, conv, row.get(n)) for n, conv in convs})
        try:
            return pa.Table.from_pylist(typed, schema=self._record_schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            # pyarrow names the value, not the row: find it, one value at a time.
            for i, row in enumerate(typed):
                for field in self._record_schema:
                    try:
                        pa.array([row[field.name]], type=field.type)
                    except (pa.ArrowException, TypeError, ValueError, OverflowError) as one:
                        raise RowError(i, field.name, one) from None
            raise SourceInputError(str(exc)) from None

    def produce(self, rows: Sequence[Mapping[str, Any]]) -> dict[int, int]:
        """Append `rows`; returns, per partition number (of any generation the call wrote
        to: numbers are never reused), the first offset they were given. Each row lands once,
        below a cut or after it; rows a spec update's new schema refuses raise RowError, the
        rows before them appended."""
        table = self.table(rows)
        pending = list(range(len(rows)))
        firsts: dict[int, int] = {}
        for _ in range(SEALS_FOLLOWED_MAX + 1):
            try:
                self._append_all(table, pending, firsts)
                return firsts
            except _Rerouted as rerouted:
                schema = self._record_schema
                self._follow(rerouted.sealed)
                pending = rerouted.remaining
                if self._record_schema != schema:
                    table = self.table(rows)  # typed again under the newer spec
        raise StoreError(f"followed {SEALS_FOLLOWED_MAX} seals in one call; giving up")

    def _append_all(self, table: pa.Table, pending: list[int], firsts: dict[int, int]) -> None:
        routing = self.info.routing
        keys = table.column(self.run.spec.key).to_pylist()
        grouped: dict[int, list[int]] = {}
        for i in pending:
            p = self.info.first_slot + routing.partition_for(key_text(keys[i]))
            grouped.setdefault(p, []).append(i)
        order = sorted(grouped)
        for n, p in enumerate(order):
            chosen = grouped[p]
            for start in range(0, len(chosen), SEGMENT_RECORDS_MAX):
                part = table.take(pa.array(chosen[start : start + SEGMENT_RECORDS_MAX], pa.int64()))
                try:
                    first = self.run.log.append_table(p, part)
                except SourceSealed as sealed:
                    rest = chosen[start:] + [i for q in order[n + 1 :] for i in grouped[q]]
                    raise _Rerouted(sealed, sorted(rest)) from sealed
                firsts.setdefault(p, first)

    def _follow(self, sealed: SourceSealed) -> None:
        """Route by the generation that sealed a partition, as the pipeline's description
        now says it; UnavailableError (retry the call) while it does not say it yet."""
        if self.describe is None:
            raise UnavailableError(f"{sealed}; this producer reads no pipeline description")
        info = self.describe()
        if (info.name, info.incarnation) != (self.info.name, self.info.incarnation):
            raise RippleError(
                f"pipeline {self.info.name} incarnation {self.info.incarnation} is gone",
                code="conflict",
            )
        if info.generation < sealed.routing.generation:
            raise UnavailableError(
                f"{sealed}; the pipeline's description does not show generation "
                f"{sealed.routing.generation} yet"
            )
        self._use(info)


class _Rerouted(Exception):
    """Inside `SpecProducer.produce`: a seal stopped the appends; these rows are still to go."""

    def __init__(self, sealed: SourceSealed, remaining: list[int]) -> None:
        super().__init__(str(sealed))
        self.sealed = sealed
        self.remaining = remaining


def _converted(row: int, column: str, conv: Callable[[Any], Any], value: Any) -> Any:
    try:
        return conv(value)
    except decimal.InvalidOperation:
        raise RowError(row, column, f"{value!r} is not a decimal number") from None
    except (ValueError, TypeError) as exc:
        raise RowError(row, column, exc) from None


def load_rows(path: str) -> Iterator[dict[str, Any]]:
    """JSON objects, one per line, from `path`; blank lines skipped."""
    for where, obj in jsonl_values(path):
        if not isinstance(obj, dict):
            raise SourceInputError(f"{where}: a record is a JSON object")
        yield obj
