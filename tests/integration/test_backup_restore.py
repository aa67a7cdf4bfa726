"""Back up, restore, refuse: the runbooks docs/runbooks/backup.md and restore.md,
on real coordinator processes and scripted workers that host partitions and checkpoint.

`ripple backup` takes the state at one applied index from the leader, checks it, writes it
and records it in the cluster; a damaged copy of it (each kind of damage) is refused by
`ripple restore`, which then writes no data directory; the good one, restored into a fresh
cluster (its own ports and data directories, a new cluster id), gives the same partition
table, owners, checkpoints and workers, with every epoch jumped by the documented rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.core.backup import load_backup
from coordinator.core.fencing import EPOCH_JUMP_DEFAULT
from coordinator.core.versions import COMMAND_SET_VERSION
from replication.identity import read_cluster_id
from testkit.cli import ripple
from testkit.cluster import ADMIN, Cluster
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until
from tests.unit.test_backup_file import damaged

FAST = {
    "total_partitions": 8,
    "min_cluster_size": 2,
    "heartbeat_interval_s": 0.3,
    "suspect_after_s": 1.0,
    "lease_s": 1.5,
    "heartbeat_timeout_s": 2.5,
    "checkpoint_interval_s": 0.5,
}
WAIT_S = 30.0


def consistent(c: Cluster, path: str) -> dict[str, Any]:
    return c.get(c.leader(WAIT_S), f"{path}?consistent=true").body  # type: ignore[no-any-return]


def test_backup_then_refuse_damage_then_restore_into_a_fresh_cluster(tmp_path: Path) -> None:
    for name in ("old", "new"):
        (tmp_path / name).mkdir()
    old = Cluster(tmp_path / "old", **FAST)
    workers = ScriptedWorkers(old)
    old.start_all()
    try:
        old.ready(WAIT_S)
        for wid in ("w1", "w2"):
            workers.start(wid)
        wait_until(
            lambda: all(
                p["status"] == "online" and p["checkpoint"] is not None
                for p in consistent(old, "/v1/partitions")["partitions"]
            ),
            "every partition online with a checkpoint",
            WAIT_S,
        )
        wait_until(
            lambda: (
                consistent(old, "/v1/status")["finalized_command_set_version"]
                == COMMAND_SET_VERSION
            ),
            "the newest command-set version finalized",
            WAIT_S,
        )
        out = tmp_path / "cluster.backup"
        urls = [arg for s in old.specs for arg in ("--coordinator", s.url)]
        done = ripple("backup", "--out", str(out), "--admin-token", ADMIN, *urls)
        assert done.returncode == 0, done.stderr
        assert "warning" not in done.stdout, done.stdout
        assert out.stat().st_mode & 0o777 == 0o600
        header, state = load_backup(out.read_bytes())
        old_id = old.health("n1")["cluster_id"]  # type: ignore[index]
        assert header.cluster_id == old_id and f"of cluster {old_id}" in done.stdout
        assert header.applied_index > 0 and header.command_set_version == COMMAND_SET_VERSION
        assert {o.owner for o in state.partitions} == {"w1", "w2"}
        assert all(p.checkpoint is not None for p in state.partitions)
        recorded = consistent(old, "/v1/status")["last_backup"]
        assert recorded["applied_index"] == header.applied_index
        assert recorded["sha256"] == header.body_sha256
        # A second backup never replaces the first file; into a store, it is put create-only
        # under backups/<cluster id>/.
        again = ripple("backup", "--out", str(out), "--admin-token", ADMIN, *urls)
        assert again.returncode != 0 and "exists" in again.stderr
        store = tmp_path / "backups"
        stored = ripple("backup", "--store", f"file://{store}", "--admin-token", ADMIN, *urls)
        assert stored.returncode == 0, stored.stderr
        (copy,) = (store / "backups" / old_id).iterdir()
        assert f"file://{copy}" in stored.stdout
        later, _ = load_backup(copy.read_bytes())
        assert later.applied_index > header.applied_index
    finally:
        workers.stop_all()
        old.stop_all()

    new = Cluster(tmp_path / "new", **FAST)
    new_data = Path(new.config.data_dir)
    for kind, (bad, reason) in damaged(out.read_bytes()).items():
        path = tmp_path / "damaged.backup"
        path.write_bytes(bad)
        refused = ripple("restore", "--backup", str(path), "--config", str(new.config_path))
        assert refused.returncode != 0, kind
        assert reason in refused.stderr, (kind, refused.stderr)
        assert not new_data.exists(), kind

    made = ripple("restore", "--backup", str(out), "--config", str(new.config_path))
    assert made.returncode == 0, made.stderr
    ids = {read_cluster_id(new_data / n) for n in ("n1", "n2", "n3")}
    assert len(ids) == 1 and None not in ids and old_id not in ids
    (new_id,) = ids
    assert f"new cluster {new_id} (was {old_id})" in made.stdout
    again = ripple("restore", "--backup", str(out), "--config", str(new.config_path))
    assert again.returncode != 0 and "exist" in again.stderr

    new.start_all()
    try:
        new.ready(WAIT_S)
        assert {new.health(n)["cluster_id"] for n in ("n1", "n2", "n3")} == {new_id}  # type: ignore[index]
        parts = consistent(new, "/v1/partitions")["partitions"]
        assert len(parts) == len(state.partitions)
        for got, was in zip(parts, state.partitions, strict=True):
            assert got["owner"] == was.owner
            assert got["epoch"] == was.epoch + EPOCH_JUMP_DEFAULT
            assert was.checkpoint is not None
            ck = got["checkpoint"]
            assert (ck["offset"], ck["uri"], ck["epoch"], ck["at_ms"]) == (
                was.checkpoint.offset,
                was.checkpoint.uri,
                was.checkpoint.epoch,
                was.checkpoint.at_ms,
            )
        history = new.get(new.leader(), "/v1/partitions/0/history").body["history"]
        assert history[-1]["reason"] == "restore"
        assert f"cluster {old_id} at index {header.applied_index}" in history[-1]["note"]
        workers_now = consistent(new, "/v1/workers")["workers"]
        assert {(w["worker_id"], w["incarnation"]) for w in workers_now} == {
            (w.worker_id, w.incarnation) for w in state.workers.values()
        }
        st = consistent(new, "/v1/status")
        assert st["generation"] == state.generation + 1
        assert st["finalized_command_set_version"] == COMMAND_SET_VERSION
    finally:
        new.stop_all()
