"""A recorded pipeline's snapshot table, published by real workers on real Spark, read by
plain pandas, DuckDB and `spark.read.parquet` (no Ripple code), equals the spec's batch job.

Three coordinator processes, three `ripple worker` processes, one Spark Connect server, a
local-directory store. Rows go in through the pipeline's producer; once the workers caught
up, each reader's table equals `pipeline.spec.oracle.batch_job` over every row: each key
once, every output exact. Then the owner of some partitions is SIGSTOPped until they moved,
more rows go in, and it is resumed: the old owner, whose epoch is fenced, publishes nothing
over the new owner's tables, which stay equal to the batch job. `ripple results` shows the
tables' directory and their file count.
"""

from __future__ import annotations

import datetime
import math
import signal
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from pipeline.spec.oracle import batch_job
from pipeline.spec.produce import SpecProducer
from pipeline.spec.results import SNAPSHOT, table_prefix
from pipeline.spec.run import PipelineInfo
from testkit.cli import ripple
from testkit.pipeline_rig import SETTINGS, PipelineRig
from testkit.wait import wait_until
from tests.integration.test_pipeline_spec_spark import spec_text
from tests.integration.test_pipeline_specs import active, admin, owners, rows
from tests.integration.test_pipelines_api import speaks_pipelines

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

PARTITIONS = 3
PUBLISHED_TIMEOUT_S = 60.0
Table = dict[Any, dict[str, Any]]


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path}/store", spark_remote).running()


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def plain(value: Any) -> Any:
    """One value as every reader's type of it compares: a decimal's text, an instant in UTC
    microseconds (pandas, DuckDB and Spark each have their own timestamp type)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item") and not isinstance(value, Decimal):  # a numpy scalar
        value = value.item()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return round(value.timestamp() * 1_000_000)
    return value


def keyed(records: list[dict[str, Any]], key: str) -> Table:
    out: Table = {}
    for r in records:
        k = r[key]
        assert k not in out, f"key {k!r} twice in the table"
        out[k] = {n: plain(v) for n, v in r.items() if n != key}
    return out


def oracle(spark: SparkSession, producer: SpecProducer) -> Table:
    log = producer.run.log
    table = pa.concat_tables([log.read_segment(s) for s in log.all_segments()])
    want = batch_job(spark, producer.run.spec, table)
    return {k: {n: plain(v) for n, v in outs.items()} for k, outs in want.items()}


def snapshot_dir(rig: PipelineRig, info: PipelineInfo) -> str:
    path = rig.store.local_path(table_prefix(info.name, info.incarnation, SNAPSHOT).rstrip("/"))
    assert path is not None
    return path


def read_pandas(directory: str, key: str) -> Table:
    import pandas as pd

    return keyed(pd.read_parquet(directory).to_dict("records"), key)


def read_duckdb(directory: str, key: str) -> Table:
    import duckdb

    relation = duckdb.sql(f"SELECT * FROM read_parquet('{directory}/*.parquet')")
    names = relation.columns
    # Instants as UTC microseconds: DuckDB's own tz-aware values need pytz.
    cast = ", ".join(
        f'epoch_us("{n}") AS "{n}"' if str(t).startswith("TIMESTAMP") else f'"{n}"'
        for n, t in zip(names, relation.types, strict=True)
    )
    got = duckdb.sql(f"SELECT {cast} FROM read_parquet('{directory}/*.parquet')").fetchall()
    return keyed([dict(zip(names, r, strict=True)) for r in got], key)


def read_spark(spark: SparkSession, directory: str, key: str) -> Table:
    return keyed(spark.read.parquet(directory).toArrow().to_pylist(), key)


def published(rig: PipelineRig, info: PipelineInfo, want: Table, key: str) -> Table | None:
    """The snapshot as pandas reads it once it equals `want` (None until then)."""
    directory = snapshot_dir(rig, info)
    if not Path(directory).is_dir():
        return None
    got = read_pandas(directory, key)
    return got if got == want else None


def test_the_snapshot_table_equals_the_batch_job_in_every_reader(
    rig: PipelineRig, spark: SparkSession
) -> None:
    speaks_pipelines(rig.cluster)
    body = {"name": "orders", "spec_text": spec_text(), "partitions": PARTITIONS}
    assert admin(rig, "POST", "/v1/pipelines", body).status == 202
    info = PipelineInfo.from_describe(wait_until(lambda: active(rig, "orders"), "active", 60))
    key = "customer"
    producer = SpecProducer(rig.store, info)
    # The cluster's minimum size; slots: a worker with a profile runs recorded pipelines.
    for wid in ("w1", "w2", "w3"):
        rig.start_worker(wid, "--slots", "8")
    rig.wait_ready()
    producer.produce(rows(seed=1))
    want = oracle(spark, producer)
    assert len(want) > 10
    wait_until(lambda: published(rig, info, want, key), "snapshot published", PUBLISHED_TIMEOUT_S)
    directory = snapshot_dir(rig, info)
    assert read_duckdb(directory, key) == want
    assert read_spark(spark, directory, key) == want

    # The owner of the first partition stopped until its partitions moved, then resumed.
    held = wait_until(lambda: owners(rig, info) or None, "owners", 60)
    victim = held[info.first_slot][0]
    survivors = {"w1", "w2", "w3"} - {victim}
    rig.workers[victim].signal(signal.SIGSTOP)
    try:
        wait_until(
            lambda: (
                len(o := owners(rig, info)) == PARTITIONS
                and {w for w, _ in o.values()} <= survivors
            ),
            f"{victim}'s partitions moved while it is stopped",
            SETTINGS["heartbeat_timeout_s"] + 60,
        )
        producer.produce(rows(seed=2))
        want = oracle(spark, producer)
        wait_until(lambda: published(rig, info, want, key), "moved, published", 180)
    finally:
        rig.workers[victim].signal(signal.SIGCONT)
    wait_until(
        lambda: (rig.health(victim) or {}).get("incarnation", 0) >= 2,
        f"{victim} re-registers",
        60,
    )
    # The resumed old owner changed nothing: the tables are still the batch job's.
    assert read_pandas(directory, key) == want
    assert read_duckdb(directory, key) == want
    assert read_spark(spark, directory, key) == want

    shown = ripple(
        "results",
        "orders",
        "--coordinator",
        rig.cluster.specs[0].url,
        "--store",
        rig.store_uri,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"file://{directory}/" in shown.stdout
    assert f"({PARTITIONS} files, {len(want)} rows)" in shown.stdout
    assert f"read_parquet('{directory}/*.parquet')" in shown.stdout
