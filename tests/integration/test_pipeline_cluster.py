"""The pipeline on a Spark standalone cluster whose executors share no disk with the workers.

Master + Worker + a Spark Connect server submitted to the Master (testkit/spark_cluster.py);
the Spark Worker and its executors live in their own mount namespace with a tmpfs over the
directory this session writes to (the ripple workers' staging, the test's files). The store
is S3 (moto's server). A worker on the `files` path is refused at start-up (its probe fails
as a micro-batch handing Spark a local path would); on the `arrow` path three workers go
through a worker kill, a leader kill, a rebalance and a drain, and every key equals one batch
job.

Bounded: the cluster takes ~30 s to start and the scenario ~1-2 minutes on 2 cores. Skipped,
with the reason, where `unshare --mount` is not permitted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.pipeline_rig import PipelineRig
from testkit.spark_cluster import SparkCluster, unshare_available
from testkit.wait import wait_until
from tests.integration.test_pipeline import failures_moves_and_drain

pytestmark = pytest.mark.spark_cluster


@pytest.fixture(scope="module")
def cluster_remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    why = unshare_available()
    if why is not None:
        pytest.skip(why)
    # Every file this session writes is under its base temp: the workers' staging
    # (`--staging-dir`) and the Spark cluster's own directories.
    hidden = [tmp_path_factory.getbasetemp()]
    spark = SparkCluster(tmp_path_factory.mktemp("spark-cluster"), hidden)
    try:
        yield spark.start()
    finally:
        spark.stop()


@pytest.fixture
def pipeline(tmp_path: Path, cluster_remote: str, moto_endpoint: str) -> Iterator[PipelineRig]:
    import boto3

    bucket = f"ripple-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    yield from PipelineRig(
        tmp_path,
        f"s3://{bucket}/pipeline",
        cluster_remote,
        moto_endpoint,
        worker_args=("--data-path", "arrow", "--staging-dir", str(tmp_path / "stage")),
        oracle_reads_rows=True,
    ).running()


def test_pipeline_on_a_cluster_without_shared_disk(pipeline: PipelineRig) -> None:
    p = pipeline
    # The files path hands the executors staged copies they cannot see: refused at start-up.
    w0 = p.start_worker("w0", "--data-path", "files")
    wait_until(lambda: not w0.alive(), "the files-path worker exits", 180)
    assert w0.popen.returncode == 2
    log = w0.output()
    assert "refusing to start" in log and "'files' data path" in log, log[-3000:]
    assert str(p.cluster.root / "stage" / "probes" / "w0.parquet") in log, log[-3000:]
    # The arrow path needs nothing shared.
    failures_moves_and_drain(p)
    for wid in ("w3", "w4"):
        health = p.health(wid)
        assert health is not None and health["data_path"] == "arrow"
        assert health["stats"]["batch_failures"] == 0, health
