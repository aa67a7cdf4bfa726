"""The pipeline end to end: three coordinator processes, real `ripple worker` processes on
one shared Spark Connect server, a local-directory store and a real S3 protocol endpoint
(moto's server through boto3). The oracle is one Spark batch job over the whole input:
after failovers, a leader kill, a rebalance and a drain, every key's state must equal it.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.source import generate
from testkit.cluster import ADMIN
from testkit.http import call
from testkit.pipeline_rig import CATCH_UP_TIMEOUT_S, PARTITIONS, SETTINGS, PipelineRig
from testkit.wait import wait_until


@pytest.fixture(params=["local", "s3"])
def pipeline(
    request: pytest.FixtureRequest, tmp_path: Path, spark_remote: str
) -> Iterator[PipelineRig]:
    if request.param == "local":
        uri, endpoint = f"file://{tmp_path / 'store'}", None
    else:
        import boto3

        endpoint = request.getfixturevalue("moto_endpoint")
        bucket = f"ripple-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        uri = f"s3://{bucket}/pipeline"
    yield from PipelineRig(tmp_path, uri, spark_remote, endpoint).running()


def failures_moves_and_drain(pipeline: PipelineRig) -> None:
    """Three workers catch up; kill -9 of a worker under load; kill -9 of the leader; a
    rebalance onto a new worker; a drain. After each, every key equals the batch job."""
    p, c = pipeline, pipeline.cluster
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid)
    p.producer.produce(generate(3000, 40, seed=1))
    t0 = time.monotonic()
    total = p.check_equal_to_batch_job()
    print(
        f"\n[{p.store_uri.split(':')[0]}] {total} records caught up in "
        f"{time.monotonic() - t0:.1f} s"
    )

    metrics = call("GET", f"http://127.0.0.1:{p.ports['w3']}/metrics").body
    assert "ripple_worker_records_total" in metrics and "ripple_worker_lease_valid 1" in metrics
    counted = sum(p.metric(w, "ripple_worker_records_total") for w in ("w1", "w2", "w3"))
    assert counted == total

    # kill -9 a worker while new input arrives; its partitions replay from checkpoints.
    p.producer.produce(generate(2000, 40, seed=2))
    p.workers["w1"].kill9()
    killed_at = time.monotonic()
    wait_until(
        lambda: all(x["owner"] != "w1" for x in p.table()),
        "w1's partitions moved",
        SETTINGS["heartbeat_timeout_s"] + 10,
    )
    p.check_equal_to_batch_job()
    print(
        f"worker kill -> its partitions caught up elsewhere: {time.monotonic() - killed_at:.1f} s"
    )

    # kill -9 the leader, then an admin rebalance onto a new worker, then a drain.
    c.kill9(c.leader())
    p.start_worker("w4")
    wait_until(
        lambda: any(
            w["worker_id"] == "w4" and w["state"] == "active"
            for w in c.get(c.leader(), "/v1/workers").body["workers"]
        ),
        "w4 registered",
        60,
    )
    r = c.write_via_any("/v1/admin/reassign", {"strategy": "balance"}, token=ADMIN)
    assert r.status == 202 and r.body["migrations"], r
    p.producer.produce(generate(1500, 40, seed=3))
    wait_until(
        lambda: c.get(c.leader(), "/v1/migrations").body["in_flight"] == 0, "rebalance done", 60
    )
    d = c.write_via_any("/v1/workers/w2/drain", {}, token=ADMIN)
    assert d.status == 202, d
    p.producer.produce(generate(1500, 40, seed=4))
    wait_until(
        lambda: (
            {w["worker_id"]: w["state"] for w in c.get(c.leader(), "/v1/workers").body["workers"]}[
                "w2"
            ]
            == "left"
        ),
        "w2 drained",
        60,
    )
    total = p.check_equal_to_batch_job()
    assert total == 8000
    owners = {x["owner"] for x in p.table()}
    assert owners == {"w3", "w4"}


def test_pipeline_equals_batch_job_through_failures_moves_and_drain(pipeline: PipelineRig) -> None:
    failures_moves_and_drain(pipeline)


def test_paused_worker_is_fenced_and_never_double_processes(pipeline: PipelineRig) -> None:
    p = pipeline
    if p.s3_endpoint:
        pytest.skip("the fencing path does not depend on the store; run once, on local")
    for wid in ("w1", "w2", "w3"):
        # w2 leaves on SIGTERM below; a restart is the default (the rolling restart test).
        p.start_worker(wid, *(["--leave-on-sigterm"] if wid == "w2" else []))
    p.producer.produce(generate(2000, 30, seed=5))
    p.check_equal_to_batch_job()
    before = {x["partition"]: x for x in p.table() if x["owner"] == "w1"}
    p.workers["w1"].signal(signal.SIGSTOP)
    try:
        wait_until(
            lambda: all(x["owner"] != "w1" for x in p.table()),
            "w1's partitions moved while it is stopped",
            SETTINGS["heartbeat_timeout_s"] + 10,
        )
        p.producer.produce(generate(2000, 30, seed=6))
        p.check_equal_to_batch_job()
    finally:
        p.workers["w1"].signal(signal.SIGCONT)
        resumed_ms = int(time.time() * 1000)
    # Resumed past its lease and the coordinator's timeout: it must not process, checkpoint
    # or serve its old partitions; it re-registers as a new incarnation.
    for part in before:
        r = call("GET", f"http://127.0.0.1:{p.ports['w1']}/v1/partitions/{part}/state")
        assert r.status == 409, r
    wait_until(lambda: (p.health("w1") or {}).get("incarnation", 0) >= 2, "w1 re-registers", 30)
    p.producer.produce(generate(500, 30, seed=7))
    p.check_equal_to_batch_job()
    for x in p.table():
        if x["partition"] in before:
            ck = x["checkpoint"]
            # Only w1 held the old epoch: no checkpoint of it may be accepted after resume.
            if ck is not None and ck["epoch"] == before[x["partition"]]["epoch"]:
                assert ck["at_ms"] < resumed_ms, (x, resumed_ms)

    # With --leave-on-sigterm, SIGTERM is a graceful leave: the worker asks for a drain,
    # waits until its partitions moved (final checkpoints handed over), then exits; nothing
    # is lost.
    p.workers["w2"].signal(signal.SIGTERM)
    wait_until(lambda: not p.workers["w2"].alive(), "w2 exits after draining", 60)
    states = {
        w["worker_id"]: w["state"]
        for w in p.cluster.get(p.cluster.leader(), "/v1/workers").body["workers"]
    }
    assert states["w2"] == "left"
    p.producer.produce(generate(500, 30, seed=8))
    p.check_equal_to_batch_job()


def test_key_limit_goes_to_dead_letter_visibly(pipeline: PipelineRig) -> None:
    p = pipeline
    if p.s3_endpoint:
        pytest.skip("the key limit does not depend on the store; run once, on local")
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid, "--max-keys-per-partition", "2")
    p.producer.produce(generate(1000, 40, seed=9))  # 40 keys over 8 partitions: ~5 each
    parts = wait_until(p.caught_up, "caught up", CATCH_UP_TIMEOUT_S, 0.2)
    got, want = p.state(parts), p.oracle()
    assert set(got) <= set(want)
    for key, v in got.items():  # the keys that fit are exact
        assert v == want[key]
    per_partition = {}
    for part in parts:
        r = call(
            "GET",
            f"http://127.0.0.1:{p.ports[part['owner']]}/v1/partitions/{part['partition']}/state",
        )
        per_partition[part["partition"]] = len(r.body["keys"])
    assert max(per_partition.values()) == 2
    refused = sum(p.metric(w, "ripple_worker_dead_letter_keys_total") for w in ("w1", "w2", "w3"))
    assert refused == len(want) - len(got) > 0  # nothing dropped silently
    dead_letters = [
        k for part in range(PARTITIONS) for k in p.store.list_keys(f"deadletter/p{part:05d}/")
    ]
    assert dead_letters


def test_worker_refuses_to_start_when_its_spark_cannot_read_its_input(
    tmp_path: Path, spark_remote: str, moto_endpoint: str
) -> None:
    """`direct` on S3 needs s3a:// (hadoop-aws), which this Spark has not: the start-up probe
    fails, the worker says why and exits 2 without registering (so it never takes partitions
    it cannot process)."""
    import boto3

    bucket = f"ripple-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    p = PipelineRig(tmp_path, f"s3://{bucket}/pipeline", spark_remote, moto_endpoint)
    p.cluster.start_all()
    try:
        p.cluster.ready()
        w = p.start_worker("w1", "--data-path", "direct")
        wait_until(lambda: not w.alive(), "the worker exits", 120)
        assert w.popen.returncode == 2
        log = w.output()
        assert "refusing to start" in log and "'direct' data path" in log, log[-2000:]
        assert f"s3a://{bucket}/pipeline/probes/w1.parquet" in log
        workers = p.cluster.get(p.cluster.leader(), "/v1/workers").body["workers"]
        assert workers == []
    finally:
        p.stop()
