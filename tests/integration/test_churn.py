"""Churn on three real coordinator processes: workers register under ids never seen before
and die (never heartbeat, as pods of a replaced Deployment), wave after wave, while one node
is down; the leader declares them dead and retires them `retire_after_s` later. Asserted on
counts and sizes, never on timings (those are `python -m bench memory`'s): the workers the
replicated state holds stay within the live set plus the retention window while the churn
runs, the state a backup reads holds none of them once the window has passed (every id
retired, the incarnation floor raised), and the node restarted after the churn catches up
to that same small state. The default run registers WAVES * WAVE_IDS ids; `--soak` runs
at least 100,000 through the real registration route."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import pytest

from coordinator.core.backup import load_backup
from coordinator.core.cluster import ClusterState
from coordinator.core.model import REQUESTS_RETAINED_MAX
from coordinator.core.snapshot import encode_state
from testkit.cli import ripple
from testkit.cluster import ADMIN, Cluster
from testkit.wait import wait_until

TIMEOUT_S = 2.0  # heartbeat_timeout_s: a registered worker that never heartbeats is dead
RETAIN_S = 2.0  # retire_after_s
SETTINGS = {
    "total_partitions": 8,
    "min_cluster_size": 1_000_000,  # nothing assigned: no host calls to workers that are not
    "heartbeat_timeout_s": TIMEOUT_S,
    "retire_after_s": RETAIN_S,
    "log_compaction_min_entries": 200,
}
WAVES, WAVE_IDS = 6, 100
SOAK_IDS = 100_000
REGISTER_THREADS = 16
# How late the leader may be with a death verdict or a retirement on a loaded machine, past
# the timeout and the window: ids registered longer ago than all three must be gone.
SLACK_S = 20.0
WAIT_S = 120.0


def _register(c: Cluster, leader: str, ids: list[str]) -> int:
    """Register `ids`; the highest incarnation the registrations were given."""

    def one(wid: str) -> int:
        body = {"worker_id": wid, "address": "http://127.0.0.1:9"}
        r = c.post(leader, "/v1/workers", body)
        if r.status != 200:  # a leader change mid-wave: the next node takes it
            r = c.write_via_any("/v1/workers", body)
        assert r.status == 200, r
        return int(r.body["incarnation"])

    with concurrent.futures.ThreadPoolExecutor(REGISTER_THREADS) as pool:
        return max(pool.map(one, ids))


def _held(c: Cluster, node: str) -> int:
    h = c.health(node) or {}
    return int(h.get("cluster", {}).get("total_workers", -1))


def _backup(c: Cluster, tmp: Path) -> tuple[int, ClusterState]:
    out = tmp / f"state-{time.monotonic_ns()}.backup"
    urls = [arg for s in c.specs for arg in ("--coordinator", s.url)]
    done = ripple("backup", "--out", str(out), "--admin-token", ADMIN, *urls)
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    return len(data), load_backup(data)[1]


def _churn(tmp_path: Path, waves: int, wave_ids: int) -> None:
    c = Cluster(tmp_path, **SETTINGS)
    c.start_all()
    try:
        leader = c.ready(WAIT_S)
        _, start = _backup(c, tmp_path)
        behind = next(n for n in ("n1", "n2", "n3") if n != leader)
        c.procs[behind].stop()  # it catches up after the churn
        issued = 0
        registered: list[tuple[float, int]] = []  # (when the wave ended, its size)
        for wave in range(waves):
            ids = [f"pod-{wave:04d}-{i:06d}" for i in range(wave_ids)]
            issued = max(issued, _register(c, c.leader(WAIT_S), ids))
            registered.append((time.monotonic(), len(ids)))
            held = _held(c, c.leader(WAIT_S))
            recent = sum(
                n for at, n in registered if time.monotonic() - at < TIMEOUT_S + RETAIN_S + SLACK_S
            )
            # The live set is empty (none heartbeats): the state holds at most the ids of the
            # waves still within the timeout, the window and the slack.
            assert 0 <= held <= recent, (wave, held, recent)
        total = waves * wave_ids
        wait_until(lambda: _held(c, c.leader(WAIT_S)) == 0, "every departed id retired", WAIT_S)
        size_after, state = _backup(c, tmp_path)
        assert not state.workers and state.retired_total == total
        # A new id's first incarnation is one above every retired one, so the floor rises as
        # waves retire while others register; once all are retired it is the highest issued.
        assert state.incarnation_floor == issued
        # Beyond the dedup table (bounded by REQUESTS_RETAINED_MAX results, whatever the
        # churn), the state encodes to what it was before the churn plus its retired count
        # and the record of the first backup (RecordBackup): not a byte per id.
        assert len(state.requests) <= REQUESTS_RETAINED_MAX
        state.requests.clear()
        start.requests.clear()
        assert len(encode_state(state)) <= len(encode_state(start)) + 256, size_after
        # The node that was down catches up to the same small state.
        c.start(behind)
        wait_until(lambda: _held(c, behind) == 0, f"{behind} caught up", WAIT_S)
        h = c.health(behind) or {}
        assert h.get("cluster", {}).get("total_workers") == 0
        # What it keeps on disk (its dump and journal) is of the retired state's size, not
        # one record per id it was away for.
        files = {p.name: p.stat().st_size for p in (tmp_path / "data" / behind).rglob("*")}
        assert files and max(files.values()) < 4 * size_after + 65_536, (files, size_after)
    finally:
        c.stop_all()


def test_churn_keeps_the_state_to_the_live_set_and_the_window(tmp_path: Path) -> None:
    _churn(tmp_path, WAVES, WAVE_IDS)


@pytest.mark.soak
@pytest.mark.timeout(7200)
def test_churn_soak_100k_ids(tmp_path: Path) -> None:
    _churn(tmp_path, 100, SOAK_IDS // 100)
