"""The fault matrix's rig and figures (issue 39), shared by the cell files
`tests/chaos/test_fault_matrix*.py`: a running pipeline of scenario f (three coordinators,
`ripple worker` processes on the session's Spark Connect server, a producer appending all
along) whose Raft links run through `RaftLinks` forwarders and whose coordinators and one
worker (w1) run under the wall-clock shim, plus whatever a cell file adds through `Options`
(a disk shim's environment, a store fault proxy). A `Watch` thread beside the pipeline
commits a barrier every WATCH_EVERY_S (a write through Raft: refused or timed out means the
cluster cannot write) and reads the leader and the worker table: a new leader is an
election, a worker that leaves ACTIVE or changes incarnation is a liveness decision.

`run_cell` holds one fault, undoes it, and ends as scenario f does: every key equal to the
batch job, the log holding exactly what the producer appended, every recorded checkpoint
loading, no partition's epoch gone back. It prints one ``[matrix]`` line, the figures of
docs/reliability.md's fault matrix: time to detect, time to recover, writes refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.source import generate
from testkit.background import Background
from testkit.cluster import ADMIN
from testkit.faults.clock import WallClock
from testkit.faults.raft_links import RaftLinks
from testkit.faults.shim import merged_env
from testkit.http import call
from testkit.pipeline_rig import CATCH_UP_TIMEOUT_S, SETTINGS, START_TIMEOUT_S, PipelineRig
from testkit.wait import wait_until
from tests.chaos.harness import Figures, request, wait_settled
from tests.chaos.test_pipeline_chaos import (
    Feed,
    Observer,
    check_checkpoints,
    check_equal_to_batch_job,
)

SEED = 39
WORKERS = ("w1", "w2")
CLOCK_WORKER = "w1"
INITIAL_RECORDS = 400
KEYS = 20
WATCH_EVERY_S = 0.25
WATCH_TIMEOUT_S = 3.0
RECOVER_TIMEOUT_S = 120.0


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
    # Records a cell appended itself, beside the feed's (a burst the fault meets).
    extra_records: int = 0


@dataclass
class Options:
    """What a cell file changes in the rig before it starts."""

    # Environment added to each coordinator process (after the clock shim's), by node id.
    node_env: Callable[[str], dict[str, str]] = lambda _nid: {}
    # Environment added to each worker process, by worker id.
    worker_env: Callable[[str], dict[str, str]] = lambda _wid: {}
    # The S3 endpoint workers talk to (a fault proxy's), when not moto's own.
    worker_s3_endpoint: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


@contextmanager
def open_matrix(
    tmp_path: Path,
    spark_remote: str,
    moto_endpoint: str,
    bucket: str,
    options: Options | None = None,
) -> Iterator[Matrix]:
    """One running pipeline (the initial records processed, feed, observer and watch
    running) with every fault the cells use wired in; everything undone and stopped after."""
    opts = options or Options()
    rig = PipelineRig(
        tmp_path,
        f"s3://{bucket}/pipeline",
        spark_remote,
        moto_endpoint,
        # Two workers, not three: less Spark on shared cores; both are needed to assign.
        settings={
            **SETTINGS,
            "min_cluster_size": len(WORKERS),
            "raft_bind": True,
            **opts.settings,
        },
        worker_s3_endpoint=opts.worker_s3_endpoint,
    )
    cluster = rig.cluster
    clocks = {s.id: WallClock(tmp_path / f"clock-{s.id}") for s in cluster.specs}
    clocks[CLOCK_WORKER] = WallClock(tmp_path / f"clock-{CLOCK_WORKER}")
    for s in cluster.specs:
        # merged: a cell file's shim (LD_PRELOAD) goes beside the clock shim, not over it
        cluster.node_env[s.id] = merged_env(clocks[s.id].env(), opts.node_env(s.id))
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
            env = clocks[wid].env() if wid == CLOCK_WORKER else {}
            # merged_env keeps both shims when a cell adds one to w1's clock shim.
            rig.start_worker(wid, env=merged_env(env, opts.worker_env(wid)) or None)
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
    appended = None if m.feed.errors else INITIAL_RECORDS + m.feed.records + m.extra_records
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
        records_appended=INITIAL_RECORDS + m.feed.records + m.extra_records,
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


def placement(m: Matrix) -> dict[int, tuple[str | None, int]]:
    """The leader's partition table: partition -> (owner, epoch)."""
    r = call("GET", m.rig.cluster.url(m.rig.cluster.leader()) + "/v1/partitions")
    assert r.status == 200, r.body
    return {x["partition"]: (x["owner"], x["epoch"]) for x in r.body["partitions"]}


def check_held_steady(
    m: Matrix,
    figures: Figures,
    before: dict[int, tuple[str | None, int]],
    span: tuple[float, float],
    fault: str,
) -> None:
    """A fault the coordinators never see (the store, Spark): no partition changed owner or
    epoch, no worker left ACTIVE or re-registered, no election within `span` (the watch
    times the fault began and was undone). One later, as the backlog and the oracle's job
    run Spark on shared cores under the rig's short timeouts, is load; the figures line
    counts every election from the fault on."""
    after = placement(m)
    moved = {p: (before[p], after.get(p)) for p in before if after.get(p) != before[p]}
    if moved:
        figures.violations.append(f"partitions moved under {fault}: {moved}")
    figures.violations.extend(m.watch.liveness_changes)
    began, undone = span
    during = [t for t, _ in m.watch.leaders if began <= t <= undone]
    if during:
        figures.violations.append(f"{len(during)} elections under {fault}")
