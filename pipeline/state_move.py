"""The state move of a rescale: every new partition's starting state, built from the old
partitions' checkpoint states at their cuts (docs/pipeline.md "Rescaling").

Each key goes to the new partition its new routing names; a key found in two old partitions
(possible only with a transform that rewrites keys) is merged, lower old partition first.
Then the key limit applies as it does to a batch (`state.merge_batch` into an empty state):
at most ``max_keys`` keys, admitted in order of (first offset, key), and the rest come back
as dead-letter rows for the caller to write, never dropped. `move_states` does it in this
process; `move_on_spark` does the same on a Spark Connect session, the rows shuffled by new
partition, for states too large for one process.

Invariant: every key of the old states lands in exactly one new partition, in its state or
in its dead-letter rows, with the aggregates it had; both functions give the same result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipeline.aggregate import key_state_of_row
from pipeline.state import (
    MAX_KEYS_PER_PARTITION_DEFAULT,
    KeyState,
    PartitionState,
    merge,
    merge_batch,
)
from shared.routing import Routing

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["MOVE_ROWS_PER_RELATION_MAX", "MovedState", "move_on_spark", "move_states"]

# Rows per local relation sent to Spark: bounds one gRPC message (about 80 bytes a row);
# larger inputs go as several relations, unioned.
MOVE_ROWS_PER_RELATION_MAX = 200_000
_STATE_FIELDS = ("count", "sum", "min", "max", "last", "last_offset", "first_offset")


@dataclass(frozen=True, slots=True, kw_only=True)
class MovedState:
    """A new partition's starting state and the keys the key limit refused."""

    state: PartitionState
    dead: dict[str, KeyState]


def _check(new: Routing, max_keys: int) -> None:
    if not new.by_key_groups:
        raise ValueError("a state move builds a key-group generation (generation >= 1)")
    if max_keys <= 0:
        raise ValueError(f"max_keys must be positive, got {max_keys}")


def move_states(
    old: Mapping[int, Mapping[str, KeyState]],
    new: Routing,
    max_keys: int = MAX_KEYS_PER_PARTITION_DEFAULT,
) -> dict[int, MovedState]:
    """Every new partition (0 .. new.partitions - 1) -> its starting state, in this process."""
    _check(new, max_keys)
    routed: dict[int, PartitionState] = {q: {} for q in range(new.partitions)}
    for p in sorted(old):
        for key, st in old[p].items():
            into = routed[new.partition_for(key)]
            prev = into.get(key)
            into[key] = st if prev is None else merge(prev, st)
    out: dict[int, MovedState] = {}
    for q, rows in routed.items():
        state, dead = merge_batch({}, rows, max_keys)
        out[q] = MovedState(state=state, dead=dead)
    return out


def state_table(old: Mapping[int, Mapping[str, KeyState]], new: Routing) -> pa.Table:
    """The old states as rows (old partition, new partition, key, aggregates); the new
    partition is computed here, by the one routing function, so Spark needs no copy of it."""
    items = [(p, key, st) for p in sorted(old) for key, st in sorted(old[p].items())]
    columns: dict[str, pa.Array] = {
        "old_partition": pa.array([p for p, _, _ in items], pa.int32()),
        "partition": pa.array([new.partition_for(k) for _, k, _ in items], pa.int32()),
        "key": pa.array([k for _, k, _ in items], pa.string()),
    }
    for name in _STATE_FIELDS:
        kind = pa.int64() if name in ("count", "last_offset", "first_offset") else pa.float64()
        columns[name] = pa.array([getattr(st, name) for _, _, st in items], kind)
    return pa.table(columns)


def _relation(spark: SparkSession, table: pa.Table) -> DataFrame:
    frames = [
        spark.createDataFrame(table.slice(start, MOVE_ROWS_PER_RELATION_MAX))
        for start in range(0, table.num_rows, MOVE_ROWS_PER_RELATION_MAX)
    ]
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def move_on_spark(
    spark: SparkSession,
    old: Mapping[int, Mapping[str, KeyState]],
    new: Routing,
    max_keys: int = MAX_KEYS_PER_PARTITION_DEFAULT,
) -> dict[int, MovedState]:
    """`move_states` as one Spark job: rows repartitioned by new partition, merged per
    (new partition, key), ranked per new partition by (first offset, key) for the limit."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    _check(new, max_keys)
    out = {q: MovedState(state={}, dead={}) for q in range(new.partitions)}
    table = state_table(old, new)
    if table.num_rows == 0:
        return out
    # The later record wins `last`; on equal offsets the lower old partition, as in
    # `move_states` (merge keeps its first argument on a tie).
    later = F.struct(F.col("last_offset"), -F.col("old_partition"))
    merged = (
        _relation(spark, table)
        .repartition(new.partitions, "partition")
        .groupBy("partition", "key")
        .agg(
            F.sum("count").alias("count"),
            F.sum("sum").alias("sum"),
            F.min("min").alias("min"),
            F.max("max").alias("max"),
            F.max_by("last", later).alias("last"),
            F.max("last_offset").alias("last_offset"),
            F.min("first_offset").alias("first_offset"),
        )
    )
    order = Window.partitionBy("partition").orderBy("first_offset", "key")
    ranked = merged.withColumn("admitted", F.row_number().over(order) <= F.lit(max_keys))
    rows: list[dict[str, Any]] = ranked.toArrow().to_pylist()
    for row in rows:
        st = key_state_of_row(row)
        moved = out[int(row["partition"])]
        (moved.state if row["admitted"] else moved.dead)[str(row["key"])] = st
    return out
