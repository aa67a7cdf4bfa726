"""The Spark Connect server crashes (kill -9) under a running pipeline and comes back on the
same port: the worker makes a new session within a bound, no partition moves (same owner,
same epoch), and every key equals the Spark batch job over all the input, including what the
producers appended while Spark was down and after it came back.

The server is this test's own (the session-wide one is shared and must not restart); three
coordinator processes and one `ripple worker` process over a local-directory store.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.source import generate
from pipeline.spark_server import SparkConnectServer
from testkit.pipeline_rig import SETTINGS, PipelineRig
from testkit.wait import wait_until

pytestmark = pytest.mark.spark

# Not a goal, a bound: a restarted server is found again long before this (the client's
# default retries alone waited minutes).
RECONNECT_TIMEOUT_S = 60.0


@pytest.fixture
def spark(tmp_path: Path) -> Iterator[SparkConnectServer]:
    server = SparkConnectServer(str(tmp_path / "spark"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pipeline(tmp_path: Path, spark: SparkConnectServer) -> Iterator[PipelineRig]:
    # One worker holds every partition: a move would show as a changed owner or epoch.
    settings = {**SETTINGS, "min_cluster_size": 1}
    store = f"file://{tmp_path / 'store'}"
    yield from PipelineRig(tmp_path, store, spark.url, settings=settings).running()


def owners(p: PipelineRig) -> dict[int, tuple[str, int]]:
    return {x["partition"]: (x["owner"], x["epoch"]) for x in p.table()}


def spark_health(p: PipelineRig, wid: str) -> dict[str, object]:
    health = p.health(wid)
    assert health is not None, f"{wid} does not answer"
    spark: dict[str, object] = health["spark"]
    return spark


def test_a_spark_restart_is_reconnected_to_without_a_partition_move(
    pipeline: PipelineRig, spark: SparkConnectServer
) -> None:
    p = pipeline
    p.start_worker("w1")
    p.wait_ready()
    p.producer.produce(generate(600, 30, seed=1))
    p.wait_caught_up()
    before = owners(p)
    assert {owner for owner, _ in before.values()} == {"w1"}
    assert p.metric("w1", "ripple_worker_spark_reachable") == 1

    # Input arrives, and the server dies under the batch that reads it; more arrives while
    # it is down (so a batch fails even if the first one beat the kill).
    p.producer.produce(generate(400, 30, seed=2))
    spark.kill()
    killed_at = time.monotonic()
    p.producer.produce(generate(300, 30, seed=3))
    wait_until(
        lambda: spark_health(p, "w1")["reachable"] is False,
        "w1 shows Spark unreachable",
        RECONNECT_TIMEOUT_S,
    )
    spark.start(port=spark.port)
    back_at = time.monotonic()
    wait_until(
        lambda: spark_health(p, "w1")["reachable"] is True,
        "w1 reconnected to the restarted Spark",
        RECONNECT_TIMEOUT_S,
    )
    reconnected_at = time.monotonic()
    p.producer.produce(generate(300, 30, seed=4))  # appended after it came back

    parts = p.wait_caught_up()
    caught_up_at = time.monotonic()
    got, want = p.state(parts), p.oracle()
    assert got == want
    assert sum(v[0] for v in want.values()) == 1600
    assert owners(p) == before, "a partition moved (owner or epoch changed)"
    assert p.metric("w1", "ripple_worker_spark_reconnects_total") >= 1
    assert p.metric("w1", "ripple_worker_spark_reachable") == 1
    print(
        f"\nspark kill -9 -> restarted server ready {back_at - killed_at:.1f} s -> worker "
        f"reconnected by {reconnected_at - back_at:.1f} s later -> every partition caught up "
        f"{caught_up_at - back_at:.1f} s after the server was ready "
        f"({caught_up_at - killed_at:.1f} s after the kill)"
    )
