"""A recorded pipeline rescaled by the leader on real workers and real Spark, producers
running, equal to its spec's batch job over every generation.

Three coordinator processes, two `ripple worker` processes in the pipeline's pool, one Spark
Connect server, a local-directory store. `orders` is created with 2 partitions and fed
through the SDK (`PipelineClient`); `POST /v1/pipelines/orders/rescale` to 3 starts the
rescale, and the SDK keeps producing while the leader cuts the old numbers, has a pool
worker build the new ones and finishes once they are online. Then: the rescale is DONE, the
table holds exactly the new numbers, every one at an epoch above every old one, and after
more rows every key read from the owners equals `generations_job` over both generations.
A spec update at the same count (`POST .../update`, one output added) then goes the same
way, and the new output counts only the rows after its cut.
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
# The spec update's new output: orders counted from its cut on.
UPDATED_SPEC = spec_text() + '[[aggregations]]\nname = "orders_since"\nfn = "count"\n'


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


async def rescaled(
    rig: PipelineRig, sdk: PipelineClient, path: str, request: dict[str, Any], seed: int
) -> PipelineInfo:
    """Start a rescale or update through `path`, keep producing through the SDK until it is
    DONE, then produce once more; the pipeline's new generation."""
    started = await asyncio.to_thread(admin, rig, "POST", path, request)
    assert started.status == 202, started
    deadline = time.monotonic() + RESCALE_TIMEOUT_S
    produced = 0
    while await asyncio.to_thread(phase, rig) != "done":
        assert time.monotonic() < deadline, f"rescale still {phase(rig)}"
        if produced >= BATCHES_DURING_MAX:
            await asyncio.sleep(0.5)
            continue
        try:
            await sdk.produce(iter(rows(seed=seed + produced)))
        except UnavailableError:
            # Sealed, and the describe does not show the new generation until the build
            # is recorded (503): the rows before the seal are in, the rest are not; the
            # next batch goes after a pause (the oracle reads what the log holds).
            await asyncio.sleep(0.5)
        produced += 1
    assert produced >= 1, "no rows were produced while the rescale ran"
    await sdk.produce(iter(rows(seed=seed - 1)))
    return PipelineInfo.from_describe(await asyncio.to_thread(describe, rig, "orders"))


def every_generation(
    rig: PipelineRig, spark: SparkSession, generations: list[PipelineInfo]
) -> dict[Any, dict[str, Any]]:
    """The spec's batch job over the rows of every generation: what a rescaled pipeline's
    keys equal, as JSON values."""
    computed = generations_job(
        spark,
        rig.store,
        [
            Generation(
                generation=i.generation,
                first_slot=i.first_slot,
                partitions=i.partitions,
                spec=parse_spec(i.spec_text),
            )
            for i in generations
        ],
    )
    return {k: {n: as_json(v) for n, v in outs.items()} for k, outs in computed.items()}


async def exact(
    rig: PipelineRig, spark: SparkSession, generations: list[PipelineInfo]
) -> dict[Any, dict[str, Any]]:
    """Once the newest generation caught up, every key read from its owners equals
    `generations_job` over all of them; the keys' outputs."""
    new = generations[-1]
    owned = await asyncio.to_thread(
        wait_until,
        lambda: caught_up(rig, SpecProducer(rig.store, new)),
        f"orders caught up in generation {new.generation}",
        CATCH_UP_TIMEOUT_S,
    )
    assert set(owned) == set(range(new.first_slot, new.first_slot + new.partitions))
    got = await asyncio.to_thread(results, rig, owned)
    want = every_generation(rig, spark, generations)
    assert len(want) > 10
    assert got == want, differences(got, want)
    return got


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

        new = await rescaled(rig, sdk, "/v1/pipelines/orders/rescale", {"partitions": 3}, 100)
        assert (new.partitions, new.generation) == (3, 1)
        assert not set(range(old.first_slot, old.first_slot + 2)) & set(
            range(new.first_slot, new.first_slot + 3)
        )
        # The table holds the new generation alone, every epoch above every old one.
        shown = await asyncio.to_thread(describe, rig, "orders")
        assert shown["past"] == [
            {"first_slot": old.first_slot, "partitions": 2, "routing_generation": 0}
        ]
        after = await asyncio.to_thread(epochs, rig)
        assert len(after) == 3 and min(after) > max(before), (before, after)
        await exact(rig, spark, [old, new])

        # A spec update at the same count: a new version from its cut, one output added.
        updated = await rescaled(
            rig, sdk, "/v1/pipelines/orders/update", {"spec": UPDATED_SPEC}, 200
        )
        assert (updated.partitions, updated.generation) == (3, 2)
        assert updated.spec_text == UPDATED_SPEC
        assert (await asyncio.to_thread(describe, rig, "orders"))["spec_version"] == 2
        last = await asyncio.to_thread(epochs, rig)
        assert len(last) == 3 and min(last) > max(after), (after, last)
        got = await exact(rig, spark, [old, new, updated])
        assert all(v["orders_since"] <= v["orders"] for v in got.values())
        assert any(0 < v["orders_since"] < v["orders"] for v in got.values())
