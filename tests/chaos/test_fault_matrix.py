"""Fault matrix, clock and network cells (issue 39): each cell runs under the pipeline of
scenario f (three coordinators, `ripple worker` processes on the session's Spark Connect
server, a producer appending all along) and ends as scenario f does: every key equal to the
batch job, the log holding exactly what the producer appended (no acknowledged write
lost), every recorded checkpoint loading, no partition's epoch gone back.

The cluster's Raft links run through `RaftLinks` forwarders and every coordinator and one
worker (w1) run under the wall-clock shim (offset 0 until a cell steps it), so one rig
serves every cell. A `Watch` thread beside the pipeline commits a barrier every
WATCH_EVERY_S (a write through Raft: refused or timed out means the cluster cannot write),
and reads the leader and the worker table: a new leader is an election, a worker that
leaves ACTIVE or changes incarnation is a liveness decision.

Each cell prints one ``[matrix]`` line, the figures of docs/reliability.md's fault matrix:
time to detect (the fault's first visible effect: a refused write or a new leader; "-" when
nothing is to be seen), time to recover (fault undone -> writes land and the pipeline caught
up), writes refused meanwhile. The two fastest cells (the clock steps) run by default; the
network cells are `soak` (opt-in with --soak), as each holds its fault for 20-30 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.source import generate
from testkit.background import Background
from testkit.cluster import ADMIN
from testkit.faults.clock import WallClock
from testkit.faults.netproxy import LinkFaults
from testkit.faults.raft_links import RaftLinks
from testkit.pipeline_rig import CATCH_UP_TIMEOUT_S, SETTINGS, START_TIMEOUT_S, PipelineRig
from testkit.wait import wait_until
from tests.chaos.harness import Figures, request, wait_settled
from tests.chaos.test_pipeline_chaos import (
    Feed,
    Observer,
    check_checkpoints,
    check_equal_to_batch_job,
)

pytestmark = [pytest.mark.spark]

SEED = 39
WORKERS = ("w1", "w2")
CLOCK_WORKER = "w1"
INITIAL_RECORDS = 400
KEYS = 20
STEP_S = 3600.0
HOLD_STEP_S = 8.0  # long enough for a few heartbeats, token checks and planner rounds
LATENCY = LinkFaults(delay_s=0.15, loss=0.05)
LATENCY_HOLD_S = 30.0
PARTITION_HOLD_S = 20.0
WATCH_EVERY_S = 0.25
WATCH_TIMEOUT_S = 3.0
RECOVER_TIMEOUT_S = 120.0
# Elections under 150 ms latency with 5% loss as stalls: allowed, but bounded.
ELECTIONS_UNDER_LATENCY_MAX = 3


@dataclass
class Sample:
    at_s: float
    ok: bool


# Barriers acknowledged before a cell's fault: the watch's baseline.
BASELINE_WRITES = 5


class Watch(Background):
    """Barrier writes, the leader and the worker table, sampled all along the cell."""

    every_s = WATCH_EVERY_S
    join_timeout_s = 4 * WATCH_TIMEOUT_S

    def __init__(self, rig: PipelineRig) -> None:
        super().__init__("watch")
        self.rig = rig
        self.began = time.monotonic()
        self.writes: list[Sample] = []
        self.leaders: list[tuple[float, str]] = []  # each change of the agreed leader
        self.workers: dict[str, tuple[str, int]] = {}  # worker id -> (state, incarnation)
        self.liveness_changes: list[str] = []

    def now_s(self) -> float:
        return time.monotonic() - self.began

    def step(self) -> None:
        try:
            r = request(self.rig.cluster, "POST", "/v1/admin/barrier", {}, token=ADMIN)
            ok = r.status == 200
        except OSError:
            ok = False
        self.writes.append(Sample(self.now_s(), ok))
        leader = self._leader()
        if leader is not None and (not self.leaders or self.leaders[-1][1] != leader):
            self.leaders.append((self.now_s(), leader))
        self._read_workers()

    def _leader(self) -> str | None:
        for nid in self.rig.cluster.alive():
            h = self.rig.cluster.health(nid)
            if h and h.get("role") == "leader" and h.get("ready"):
                return nid
        return None

    def _read_workers(self) -> None:
        try:
            r = request(self.rig.cluster, "GET", "/v1/workers?consistent=true")
        except OSError:
            return
        if r.status != 200:
            return
        for w in r.body["workers"]:
            wid = w["worker_id"]
            now = (w["state"], int(w["incarnation"]))
            last = self.workers.get(wid)
            if last is not None and last != now:
                self.liveness_changes.append(f"{wid} {last} -> {now} at {self.now_s():.1f}s")
            self.workers[wid] = now

    # -- figures ------------------------------------------------------------------------------

    def refused_between(self, a_s: float, b_s: float) -> int:
        return sum(1 for s in self.writes if a_s <= s.at_s <= b_s and not s.ok)

    def first_effect_after(self, a_s: float) -> float | None:
        """Seconds from `a_s` to the first refused write or new leader after it."""
        times = [s.at_s for s in self.writes if s.at_s >= a_s and not s.ok]
        times += [t for t, _ in self.leaders if t >= a_s]
        return min(times) - a_s if times else None

    def elections_after(self, a_s: float) -> list[str]:
        return [nid for t, nid in self.leaders if t >= a_s]

    def wait_write_lands(self, timeout_s: float) -> float:
        """The watch time of the first acknowledged write from now on."""
        since = self.now_s()

        def landed() -> float | None:
            after = [s.at_s for s in list(self.writes) if s.at_s > since and s.ok]
            return after[0] if after else None

        return wait_until(landed, "a write acknowledged", timeout_s, 0.1)


@dataclass
class Matrix:
    """One running pipeline with every fault the cells use wired in."""

    rig: PipelineRig
    links: RaftLinks
    clocks: dict[str, WallClock]  # coordinator id or CLOCK_WORKER -> its wall clock
    feed: Feed
    observer: Observer
    watch: Watch


@pytest.fixture
def matrix(
    tmp_path: Path, spark_remote: str, moto_endpoint: str, s3_bucket: tuple[Any, str]
) -> Iterator[Matrix]:
    _, bucket = s3_bucket
    rig = PipelineRig(
        tmp_path,
        f"s3://{bucket}/pipeline",
        spark_remote,
        moto_endpoint,
        # Two workers, not three: less Spark on shared cores; both are needed to assign.
        settings={**SETTINGS, "min_cluster_size": len(WORKERS), "raft_bind": True},
    )
    cluster = rig.cluster
    clocks = {s.id: WallClock(tmp_path / f"clock-{s.id}") for s in cluster.specs}
    clocks[CLOCK_WORKER] = WallClock(tmp_path / f"clock-{CLOCK_WORKER}")
    for s in cluster.specs:
        cluster.node_env[s.id] = clocks[s.id].env()
    links = RaftLinks(
        cluster.specs,
        lambda nid: p.pid if (p := cluster.procs.get(nid)) is not None and p.alive() else None,
        seed=SEED,
    )
    links.start()
    try:
        rig.start()
        rig.producer.produce(generate(INITIAL_RECORDS, KEYS, seed=SEED))
        for wid in WORKERS:
            env = clocks[wid].env() if wid == CLOCK_WORKER else None
            rig.start_worker(wid, env=env)
        rig.wait_ready(START_TIMEOUT_S)  # a worker's start takes minutes on a loaded machine
        wait_until(rig.caught_up, "the initial records processed", CATCH_UP_TIMEOUT_S, 0.5)
        feed, observer, watch = Feed(rig.producer, SEED), Observer(rig), Watch(rig)
        feed.start()
        observer.start()
        watch.start()
        try:
            yield Matrix(rig, links, clocks, feed, observer, watch)
        finally:
            for clock in clocks.values():
                clock.reset()
            links.heal()
            for bg in (feed, observer, watch):
                if bg.alive():
                    bg.stop()
    finally:
        rig.stop()
        links.close()


def finish(m: Matrix, figures: Figures) -> float:
    """Producer stopped, the pipeline caught up; the scenario-f end checks into `figures`.
    Returns the watch time it caught up at."""
    m.feed.stop()
    wait_settled(m.rig.cluster, RECOVER_TIMEOUT_S)
    parts = wait_until(m.rig.caught_up, "the pipeline caught up", RECOVER_TIMEOUT_S, 0.5)
    caught_up = m.watch.now_s()
    m.observer.stop()
    m.observer.record(parts)
    appended = None if m.feed.errors else INITIAL_RECORDS + m.feed.records
    check_equal_to_batch_job(m.rig, parts, appended, figures)
    check_checkpoints(m.rig, m.observer.checkpoints, figures)
    figures.violations.extend(m.observer.violations)
    return caught_up


def run_cell(
    m: Matrix,
    cell: str,
    fault: Callable[[], None],
    undo: Callable[[], None],
    hold_s: float,
) -> tuple[Figures, float, float]:
    """Fault for `hold_s`, undone, recovery timed; the figures line printed. Returns the
    figures and the watch times the fault began and was undone."""
    figures = Figures(scenario=f"matrix_{cell}", seed=SEED)
    started = time.monotonic()
    # The watch's baseline: a few acknowledged barriers before the fault.
    wait_until(
        lambda: sum(s.ok for s in list(m.watch.writes)) >= BASELINE_WRITES, "a baseline", 30.0
    )
    began = m.watch.now_s()
    fault()
    figures.fault(cell)
    try:
        time.sleep(hold_s)
    finally:
        undo()
    undone = m.watch.now_s()
    landed = m.watch.wait_write_lands(RECOVER_TIMEOUT_S)
    recovered = finish(m, figures)
    m.watch.stop()
    detect = m.watch.first_effect_after(began)
    refused = m.watch.refused_between(began, landed)
    figures.ops.update(
        writes_refused=refused,
        writes_acknowledged=sum(1 for s in m.watch.writes if s.ok),
        elections=len(m.watch.elections_after(began)),
        records_appended=INITIAL_RECORDS + m.feed.records,
    )
    figures.duration_s = time.monotonic() - started
    print(
        f"\n[matrix] {cell}: detect={'-' if detect is None else f'{detect:.1f}s'} "
        f"write_back={max(0.0, landed - undone):.1f}s caught_up={recovered - undone:.1f}s "
        f"writes_refused={refused} elections={len(m.watch.elections_after(began))} "
        f"liveness_changes={len(m.watch.liveness_changes)}"
    )
    print(figures.line())
    return figures, began, undone


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if item)


def clock_cell(m: Matrix, cell: str, who: str) -> None:
    clock = m.clocks[who]
    proc = m.rig.workers[who] if who in m.rig.workers else m.rig.cluster.procs[who]
    # A step that reached no process would pass every check: that run is INVALID.
    shim = environ(proc.pid)
    if any(shim.get(k) != v for k, v in clock.env().items()):
        raise AssertionError(f"INVALID RUN: {who} (pid {proc.pid}) runs without its clock shim")
    figures, _, _ = run_cell(
        m, cell, lambda: clock.step(STEP_S), lambda: clock.step(-STEP_S), HOLD_STEP_S
    )
    # No liveness decision is the step's: no worker left ACTIVE or re-registered (a token
    # read as expired on the stepped wall clock would make it), no election.
    figures.violations.extend(m.watch.liveness_changes)
    if figures.ops["elections"]:
        figures.violations.append(f"{figures.ops['elections']} elections under a clock step")
    assert not figures.violations, f"{cell}: {figures.violations}"


def test_clock_step_on_the_leader(matrix: Matrix) -> None:
    leader = matrix.rig.cluster.leader()
    clock_cell(matrix, "clock_step_leader", leader)


def test_clock_step_on_a_worker(matrix: Matrix) -> None:
    clock_cell(matrix, "clock_step_worker", CLOCK_WORKER)


@pytest.mark.soak
def test_latency_and_loss_between_coordinators(matrix: Matrix) -> None:
    links = matrix.links
    figures, began, _ = run_cell(
        matrix,
        "latency_150ms_loss_5pct",
        lambda: links.set_all(LATENCY),
        links.heal,
        LATENCY_HOLD_S,
    )
    elections = figures.ops["elections"]
    if elections > ELECTIONS_UNDER_LATENCY_MAX:
        figures.violations.append(f"{elections} elections > {ELECTIONS_UNDER_LATENCY_MAX}")
    during = [s for s in matrix.watch.writes if began <= s.at_s <= began + LATENCY_HOLD_S]
    if not any(s.ok for s in during):
        figures.violations.append("no write acknowledged under latency and loss")
    figures.violations.extend(matrix.watch.liveness_changes)
    assert not figures.violations, figures.violations


@pytest.mark.soak
def test_one_way_partition_of_the_leaders_outbound_traffic(matrix: Matrix) -> None:
    cluster, links = matrix.rig.cluster, matrix.links
    old = cluster.leader()
    figures, began, _ = run_cell(
        matrix,
        "leader_outbound_cut",
        lambda: links.isolate_outbound(old),
        links.heal,
        PARTITION_HOLD_S,
    )
    successors = [nid for nid in matrix.watch.elections_after(began) if nid != old]
    if not successors:
        figures.violations.append(f"no other node led while {old}'s outbound was cut")
    # After heal: one leader all agree on, the old one among its followers.
    leader = cluster.leader(RECOVER_TIMEOUT_S)
    h = cluster.health(old) or {}
    if h.get("leader_id") != leader:
        figures.violations.append(f"{old} did not converge: its health {h}, leader {leader}")
    assert not figures.violations, figures.violations
