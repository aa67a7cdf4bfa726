"""A produce-only pipeline token end to end, on three coordinator processes, a real
`ripple worker` and a real Spark Connect server: the admin issues it with `ripple pipelines
tokens issue --role produce`; `ripple produce --pipeline --token` sends rows through the
worker (the producer is given no store), the worker processes them, and the SDK reads back
what the spec's batch job computes over them; the token is refused on pause and drop (403);
revoked, it stops producing within the worker's verdict time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pipeline.spec.produce import SpecProducer
from pipeline.spec.run import PipelineInfo
from pipeline.spec.sdk import PipelineClient
from pipeline.token_check import VERIFIED_TTL_MS
from testkit.cli import ripple
from testkit.cluster import ADMIN
from testkit.http import call
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.integration import test_pipeline_specs
from tests.integration.test_pipeline_spec_spark import spec_text
from tests.integration.test_pipeline_specs import (
    CATCH_UP_TIMEOUT_S,
    POOL,
    active,
    admin,
    as_json,
    caught_up,
    oracle,
    rows,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

PRODUCE_ROLE_VERSION = 7  # the command set the produce role belongs to
WAIT_S = 60.0
# The pipeline tests' fixtures: a rig on a local store, the session's Spark for the oracle.
rig = test_pipeline_specs.rig
spark = test_pipeline_specs.spark


def urls(rig: PipelineRig) -> list[str]:
    return [a for spec in rig.cluster.specs for a in ("--coordinator", spec.url)]


def finalized(rig: PipelineRig) -> bool:
    c = rig.cluster
    health = c.health(c.ready()) or {}
    return int(health.get("finalized_command_set_version", 0)) >= PRODUCE_ROLE_VERSION


def write_rows(path: Path, seed: int) -> Path:
    path.write_text(
        "".join(json.dumps({k: as_json(v) for k, v in r.items()}) + "\n" for r in rows(seed))
    )
    return path


def produce(rig: PipelineRig, path: Path, token: str) -> Any:
    return ripple(
        "produce", "--pipeline", "orders", "--file", str(path), "--token", token, *urls(rig)
    )


async def test_a_produce_token_feeds_its_pipeline_through_a_worker_and_nothing_else(
    rig: PipelineRig, spark: SparkSession, tmp_path: Path
) -> None:
    wait_until(lambda: finalized(rig), f"command-set version {PRODUCE_ROLE_VERSION}", WAIT_S)
    body = {"name": "orders", "spec_text": spec_text(), "partitions": 2, "pool": POOL}
    assert admin(rig, "POST", "/v1/pipelines", body).status == 202
    info = PipelineInfo.from_describe(wait_until(lambda: active(rig, "orders"), "active", WAIT_S))
    issued = ripple(
        "pipelines", "tokens", "issue", "orders", "--role", "produce", "--json",
        "--admin-token", ADMIN, *urls(rig),
    )  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    token, token_id = json.loads(issued.stdout)["token"], json.loads(issued.stdout)["token_id"]
    rig.start_worker("w1", "--label", "zone=a", "--slots", "4")
    rig.wait_ready()

    # Through the worker: the producer holds the token only, no store.
    done = await asyncio.to_thread(produce, rig, write_rows(tmp_path / "a.jsonl", 21), token)
    assert done.returncode == 0 and "through a worker" in done.stdout, done.stderr
    producer = SpecProducer(rig.store, info)  # reads the log the worker wrote
    await asyncio.to_thread(
        wait_until, lambda: caught_up(rig, producer), "orders caught up", CATCH_UP_TIMEOUT_S
    )
    want = oracle(spark, producer)
    assert len(want) > 10
    urls_ = [s.url for s in rig.cluster.specs]
    async with PipelineClient(urls_, "orders") as reader:
        for key, outputs in list(want.items())[:5]:
            got = await reader.get(str(key))
            assert {n: got[n] for n in outputs} == outputs, (key, got, outputs)

    # A producer, not an operator: pause and drop are refused.
    c = rig.cluster
    for method, path in (
        ("POST", "/v1/pipelines/orders/pause"),
        ("DELETE", "/v1/pipelines/orders"),
    ):
        r = call(method, c.url(c.leader()) + path, None, token=token)
        assert r.status == 403 and r.body["error"] == "forbidden", (path, r)
    assert c.get(c.leader(), "/v1/pipelines/orders").body["state"] == "active"

    # Revoked: within the worker's verdict time it produces no more.
    gone = ripple(
        "pipelines", "tokens", "revoke", "orders", token_id, "--admin-token", ADMIN, *urls(rig)
    )
    assert gone.returncode == 0 and "revoked" in gone.stdout, gone.stderr
    later = write_rows(tmp_path / "b.jsonl", 22)

    def refused() -> str | None:
        out = produce(rig, later, token)
        return out.stderr if out.returncode != 0 else None

    said = await asyncio.to_thread(
        wait_until, refused, "the revoked token refused", VERIFIED_TTL_MS / 1000 + 30.0, 1.0
    )
    assert "forbidden" in said or "may not" in said, said
