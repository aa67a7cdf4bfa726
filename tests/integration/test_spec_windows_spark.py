"""Event-time windows on real Spark: a windowed spec over out-of-order event times.

First the worker's batch job (`PipelineRun.partials` and `merge`) over one partition's rows
cut into micro-batches two different ways: both close the same windows with the same
outputs, keep the same open windows, and find the same late records, and all three equal
`pipeline.spec.oracle.windowed_job` (the spec in one Spark job, by Spark's own window
function and `window()`). Then a pipeline with that spec run by a real `ripple worker`: each
partition's final windows (from the results windows table) and open windows (from its state
route) equal the oracle over that partition's rows, the late records are exactly the ones in
its `-late` dead-letter objects, and `GET .../keys/{key}` answers a key's open windows.
"""

from __future__ import annotations

import datetime
import io
import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.spec.oracle import windowed_job
from pipeline.spec.partition_state import SpecPartitionState, merge_spec_batch
from pipeline.spec.produce import SpecProducer
from pipeline.spec.results import windows_key
from pipeline.spec.run import BatchPartials, PipelineInfo, PipelineRun
from pipeline.spec.sketches import SparkSketches
from pipeline.spec.windows import window_rows
from pipeline.store import LocalStore
from shared.checkpoint_ref import checkpoint_key_parts, checkpoints_prefix
from shared.routing import SLOT_BASE
from testkit.cluster import ADMIN
from testkit.http import Reply, call
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.integration.test_pipelines_api import speaks_pipelines

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

SPEC = """
[schema]
ddl = "host STRING, ms BIGINT, at TIMESTAMP"
key = "host"

[window]
column = "at"
size = "1m"
slide = "30s"
lateness = "20s"

[[aggregations]]
name = "n"
fn = "count"

[[aggregations]]
name = "slowest"
fn = "max"
column = "ms"

[[aggregations]]
name = "total_ms"
fn = "sum"
column = "ms"

[[aggregations]]
name = "first_ms"
fn = "first"
column = "ms"

[[aggregations]]
name = "hosts"
fn = "approx_distinct"
column = "host"
"""
ROWS = 600
HOSTS = 5
SEED = 41
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
PARTITIONS = 2
POOL = {"zone": "a"}
CATCH_UP_TIMEOUT_S = 180.0


def events(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Records about 2 s apart in event time, a few seconds out of order, one in five up to
    90 s behind; a few with no event time."""
    out = []
    for i in range(count):
        behind = rng.randint(0, 90) if rng.random() < 0.2 else rng.randint(-3, 3)
        at = START + datetime.timedelta(seconds=2 * i - behind)
        out.append(
            {
                "host": f"h{rng.randrange(HOSTS)}",
                "ms": rng.randrange(1000),
                "at": None if rng.random() < 0.03 else at,
            }
        )
    return out


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def run_of(tmp_path: Path) -> PipelineRun:
    info = PipelineInfo(
        name="w", incarnation=1, first_slot=SLOT_BASE, partitions=1, spec_text=SPEC,
        max_keys_per_partition=0,
    )  # fmt: skip
    return PipelineRun(info, LocalStore(tmp_path))


def fed(
    spark: SparkSession, run: PipelineRun, table: pa.Table, cuts: list[int]
) -> tuple[SpecPartitionState, list[int]]:
    """The partition's state after the worker's batches over `table` cut at `cuts`, and the
    offsets of the late records they found."""
    state, late, sketches = SpecPartitionState(), [], SparkSketches(spark)
    bounds = [0, *cuts, table.num_rows]
    for lo, hi in itertools.pairwise(bounds):
        chunk = table.slice(lo, hi - lo)
        got = run.partials(spark, {SLOT_BASE: chunk}, {SLOT_BASE: state.basis_us})
        part = got.get(SLOT_BASE) or BatchPartials()
        state, dead = merge_spec_batch(
            run.outputs,
            state,
            part.values,
            part.firsts,
            run.max_keys,
            sketches,
            run.spec.window,
            part.max_us,
        )
        assert not dead
        if part.late is not None:
            late += part.late.column("offset").to_pylist()
    return state, late


def open_rows(run: PipelineRun, state: SpecPartitionState, spark: SparkSession) -> list[Any]:
    assert run.spec.window is not None
    return window_rows(run.outputs, run.spec.window, state.values, SparkSketches(spark))


def test_two_cuts_close_the_same_windows_and_equal_the_batch_job(
    tmp_path: Path, spark: SparkSession
) -> None:
    run = run_of(tmp_path)
    rows = events(random.Random(SEED), ROWS)
    table = pa.Table.from_pylist(
        [{**r, "offset": i} for i, r in enumerate(rows)], schema=run.schema
    )
    want = windowed_job(spark, run.spec, table)
    assert want.closed and want.open and want.late  # the input exercises all three
    assert any(r["at"] is None for r in rows) and len(want.late) < ROWS // 2
    one, late_one = fed(spark, run, table, [97, 250, 251, 420])
    two, late_two = fed(spark, run, table, [300])
    assert one.closed == two.closed == want.closed
    assert open_rows(run, one, spark) == open_rows(run, two, spark) == want.open
    assert sorted(late_one) == sorted(late_two) == want.late
    assert one.basis_us == two.basis_us
    # Late records are in no window: every on-time record is counted once per window it is in.
    counted = sum(r["n"] for r in want.closed + want.open)
    assert counted == 2 * (ROWS - len(want.late))


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path}/store", spark_remote).running()


def admin(rig: PipelineRig, method: str, path: str, body: Any = None) -> Reply:
    c = rig.cluster
    return call(method, c.url(c.leader()) + path, body, token=ADMIN)


def described(rig: PipelineRig, name: str) -> dict[str, Any] | None:
    c = rig.cluster
    body: dict[str, Any] = c.get(c.leader(), f"/v1/pipelines/{name}?consistent=true").body
    return body if body["state"] == "active" and body["first_slot"] else None


def held_at_end(rig: PipelineRig, producer: SpecProducer, wid: str) -> bool:
    info, log = producer.info, producer.run.log
    parts = (rig.health(wid) or {}).get("partitions") or {}
    slots = range(info.first_slot, info.first_slot + info.partitions)
    return all(str(n) in parts and parts[str(n)]["offset"] == log.end_offset(n) for n in slots)


def checkpoint_at(rig: PipelineRig, partition: int, offset: int) -> bytes | None:
    for key in rig.store.list_keys(checkpoints_prefix(partition)):
        named = checkpoint_key_parts(key)
        if named is not None and named[2] == offset:
            return rig.store.get(key)
    return None


def late_offsets(rig: PipelineRig, partition: int) -> list[int]:
    offsets: list[int] = []
    for key in rig.store.list_keys(f"deadletter/p{partition:05d}/"):
        assert key.endswith("-late.parquet"), key  # no key limit was reached
        offsets += pq.read_table(io.BytesIO(rig.store.get(key))).column("offset").to_pylist()
    return sorted(offsets)


def published(rig: PipelineRig, info: PipelineInfo, partition: int) -> list[dict[str, Any]]:
    """Partition `partition`'s rows in the results windows table, by window start then key."""
    prefix = windows_key(info.name, info.incarnation, partition, 0).rsplit("-o", 1)[0]
    rows = []
    for key in rig.store.list_keys(prefix):
        for r in pq.read_table(io.BytesIO(rig.store.get(key))).to_pylist():
            rows.append({"key": r.pop("host"), **r})
    return sorted(rows, key=lambda r: (r["window_start"], str(r["key"])))


def from_json(row: dict[str, Any]) -> dict[str, Any]:
    """A window row as the worker's JSON shows it, its bounds parsed back to datetimes."""
    bounds = ("window_start", "window_end")
    return {k: datetime.datetime.fromisoformat(v) if k in bounds else v for k, v in row.items()}


def test_a_worker_closes_the_windows_the_batch_job_closes(
    rig: PipelineRig, spark: SparkSession
) -> None:
    speaks_pipelines(rig.cluster)
    body = {"name": "latency", "spec_text": SPEC, "partitions": PARTITIONS, "pool": POOL}
    made = admin(rig, "POST", "/v1/pipelines", body)
    assert made.status == 202, made
    info = PipelineInfo.from_describe(wait_until(lambda: described(rig, "latency"), "active", 60))
    producer = SpecProducer(rig.store, info)
    rig.start_worker("w1", "--label", "zone=a", "--slots", "8")
    rig.wait_ready()
    rows = events(random.Random(SEED + 1), ROWS)
    for lo in range(0, ROWS, ROWS // 4):  # several segments: several micro-batches
        producer.produce(rows[lo : lo + ROWS // 4])
    wait_until(lambda: held_at_end(rig, producer, "w1"), "latency caught up", CATCH_UP_TIMEOUT_S)
    log, late_seen = producer.run.log, 0
    for n in range(info.first_slot, info.first_slot + info.partitions):
        end = log.end_offset(n)
        # The leader asks for checkpoints every second (the rig's checkpoint_interval_s).
        wait_until(lambda n=n, end=end: checkpoint_at(rig, n, end), f"{n}'s checkpoint", 60)
        table = pa.concat_tables([log.read_segment(s) for s in log.segments(n, 0)])
        want = windowed_job(spark, producer.run.spec, table)
        assert want.closed and want.open, n  # both kinds in every partition
        # The final windows, published once each as their checkpoints are accepted (and
        # trimmed from the state then): the partition's windows files hold all of them.
        wait_until(
            lambda n=n, want=want: published(rig, info, n) == want.closed,
            f"{n}'s final windows published",
            60,
        )
        shown = call("GET", rig.worker_url("w1") + f"/v1/partitions/{n}/state")
        assert shown.status == 200, shown
        got_open = [
            from_json({"key": row["key"], **w})
            for row in shown.body["rows"]
            for w in row["windows"]
        ]
        got_open.sort(key=lambda r: (r["window_start"], str(r["key"])))
        assert got_open == want.open, n
        assert late_offsets(rig, n) == want.late, n
        late_seen += len(want.late)
        key = want.open[0]["key"]
        read = call("GET", rig.worker_url("w1") + f"/v1/partitions/{n}/keys/{key}")
        assert read.status == 200, read
        assert [from_json(w) for w in read.body["windows"]] == [
            {k: v for k, v in r.items() if k != "key"} for r in want.open if r["key"] == key
        ]
    assert late_seen > 0
    assert (rig.health("w1") or {})["stats"]["late_records"] == late_seen
    assert rig.metric("w1", "ripple_worker_late_records_total") == late_seen
