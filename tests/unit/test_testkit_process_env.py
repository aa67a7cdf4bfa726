"""The test kit's per-process environment hook: one node of a `NodeCluster`, or one worker
of a `PipelineRig`, runs with variables of its own (a fault shim's ``LD_PRELOAD``) over the
inherited environment, on every start of it, and no other process gets them."""

from __future__ import annotations

import sys
from pathlib import Path

from testkit.nodes import NodeCluster, NodeProgram
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until

VAR = "RIPPLE_TEST_NODE_ENV"
PRINT_VAR = f"import os; print('env=' + os.environ.get({VAR!r}, '-'), flush=True)"


def _cluster(tmp_path: Path) -> NodeCluster:
    program = NodeProgram(
        argv=lambda _node: [sys.executable, "-c", PRINT_VAR],
        health_path="/unused",
        agreed_leader=lambda _h: None,
    )
    return NodeCluster(tmp_path, program, {"n1": "http://127.0.0.1:9", "n2": "http://127.0.0.1:9"})


def _printed(cluster: NodeCluster, node: str) -> str:
    proc = cluster.procs[node]
    wait_until(lambda: not proc.alive(), f"{node} exited", 10.0)
    proc.stop()
    return proc.output()


def test_node_env_reaches_only_its_node_on_every_start(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path)
    cluster.node_env["n1"] = {VAR: "shimmed"}
    cluster.start_all()
    assert _printed(cluster, "n1") == "env=shimmed\n"
    assert _printed(cluster, "n2") == "env=-\n"
    cluster.start("n1")  # a restart of the node keeps its environment
    assert _printed(cluster, "n1") == "env=shimmed\nenv=shimmed\n"


def test_worker_env_is_merged_over_the_rigs_own_and_kept(tmp_path: Path) -> None:
    rig = PipelineRig(tmp_path, f"file://{tmp_path}/store", "sc://127.0.0.1:9")
    rig.worker_env["w1"] = {VAR: "shimmed", "PYSPARK_PYTHON": "/bin/false"}
    assert rig.env_of("w1") == {VAR: "shimmed", "PYSPARK_PYTHON": "/bin/false"}
    assert rig.env_of("w2") == {"PYSPARK_PYTHON": sys.executable}
