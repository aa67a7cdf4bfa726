"""A windowed pipeline rescaled 3 -> 5 mid-stream on real workers and real Spark, producers
running with out-of-order event times, equal to `windowed_generations_job` window for window.

Three coordinator processes, two `ripple worker` processes, one Spark Connect server, a
local-directory store. `latency` (a tumbling minute per host, 20 s lateness) is created with
3 partitions and fed through the SDK; `POST /v1/pipelines/latency/rescale` to 5 runs while
the SDK keeps producing. Then: the results windows table (every published final window, read
as a plain Parquet directory) equals the oracle's final windows, each once; the owners' open
windows equal its open ones; and the `-late` dead letters hold exactly its late records.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from pipeline.spec.oracle import Generation, WindowedOutputs, windowed_generations_job
from pipeline.spec.produce import SpecProducer
from pipeline.spec.results import WINDOWS, table_prefix
from pipeline.spec.run import PipelineInfo
from pipeline.spec.sdk import PipelineClient
from shared.errors import UnavailableError
from shared.spec.parse import parse_spec
from testkit.http import call
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.integration.test_pipeline_specs import (
    CATCH_UP_TIMEOUT_S,
    POOL,
    active,
    admin,
    caught_up,
    describe,
)
from tests.integration.test_pipelines_api import speaks_pipelines

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

NAME = "latency"
SPEC = """
[schema]
ddl = "host STRING, ms BIGINT, at TIMESTAMP"
key = "host"

[window]
column = "at"
size = "1m"
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
"""
HOSTS = 12
ROWS_PER_BATCH = 150
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
RESCALE_TIMEOUT_S = 240.0
BATCHES_DURING_MAX = 30  # batches produced while the rescale runs, at most
PUBLISHED_TIMEOUT_S = 120.0


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path}/store", spark_remote).running()


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def events(batch: int) -> list[dict[str, Any]]:
    """Batch `batch`'s records: event times about 1 s apart and rising across batches, a
    few seconds out of order, one in six up to 60 s behind (past the lateness: late ones)."""
    rng = random.Random(batch)
    out = []
    for i in range(ROWS_PER_BATCH):
        behind = rng.randint(0, 60) if rng.random() < 1 / 6 else rng.randint(-3, 3)
        at = START + datetime.timedelta(seconds=batch * ROWS_PER_BATCH + i - behind)
        out.append({"host": f"h{rng.randrange(HOSTS)}", "ms": rng.randrange(1000), "at": at})
    return out


def phase(rig: PipelineRig) -> str | None:
    r = describe(rig, NAME).get("rescale")
    return None if r is None else str(r["phase"])


def from_json(row: dict[str, Any]) -> dict[str, Any]:
    bounds = ("window_start", "window_end")
    return {k: datetime.datetime.fromisoformat(v) if k in bounds else v for k, v in row.items()}


def in_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["window_start"], str(r["key"])))


def windows_table(rig: PipelineRig, incarnation: int) -> list[dict[str, Any]]:
    """Every row of the published windows table, read as any Parquet reader reads it."""
    prefix = table_prefix(NAME, incarnation, WINDOWS)
    rows: list[dict[str, Any]] = []
    for key in rig.store.list_keys(prefix):
        if key.endswith(".parquet") and "/." not in key:
            for r in pq.read_table(io.BytesIO(rig.store.get(key))).to_pylist():
                rows.append({"key": r.pop("host"), **r})
    return in_order(rows)


def open_windows(rig: PipelineRig, owned: dict[int, str]) -> list[dict[str, Any]]:
    rows = []
    for n, wid in owned.items():
        r = call("GET", rig.worker_url(wid) + f"/v1/partitions/{n}/state")
        assert r.status == 200, r
        rows += [
            from_json({"key": row["key"], **w}) for row in r.body["rows"] for w in row["windows"]
        ]
    return in_order(rows)


def late_records(rig: PipelineRig, partitions: list[int]) -> list[tuple[int, int]]:
    """(partition, offset) of every record in a `-late` dead letter (a replay by a new owner
    writes one again under its epoch: each counted once)."""
    found: set[tuple[int, int]] = set()
    for n in partitions:
        for key in rig.store.list_keys(f"deadletter/p{n:05d}/"):
            if key.endswith("-late.parquet"):
                table = pq.read_table(io.BytesIO(rig.store.get(key)))
                found.update((n, o) for o in table.column("offset").to_pylist())
    return sorted(found)


def oracle(
    spark: SparkSession, rig: PipelineRig, generations: list[PipelineInfo]
) -> tuple[WindowedOutputs, list[tuple[int, int]]]:
    gens = [
        Generation(generation=i.generation, first_slot=i.first_slot, partitions=i.partitions,
                   spec=parse_spec(i.spec_text))
        for i in generations
    ]  # fmt: skip
    return windowed_generations_job(spark, rig.store, gens)


async def test_a_windowed_pipeline_rescales_mid_stream_and_equals_its_batch_job(
    rig: PipelineRig, spark: SparkSession
) -> None:
    speaks_pipelines(rig.cluster)
    body = {"name": NAME, "spec_text": SPEC, "partitions": 3, "pool": POOL}
    assert admin(rig, "POST", "/v1/pipelines", body).status == 202
    old = PipelineInfo.from_describe(wait_until(lambda: active(rig, NAME), "active", 60))
    for wid in ("w1", "w2"):
        rig.start_worker(wid, "--label", "zone=a", "--slots", "8")
    rig.wait_ready()
    urls = [s.url for s in rig.cluster.specs]
    batch = 0
    async with PipelineClient(urls, NAME, store=rig.store_uri) as sdk:
        for batch in range(3):
            await sdk.produce(iter(events(batch)))
        await asyncio.to_thread(
            wait_until, lambda: caught_up(rig, SpecProducer(rig.store, old)), "caught up",
            CATCH_UP_TIMEOUT_S,
        )  # fmt: skip
        started = await asyncio.to_thread(
            admin, rig, "POST", f"/v1/pipelines/{NAME}/rescale", {"partitions": 5}
        )
        assert started.status == 202, started
        deadline = time.monotonic() + RESCALE_TIMEOUT_S
        during = 0
        while await asyncio.to_thread(phase, rig) != "done":
            assert time.monotonic() < deadline, f"rescale still {phase(rig)}"
            if during >= BATCHES_DURING_MAX:
                await asyncio.sleep(0.5)
                continue
            batch += 1
            try:
                await sdk.produce(iter(events(batch)))
            except UnavailableError:
                await asyncio.sleep(0.5)  # sealed, the new generation not shown yet
            during += 1
        assert during >= 1, "nothing was produced while the rescale ran"
        for _ in range(2):
            batch += 1
            await sdk.produce(iter(events(batch)))
    new = PipelineInfo.from_describe(await asyncio.to_thread(describe, rig, NAME))
    assert (new.partitions, new.generation) == (5, 1)
    owned = await asyncio.to_thread(
        wait_until, lambda: caught_up(rig, SpecProducer(rig.store, new)), "caught up in g1",
        CATCH_UP_TIMEOUT_S,
    )  # fmt: skip
    want, late = oracle(spark, rig, [old, new])
    assert want.closed and want.open and late
    # Every final window is published once its checkpoint is accepted: wait for the table.
    await asyncio.to_thread(
        wait_until, lambda: len(windows_table(rig, new.incarnation)) >= len(want.closed),
        "windows published", PUBLISHED_TIMEOUT_S,
    )  # fmt: skip
    got = windows_table(rig, new.incarnation)
    assert got == want.closed
    assert open_windows(rig, owned) == want.open
    numbers = [
        *range(old.first_slot, old.first_slot + 3),
        *range(new.first_slot, new.first_slot + 5),
    ]
    assert late_records(rig, numbers) == late
