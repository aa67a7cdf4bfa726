"""No partition stays stuck: real coordinators, real `ripple worker` processes on Spark, a real
store. The store loses checkpoints the coordinator recorded (the object is deleted through the
store's own protocol: a file on the local store, DeleteObject on the S3 endpoint); the owner
answers the host call with checkpoint_unavailable, the leader falls back to an older accepted
checkpoint or to a full replay, and every key still equals the Spark batch job. The fallback is
on the partition's timeline and counted in /metrics.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.source import generate
from testkit.pipeline_rig import CATCH_UP_TIMEOUT_S, PARTITIONS, SETTINGS, PipelineRig
from testkit.wait import wait_until

# Fall back after two failures in a row, retry hosts quickly: the chain is walked in seconds.
FALLBACK_SETTINGS = {**SETTINGS, "fallback_after_failures": 2, "host_retry_cap_ms": 1000}


@pytest.fixture
def local(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    uri = f"file://{tmp_path / 'store'}"
    p = PipelineRig(tmp_path, uri, spark_remote, None, settings=FALLBACK_SETTINGS)
    yield from p.running()


@pytest.fixture
def s3(tmp_path: Path, spark_remote: str, moto_endpoint: str) -> Iterator[PipelineRig]:
    import boto3

    bucket = f"ripple-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/pipeline"
    p = PipelineRig(tmp_path, uri, spark_remote, moto_endpoint, settings=FALLBACK_SETTINGS)
    yield from p.running()


def delete_object(p: PipelineRig, uri: str) -> None:
    """Delete the object at ``uri`` from the pipeline's store, by the store's protocol."""
    base = p.store.uri("")
    assert uri.startswith(base), (uri, base)
    key = uri[len(base) :]
    path = p.store.local_path(key)
    if path is not None:
        os.remove(path)
        return
    import boto3

    bucket, _, prefix = p.store_uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3", endpoint_url=p.s3_endpoint)
    s3.delete_object(Bucket=bucket, Key=f"{prefix}/{key}" if prefix else key)
    assert p.store.list_keys(key) == []


def checkpointed_to_end(p: PipelineRig) -> list[dict[str, Any]] | None:
    """The table once every partition's recorded checkpoint covers the whole source log."""
    parts = p.table()
    for x in parts:
        ck = x["checkpoint"]
        if ck is None or ck["offset"] != p.source.end_offset(x["partition"]):
            return None
    return parts


def produce_and_checkpoint(p: PipelineRig, seed: int) -> list[dict[str, Any]]:
    p.producer.produce(generate(800, 30, seed=seed))
    p.check_equal_to_batch_job()
    return wait_until(lambda: checkpointed_to_end(p), "checkpoints cover the log", 60, 0.2)


def leader_metric(p: PipelineRig, name: str) -> float:
    text = p.cluster.get(p.cluster.leader(), "/metrics").body
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def history(p: PipelineRig, partition: int) -> list[dict[str, Any]]:
    leader = p.cluster.leader()
    return p.cluster.get(leader, f"/v1/partitions/{partition}/history").body["history"]  # type: ignore[no-any-return]


def test_lost_checkpoint_falls_back_to_an_older_one(local: PipelineRig) -> None:
    p = local
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid)
    first = {x["partition"]: x["checkpoint"] for x in produce_and_checkpoint(p, seed=21)}
    second = produce_and_checkpoint(p, seed=22)
    # A partition whose recorded checkpoint is newer than its first one: it has an older one
    # to fall back to.
    victim = next(
        x
        for x in second
        if first[x["partition"]] is not None
        and x["checkpoint"]["offset"] > first[x["partition"]]["offset"]
    )
    part, owner = victim["partition"], victim["owner"]
    delete_object(p, victim["checkpoint"]["uri"])
    # The owner restarts: it re-registers, every partition it owned is hosted again from its
    # recorded checkpoint, and for `part` that object is gone.
    p.workers[owner].kill9()
    p.start_worker(owner)
    p.producer.produce(generate(300, 30, seed=23))
    p.check_equal_to_batch_job()

    entries = history(p, part)
    fallbacks = [h for h in entries if h["reason"] == "fallback"]
    assert fallbacks, entries
    note = fallbacks[0]["note"]
    assert f"offset {victim['checkpoint']['offset']} unavailable" in note, note
    assert "falling back to offset" in note, note
    assert leader_metric(p, 'ripple_partition_fallbacks_total{to="checkpoint"}') >= 1
    assert all(x["stuck"] is None for x in p.table())


def test_restart_with_an_emptied_store_recovers_without_an_operator(s3: PipelineRig) -> None:
    """`docker compose stop` then `up` with a store that lost every checkpoint: the workers
    come back, every partition walks its fallback chain down to a full replay, and the result
    is exact. Nobody calls an admin endpoint."""
    p = s3
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid)
    produce_and_checkpoint(p, seed=31)
    produce_and_checkpoint(p, seed=32)
    for proc in p.workers.values():
        proc.kill9()
    for x in p.table():
        for key in p.store.list_keys(f"checkpoints/p{x['partition']:05d}/"):
            delete_object(p, p.store.uri(key))
    assert not any(p.store.list_keys(f"checkpoints/p{i:05d}/") for i in range(PARTITIONS))
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid)
    parts = wait_until(p.caught_up, "all ONLINE after the emptied store", CATCH_UP_TIMEOUT_S, 0.5)
    assert len(parts) == PARTITIONS
    p.check_equal_to_batch_job()
    replays = leader_metric(p, 'ripple_partition_fallbacks_total{to="replay"}')
    assert replays >= 1
    for x in parts:
        reasons = [h["reason"] for h in history(p, x["partition"])]
        assert "fallback" in reasons, (x["partition"], reasons)
    assert leader_metric(p, "ripple_partitions_stuck") == 0
