"""A recorded pipeline rescaled by the leader on real workers and real Spark, producers
running, equal to its spec's batch job over every generation.

Three coordinator processes, two `ripple worker` processes in the pipeline's pool, one Spark
Connect server, a local-directory store. `orders` is created with 2 partitions and fed
through the SDK (`PipelineClient`); `POST /v1/pipelines/orders/rescale` to 3 starts the
rescale, and the SDK keeps producing while the leader cuts the old numbers, has a pool
worker build the new ones and finishes once they are online. Then: the rescale is DONE, the
table holds exactly the new numbers, every one at an epoch above every old one, and after
more rows every key read from the owners equals `generations_job` over both generations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pipeline.spec.oracle import Generation, generations_job
from pipeline.spec.produce import SpecProducer
from pipeline.spec.run import PipelineInfo
from pipeline.spec.sdk import PipelineClient
from shared.errors import UnavailableError
from shared.spec.parse import parse_spec
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.integration.test_pipeline_spec_spark import spec_text
from tests.integration.test_pipeline_specs import (
    CATCH_UP_TIMEOUT_S,
    POOL,
    active,
    admin,
    as_json,
    caught_up,
    describe,
    differences,
    results,
    rows,
)
from tests.integration.test_pipelines_api import speaks_pipelines

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

RESCALE_TIMEOUT_S = 240.0
# Batches produced while the rescale runs, at most (each a seeded `rows` batch).
BATCHES_DURING_MAX = 40


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path}/store", spark_remote).running()


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def epochs(rig: PipelineRig) -> list[int]:
    reply = admin(rig, "GET", "/v1/partitions?pipeline=orders&consistent=true")
    assert reply.status == 200, reply
    return [int(p["epoch"]) for p in reply.body["partitions"]]


def phase(rig: PipelineRig) -> str | None:
    r = describe(rig, "orders").get("rescale")
    return None if r is None else str(r["phase"])


async def test_a_recorded_pipeline_rescales_under_load_and_equals_its_batch_job(
    rig: PipelineRig, spark: SparkSession
) -> None:
    speaks_pipelines(rig.cluster)
    body = {"name": "orders", "spec_text": spec_text(), "partitions": 2, "pool": POOL}
    assert admin(rig, "POST", "/v1/pipelines", body).status == 202
    old = PipelineInfo.from_describe(wait_until(lambda: active(rig, "orders"), "active", 60))
    for wid in ("w1", "w2"):
        rig.start_worker(wid, "--label", "zone=a", "--slots", "8")
    rig.wait_ready()
    urls = [s.url for s in rig.cluster.specs]
    async with PipelineClient(urls, "orders", store=rig.store_uri) as sdk:
        await sdk.produce(iter(rows(seed=1)))
        await asyncio.to_thread(
            wait_until,
            lambda: caught_up(rig, SpecProducer(rig.store, old)),
            "orders caught up",
            CATCH_UP_TIMEOUT_S,
        )
        before = await asyncio.to_thread(epochs, rig)

        started = await asyncio.to_thread(
            admin, rig, "POST", "/v1/pipelines/orders/rescale", {"partitions": 3}
        )
        assert started.status == 202, started
        deadline = time.monotonic() + RESCALE_TIMEOUT_S
        produced = 0
        while await asyncio.to_thread(phase, rig) != "done":
            assert time.monotonic() < deadline, f"rescale still {phase(rig)}"
            if produced >= BATCHES_DURING_MAX:
                await asyncio.sleep(0.5)
                continue
            try:
                await sdk.produce(iter(rows(seed=100 + produced)))
            except UnavailableError:
                # Sealed, and the describe does not show the new generation until the build
                # is recorded (503): the rows before the seal are in, the rest are not; the
                # next batch goes after a pause (the oracle reads what the log holds).
                await asyncio.sleep(0.5)
            produced += 1
        assert produced >= 1, "no rows were produced while the rescale ran"
        await sdk.produce(iter(rows(seed=2)))

        body = await asyncio.to_thread(describe, rig, "orders")
        new = PipelineInfo.from_describe(body)
        assert (new.partitions, new.generation) == (3, 1)
        old_numbers = set(range(old.first_slot, old.first_slot + old.partitions))
        new_numbers = set(range(new.first_slot, new.first_slot + new.partitions))
        assert not old_numbers & new_numbers
        # The table holds the new generation alone, every epoch above every old one.
        after = await asyncio.to_thread(epochs, rig)
        assert len(after) == 3 and min(after) > max(before), (before, after)

        owned = await asyncio.to_thread(
            wait_until,
            lambda: caught_up(rig, SpecProducer(rig.store, new)),
            "orders caught up after the rescale",
            CATCH_UP_TIMEOUT_S,
        )
        assert set(owned) == new_numbers
        got = await asyncio.to_thread(results, rig, owned)
        spec = parse_spec(spec_text())
        generations = [
            Generation(
                generation=i.generation, first_slot=i.first_slot, partitions=i.partitions, spec=spec
            )
            for i in (old, new)
        ]
        computed = generations_job(spark, rig.store, generations)
        want: dict[Any, dict[str, Any]] = {
            k: {n: as_json(v) for n, v in outs.items()} for k, outs in computed.items()
        }
        assert len(want) > 10
        assert got == want, differences(got, want)
