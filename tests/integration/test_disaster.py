"""Recovering from a lost majority, the runbook docs/runbooks/lost-majority.md, on the pipeline
rig: three coordinators, real `ripple worker` processes on the
shared Spark Connect server, a local store.

The pipeline catches up; all three coordinators die; two data directories are deleted (the
majority is lost for good); the third is moved aside and `ripple recover` makes a NEW
cluster's data directories from it, with a new cluster id and every epoch jumped; the nodes
start on them; the workers, never restarted, reconnect on their own and are hosted again at
the new epochs; and after more input every key of the pipeline equals one Spark batch job
over the whole input.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.core.fencing import EPOCH_JUMP_DEFAULT
from pipeline.source import generate
from replication.identity import read_cluster_id
from testkit.cli import ripple
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until

NODES = ("n1", "n2", "n3")
SURVIVOR = "n3"
WAIT_S = 60.0


@pytest.fixture
def pipeline(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path / 'store'}", spark_remote).running()


@pytest.mark.spark
def test_a_cluster_forced_anew_from_one_survivor_keeps_every_key_exact(
    pipeline: PipelineRig, tmp_path: Path
) -> None:
    p, c = pipeline, pipeline.cluster
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid)
    p.producer.produce(generate(3000, 40, seed=21))
    p.check_equal_to_batch_job()
    before = {
        w["worker_id"]: w["incarnation"] for w in c.get(c.leader(), "/v1/workers").body["workers"]
    }
    data = Path(c.config.data_dir)
    old_id = read_cluster_id(data / SURVIVOR)

    # The majority is lost for good: every node dies, two of them with their disks.
    for node_id in NODES:
        c.kill9(node_id)
    lost_at = time.monotonic()
    for node_id in NODES:
        if node_id != SURVIVOR:
            shutil.rmtree(data / node_id)
    survivor = tmp_path / "survivor"
    (data / SURVIVOR).rename(survivor)
    p.producer.produce(generate(1000, 40, seed=22))  # input keeps arriving meanwhile

    made = ripple("recover", "--from-data-dir", str(survivor), "--config", str(c.config_path))
    assert made.returncode == 0, made.stderr
    new_id = read_cluster_id(data / SURVIVOR)
    assert new_id is not None and new_id != old_id
    assert {read_cluster_id(data / n) for n in NODES} == {new_id}
    assert f"new cluster {new_id} (was {old_id})" in made.stdout

    for node_id in NODES:
        c.start(node_id)
    c.ready(WAIT_S)
    assert {(c.health(n) or {}).get("cluster_id") for n in NODES} == {new_id}

    # The workers were never restarted: they reconnect under the same incarnations, and
    # every partition is hosted again at an epoch the old cluster never handed out.
    def all_online() -> list[dict[str, Any]] | None:
        table = p.table()
        return table if all(x["status"] == "online" for x in table) else None

    parts = wait_until(all_online, "every partition online again", WAIT_S)
    assert all(x["epoch"] > EPOCH_JUMP_DEFAULT for x in parts)
    after = {
        w["worker_id"]: w["incarnation"] for w in c.get(c.leader(), "/v1/workers").body["workers"]
    }
    assert after == before
    p.producer.produce(generate(1000, 40, seed=23))
    total = p.check_equal_to_batch_job()
    assert total == 5000
    print(f"\nlost majority -> every key exact again: {time.monotonic() - lost_at:.1f} s")
