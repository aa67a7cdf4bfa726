"""`bench.disk_floor`: three real processes write every record to their journals in each mode,
and a bad mode is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import disk_floor

WRITES = 25


def _records_in(path: Path) -> int:
    """How many records a journal's end offset says it holds."""
    end = int.from_bytes(path.read_bytes()[:4], "little")
    return (end - disk_floor.HEADER_BYTES) // disk_floor.RECORD_BYTES


@pytest.mark.parametrize("mode", disk_floor.MODES)
def test_each_mode_writes_every_record_on_all_three_nodes(tmp_path: Path, mode: str) -> None:
    result = disk_floor.measure(tmp_path, mode, WRITES)

    assert result["ops_per_s"] > 0
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert result["errors"] == 0
    # Each follower had answered every record before the leader closed it.
    for name in ("leader", "follower1", "follower2"):
        assert _records_in(tmp_path / f"{mode}-{name}.journal") == WRITES, name


def test_each_mode_syncs_on_the_nodes_it_names(tmp_path: Path) -> None:
    synced = {
        mode: disk_floor.measure(tmp_path, mode, 4)["synced_records"] for mode in disk_floor.MODES
    }

    # The leader, the first follower, the second.
    assert synced == {"off": [0, 0, 0], "shared_disk": [4, 4, 4], "disk_each": [0, 4, 0]}


def test_an_unknown_mode_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        disk_floor.measure(tmp_path / "x", "fast", 3)
    assert not (tmp_path / "x").exists()
