"""Event-time windows of a recorded pipeline: which records are late, which windows a record
is in, and which windows are final.

Owns the window rule, on Spark (`mark_late`, `windowed`) and in Python (`close_windows`).
Invariant: every decision is a function of the partition's offsets, never of the batch cut or
the clock. The WATERMARK BASIS before the record at offset i is the largest event time of the
partition's records at offsets below i (and the basis carried in from before the first of
them); the record is late iff its event time is null or below that basis minus the allowed
lateness. A late record goes to the dead letters and never into state. After a batch, a window
whose end is at or below the basis minus the lateness is final: its outputs are appended to
`closed` and its rows leave the state. No record that is not late can land in a final window
(its time is at or above the watermark, which is at or above every final window's end), so a
window's final outputs are the same however the input was cut into batches.

Times are microseconds since the epoch (UTC), as Spark's `unix_micros` gives them; a window
is [start, start + size) with start a multiple of the slide, as Spark's `window()` aligns it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.spec.aggregations import KeyState, Output, SketchOps, finals
from shared.spec.model import WindowSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "CARRIED",
    "EVENT_US",
    "LATE",
    "US_PER_S",
    "WINDOW_START",
    "ClosedRow",
    "close_windows",
    "mark_late",
    "utc",
    "window_rows",
    "windowed",
]

US_PER_S = 1_000_000
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
# Columns the batch job adds (dunder names: a spec's output or column never starts so).
CARRIED = "__carried_us"  # the partition's basis before the batch: a literal per partition
EVENT_US = "__event_us"
LATE = "__late"
WINDOW_START = "__window_start_us"

ClosedRow = dict[str, Any]  # {"key", "window_start", "window_end", <each output>: value}


def utc(us: int) -> datetime.datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    return EPOCH + datetime.timedelta(microseconds=us)


def mark_late(df: DataFrame, window: WindowSpec, partition: str) -> DataFrame:
    """`df` (one or more partitions' rows, `partition` naming each, `CARRIED` its carried
    basis or null) with `EVENT_US` and `LATE`: the rule over offset order, per partition."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    before = (
        Window.partitionBy(partition).orderBy("offset").rowsBetween(Window.unboundedPreceding, -1)
    )
    event = F.unix_micros(F.col(window.column))
    # greatest() skips nulls: no earlier record and nothing carried leave the basis null.
    basis = F.greatest(F.max(event).over(before), F.col(CARRIED))
    late = event.isNull() | F.coalesce(
        event < basis - F.lit(window.lateness_s * US_PER_S), F.lit(False)
    )
    return df.withColumn(EVENT_US, event).withColumn(LATE, late)


def windowed(df: DataFrame, window: WindowSpec) -> DataFrame:
    """Each row of `df` (with `EVENT_US`, none null) once per window it is in, its start in
    `WINDOW_START`: the size / slide windows whose start is at most its time, latest first."""
    from pyspark.sql import functions as F

    slide = window.slide_s * US_PER_S
    count = window.size_s // window.slide_s
    # pmod is exact on longs (a double's floor could misplace a time next to a boundary).
    last = F.col(EVENT_US) - F.pmod(F.col(EVENT_US), F.lit(slide))
    steps = F.explode(F.sequence(F.lit(0), F.lit(count - 1)))
    return (
        df.withColumn("__step", steps)
        .withColumn(WINDOW_START, last - F.col("__step") * F.lit(slide))
        .drop("__step")
    )


def window_rows(
    outputs: Sequence[Output],
    window: WindowSpec,
    values: Mapping[tuple[Any, int], KeyState],
    sketches: SketchOps,
) -> list[ClosedRow]:
    """Rows of (key, window start) -> outputs, by window start then key."""
    size = window.size_s * US_PER_S
    results = finals(outputs, values, sketches)
    rows = [
        {"key": key, "window_start": utc(start), "window_end": utc(start + size), **out}
        for (key, start), out in results.items()
    ]
    rows.sort(key=lambda r: (r["window_start"], r["key"] is None, str(r["key"])))
    return rows


def close_windows(
    outputs: Sequence[Output],
    window: WindowSpec,
    values: Mapping[Any, KeyState],
    basis_us: int | None,
    sketches: SketchOps,
) -> tuple[list[ClosedRow], set[Any]]:
    """The final windows of `values` (keyed (key, window start)) at `basis_us`: their rows
    (by window start, then key) and the state keys to evict."""
    if basis_us is None:
        return [], set()
    watermark = basis_us - window.lateness_s * US_PER_S
    size = window.size_s * US_PER_S
    final = {k: v for k, v in values.items() if k[1] + size <= watermark}
    if not final:
        return [], set()
    return window_rows(outputs, window, final, sketches), set(final)
