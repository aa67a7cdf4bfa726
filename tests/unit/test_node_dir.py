"""The join record of a node added online: read back whole, and refused when it is not one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from coordinator.service.node_dir import JoinRecord, read_join_record, write_join_record
from replication.members import Member
from shared.errors import ConfigError


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
