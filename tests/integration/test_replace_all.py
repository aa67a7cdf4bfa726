"""Every coordinator node replaced in turn, the leader first, under a steady write load and
with workers heartbeating: the runbook docs/runbooks/replace-a-node.md run three
times, as an operator would, with `ripple coordinator --join` and `ripple nodes replace`.

At the end none of the original data directories exists, every acknowledged write is present
on the new nodes, no write failed other than with a retryable 503 (each is retried with its
Idempotency-Key until it lands), the cluster committed writes during every replacement, the
replicas agree, and no worker was ever declared dead (each still runs under the incarnation
it registered with, having registered once). `--soak` replaces the whole cluster three
times over.
"""

from __future__ import annotations

import random
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testkit.background import Background
from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until
from tests.chaos.harness import Figures, bring_up, check_replicas_equal

SETTINGS = {
    "total_partitions": 12,
    "min_cluster_size": 3,
    "heartbeat_timeout_s": 4.0,
    "checkpoint_interval_s": 1.0,
}
WRITERS = 2
WRITE_DEADLINE_S = 60.0  # one write's retries; it lands long before on a healthy cluster
CALL_TIMEOUT_S = 3.0
RETRY_S = 0.05
SOAK_ROUNDS = 3


@dataclass
class Writes:
    """What the writers saw: each write's outcome, every error status, the acks' times."""

    acked: list[str] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # status seen -> times
    failed: list[str] = field(default_factory=list)  # the answers of failed writes
    gave_up: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, status: str) -> None:
        with self.lock:
            self.errors[status] = self.errors.get(status, 0) + 1


class Writer(Background):
    """Registers unique worker ids, each retried with its Idempotency-Key (on another node,
    after a refused connection or a 503) until it is acknowledged. As the admin: a worker's
    own registration retried after it landed unseen is refused (409 worker_active, the id is
    live and the join token does not prove it is the same caller), which says nothing about
    the cluster; the admin's retry is answered from the dedup table."""

    def __init__(self, cluster: Cluster, writes: Writes, name: str) -> None:
        super().__init__(name)
        self.cluster = cluster
        self.writes = writes
        self.name = name
        self.rng = random.Random(name)

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            seq += 1
            self.write(f"{self.name}-{seq}")

    def write(self, wid: str) -> None:
        body = {"worker_id": wid, "address": "http://127.0.0.1:9"}
        headers = {"Idempotency-Key": f"reg-{wid}", "Authorization": f"Bearer {ADMIN}"}
        deadline = time.monotonic() + WRITE_DEADLINE_S
        while time.monotonic() < deadline:
            if self._stop.is_set():
                return  # the run is over: this write is neither acknowledged nor counted
            nodes = self.cluster.alive()
            if not nodes:
                self._stop.wait(RETRY_S)
                continue
            url = self.cluster.url(self.rng.choice(nodes)) + "/v1/workers"
            try:
                r = call("POST", url, body, headers=headers, timeout_s=CALL_TIMEOUT_S)
                if r.status == 307:
                    r = call(
                        "POST",
                        r.headers["Location"],
                        body,
                        headers=headers,
                        timeout_s=CALL_TIMEOUT_S,
                    )
            except OSError as exc:  # a node stopping, or a proposal that may have landed
                self.writes.saw(type(exc).__name__)
                self._stop.wait(RETRY_S)
                continue
            if r.status == 200:
                with self.writes.lock:
                    self.writes.acked.append(wid)
                    self.writes.acked_at.append(time.monotonic())
                return
            self.writes.saw(str(r.status))
            if r.status not in (307, 503):  # 307: sent on to a leader that just stepped down
                with self.writes.lock:
                    self.writes.failed.append(f"{wid}: {r.status} {r.body}")
                return  # a failed write: the test fails on it
            self._stop.wait(RETRY_S)
        self.writes.gave_up.append(wid)


def consistent(cluster: Cluster, path: str) -> dict:  # type: ignore[type-arg]
    def read() -> dict | None:  # type: ignore[type-arg]
        for nid in cluster.alive():
            try:
                r = cluster.get(nid, path + "?consistent=true")
                if r.status == 307:
                    r = call("GET", r.headers["Location"], timeout_s=CALL_TIMEOUT_S)
            except OSError:
                continue
            if r.status == 200:
                return dict(r.body)
        return None

    return wait_until(read, f"a consistent read of {path}", 60.0)


def leader_id(cluster: Cluster) -> str:
    return str(consistent(cluster, "/v1/nodes")["leader_id"])


def replace_every_node(tmp_path: Path, rounds: int) -> None:
    cluster = Cluster(tmp_path, **SETTINGS)
    workers: ScriptedWorkers = bring_up(cluster, workers=3)
    writes = Writes()
    writers = [Writer(cluster, writes, f"c{i}") for i in range(WRITERS)]
    try:
        registered = {
            w["worker_id"]: w["incarnation"] for w in consistent(cluster, "/v1/workers")["workers"]
        }
        assert set(registered) == {"w1", "w2", "w3"}
        for w in writers:
            w.start()
        originals = [s.id for s in cluster.specs]
        count = len(originals)
        for _round in range(rounds):
            # The leader first, then the others.
            first = leader_id(cluster)
            order = [first, *sorted(n for n in cluster.alive() if n != first)]
            for old in order:
                count += 1
                new = f"n{count}"
                began = time.monotonic()
                spec = cluster.join(new)
                cluster.nodes(
                    "replace", old, "--with", new, "--raft", spec.raft, "--http", spec.http
                )
                cluster.retire(old)
                shutil.rmtree(cluster.config.node_dir(old))
                # Writes kept landing while this node was being replaced.
                wait_until(
                    lambda began=began: any(t > began for t in writes.acked_at),
                    f"a write acknowledged while {old} was replaced by {new}",
                    30.0,
                )
                view = consistent(cluster, "/v1/nodes")
                voters = {n["id"] for n in view["nodes"] if n["voter"]}
                assert voters == set(cluster.alive()), (voters, cluster.alive())
        for w in writers:
            w.stop()
        assert not any(cluster.config.node_dir(n).exists() for n in originals)
        # No acknowledged write lost, and no write failed other than with a 503.
        present = {w["worker_id"] for w in consistent(cluster, "/v1/workers")["workers"]}
        lost = [wid for wid in writes.acked if wid not in present]
        assert not lost, f"{len(lost)} acknowledged writes lost: {lost[:10]}"
        assert not writes.failed and not writes.gave_up, (writes.failed, writes.gave_up)
        assert len(writes.acked) > 20, len(writes.acked)
        # Workers heartbeated throughout: none was ever declared dead (it would have
        # registered again, under a new incarnation).
        for wid, incarnation in registered.items():
            state = workers.state(wid)
            assert state["incarnation"] == incarnation, (wid, state["incarnation"])
            assert sum(1 for c in state["calls"] if c["call"] == "register") == 1, wid
        listed = {w["worker_id"]: w for w in consistent(cluster, "/v1/workers")["workers"]}
        for wid, incarnation in registered.items():
            assert listed[wid]["state"] == "active" and listed[wid]["incarnation"] == incarnation
        figures = Figures("replace-all", seed=0)
        check_replicas_equal(cluster, figures)
        assert not figures.violations, figures.violations
    finally:
        for w in writers:
            if w.alive():
                w.stop()
        workers.stop_all()
        cluster.stop_all()


def test_every_node_is_replaced_under_load(tmp_path: Path) -> None:
    replace_every_node(tmp_path, rounds=1)


@pytest.mark.soak
def test_the_whole_cluster_is_replaced_three_times_under_load(tmp_path: Path) -> None:
    replace_every_node(tmp_path, rounds=SOAK_ROUNDS)
