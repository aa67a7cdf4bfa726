"""A node's own files beside Raft's: the cluster id every node started from one cluster file
agrees on (and a directory keeps once written), and the join record of a node added online,
read back whole and refused when it is not one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from coordinator.config import ClusterConfig, NodeSpec
from coordinator.service.node_dir import (
    JoinRecord,
    cluster_id_of,
    derived_cluster_id,
    read_join_record,
    write_cluster_id,
    write_join_record,
)
from replication.members import Member
from shared.errors import ConfigError

SECRET = "unit-secret-0123456789abcdef"


def config(*rafts: str, **kw: str) -> ClusterConfig:
    nodes = tuple(
        NodeSpec(id=f"n{i}", raft=r, http=f"127.0.0.1:80{i}0") for i, r in enumerate(rafts)
    )
    return ClusterConfig(cluster_secret=SECRET, nodes=nodes, fsync=False, **kw)  # type: ignore[arg-type]


def test_nodes_of_one_cluster_file_agree_and_another_file_differs() -> None:
    one = derived_cluster_id(config("a:1", "b:2", "c:3"))
    assert one == derived_cluster_id(config("c:3", "a:1", "b:2"))  # the order does not matter
    assert one != derived_cluster_id(config("a:1", "b:2", "d:4"))
    assert derived_cluster_id(config("a:1", cluster_id="chosen")) == "chosen"


def test_a_directory_keeps_the_id_it_was_given(tmp_path: Path) -> None:
    first = config("a:1", "b:2", "c:3")
    node_dir = tmp_path / "n1"
    assert cluster_id_of(node_dir, first) == derived_cluster_id(first)
    # Written once: a later cluster file (or a restore's new id) does not move it...
    assert cluster_id_of(node_dir, config("x:9")) == derived_cluster_id(first)
    # ...unless the directory is given another one outright, as a restore does.
    write_cluster_id(node_dir, "restored", durable=False)
    assert cluster_id_of(node_dir, first) == "restored"


def test_a_join_record_reads_back_whole(tmp_path: Path) -> None:
    record = JoinRecord(
        node=Member(id="n4", raft="10.0.0.4:7101", http="10.0.0.4:8101"),
        raft_bind="0.0.0.0:7101",
        voters=(
            Member(id="n1", raft="10.0.0.1:7101", http="10.0.0.1:8101"),
            Member(id="n2", raft="10.0.0.2:7101", http="10.0.0.2:8101"),
        ),
        cluster_id="c1",
    )
    assert read_join_record(tmp_path) is None
    write_join_record(tmp_path, record, durable=False)
    assert read_join_record(tmp_path) == record
    write_join_record(tmp_path, dataclasses.replace(record, admitted=True), durable=False)
    assert read_join_record(tmp_path).admitted is True  # type: ignore[union-attr]


def test_a_file_that_is_not_a_join_record_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "join.json").write_text('{"node": {"id": "n4"}}')
    with pytest.raises(ConfigError, match="not a join record"):
        read_join_record(tmp_path)
