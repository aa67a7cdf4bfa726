"""A cluster of the previous release, upgraded node by node under load, keeps its one pipeline
as `default`, exact.

Real parts: three coordinator processes, `ripple worker` processes on the session's Spark
Connect server, moto's S3 server, a producer appending all along. The previous release is
a node held at command-set version 4 (`--command-set-version-max 4`: rescaling, no pipeline
records), as the release before pipeline records speaks. While any node is held, creating a
recorded pipeline is refused before it is proposed, naming the node behind, and the cluster's
own pipeline reads as `default` through `/v1/pipelines` and `ripple pipelines list`. Each node
is then stopped and started on the same data directory without the cap, one at a time, with
the producer and the workers running; the leader finalizes the newest version once every voter
speaks it, and a recorded pipeline is accepted. Through the whole roll no partition's epoch goes
back, and at the end `default` is still the cluster's pipeline, every partition ONLINE, and
every key equals one Spark batch job over everything appended.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.core.versions import COMMAND_SET_VERSION
from pipeline.source import generate
from ripple.launch import coordinator_argv
from testkit.cluster import ADMIN, Cluster
from testkit.pipeline_rig import CATCH_UP_TIMEOUT_S, PARTITIONS, PipelineRig
from testkit.wait import wait_until
from tests.chaos.harness import Figures, wait_settled
from tests.chaos.test_pipeline_chaos import (
    SETTLE_TIMEOUT_S,
    Feed,
    Observer,
    check_equal_to_batch_job,
)
from tests.integration.test_cli import ripple

NODES = ("n1", "n2", "n3")
WORKERS = ("w1", "w2", "w3")
PREVIOUS = 4  # the command-set version of the release before pipeline records
NEWEST = COMMAND_SET_VERSION
SEED = 43
INITIAL_RECORDS = 1500
KEYS = 50
WAIT_S = 60.0
ROOT = Path(__file__).resolve().parents[2]
ORDERS = (ROOT / "docs" / "examples" / "orders.toml").read_text()


def start_previous(cluster: Cluster, node_id: str) -> None:
    """`node_id` as a node of the previous release: it speaks command sets 1..4 only."""
    argv = [
        *coordinator_argv(cluster.config_path, node_id),
        "--command-set-version-max",
        str(PREVIOUS),
    ]
    cluster.spawn(node_id, argv)


def health(cluster: Cluster) -> dict[str, Any]:
    leader = cluster.ready(WAIT_S)
    return cluster.get(leader, "/v1/health").body  # type: ignore[no-any-return]


def finalized(cluster: Cluster) -> int:
    return int(health(cluster).get("finalized_command_set_version", 0))


def listed(cluster: Cluster) -> dict[str, dict[str, Any]]:
    body = cluster.get(cluster.ready(WAIT_S), "/v1/pipelines?consistent=true").body
    return {p["name"]: p for p in body["pipelines"]}


def create_orders(cluster: Cluster) -> Any:
    """Create a recorded pipeline through whichever node leads (its pool matches no worker,
    so it takes no worker's slots: the point is whether the command lands)."""
    body = {"name": "orders", "spec_text": ORDERS, "partitions": 2, "pool": {"tier": "none"}}
    return cluster.write_via_any("/v1/pipelines", body, token=ADMIN, timeout_s=WAIT_S)


def default_is_the_pipeline(cluster: Cluster, routing_generation: int) -> None:
    """`default` is listed with the cluster's partitions, ACTIVE, and the CLI says so."""
    one = listed(cluster)["default"]
    assert one["state"] == "active" and one["partitions"] == PARTITIONS, one
    assert one["spec_version"] == 0 and one["routing_generation"] == routing_generation, one
    urls = [a for spec in cluster.specs for a in ("--coordinator", spec.url)]
    done = ripple("pipelines", "list", "--json", *urls)
    assert done.returncode == 0, done.stderr
    names = [p["name"] for p in json.loads(done.stdout)["pipelines"]]
    assert names[0] == "default", names


@pytest.fixture
def rig(
    tmp_path: Path, spark_remote: str, moto_endpoint: str, s3_bucket: tuple[Any, str]
) -> Iterator[PipelineRig]:
    store = f"s3://{s3_bucket[1]}/pipeline"
    previous = PipelineRig(tmp_path, store, spark_remote, moto_endpoint)
    try:
        for node_id in NODES:
            start_previous(previous.cluster, node_id)
        previous.cluster.ready(WAIT_S)
        yield previous
    finally:
        previous.stop()


def test_a_previous_release_cluster_upgraded_under_load_keeps_default_exact(
    rig: PipelineRig,
) -> None:
    p, c = rig, rig.cluster
    figures = Figures(scenario="upgrade", seed=SEED)
    p.producer.produce(generate(INITIAL_RECORDS, KEYS, seed=SEED))
    for wid in WORKERS:
        p.start_worker(wid)
    wait_until(p.caught_up, "the initial records processed", CATCH_UP_TIMEOUT_S, 0.2)
    wait_until(lambda: finalized(c) == PREVIOUS, f"version {PREVIOUS} finalized", WAIT_S)
    default_is_the_pipeline(c, routing_generation=0)

    feed, observer = Feed(p.producer, SEED), Observer(p)
    try:
        feed.start()
        observer.start()
        try:
            refused = create_orders(c)
            assert refused.status == 409, refused
            assert refused.body["error"] == "version_unsupported", refused.body
            assert "speaks 1..4" in refused.body["message"], refused.body
            for i, node_id in enumerate(NODES):
                c.procs[node_id].stop()
                c.start(node_id)
                c.ready(WAIT_S)
                if i < len(NODES) - 1:
                    # A voter still speaks 4 only: nothing newer is finalized.
                    assert finalized(c) == PREVIOUS
                    default_is_the_pipeline(c, routing_generation=0)
            wait_until(lambda: finalized(c) == NEWEST, f"version {NEWEST} finalized", WAIT_S)
            made = create_orders(c)
            assert made.status == 202, made
        finally:
            feed.stop()
        wait_settled(c, SETTLE_TIMEOUT_S)
        parts = wait_until(p.caught_up, "the pipeline caught up", CATCH_UP_TIMEOUT_S, 0.2)
    finally:
        observer.stop()
    observer.record(parts)

    default_is_the_pipeline(c, routing_generation=0)
    assert set(listed(c)) == {"default", "orders"}
    assert len(parts) == PARTITIONS and all(x["status"] == "online" for x in parts)
    check_equal_to_batch_job(
        p, parts, None if feed.errors else INITIAL_RECORDS + feed.records, figures
    )
    figures.violations.extend(observer.violations)
    assert feed.records > 0 and observer.reads_ok > 0
    assert not figures.violations, figures.violations
