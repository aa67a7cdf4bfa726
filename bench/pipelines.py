"""Pipelines at scale: many small recorded pipelines against one big one, the same partitions
on the same workers, on the coordinator's replicated core in-process.

Two cases, built alike through the commands a leader logs, applied to
`coordinator.core.machine.Machine` (encoded and decoded as a node applies them), with the
leader's `Planner` (default cluster settings, checkpoint rounds aside) planning every pass:

- `many`: 1,000 recorded pipelines of 16 partitions each (quick: 100);
- `one`: one recorded pipeline of as many partitions, 16,000 (quick: 1,600);

both on 200 workers (quick: 20) that declared a profile (no labels, slots with room for
every partition once DEATHS of them are dead), beside `default`'s one partition per worker,
every pipeline's spec `docs/examples/orders.toml`. Each case is settled first: every
pipeline created and activated, the planner's passes committed and every host call answered
until every partition is ONLINE.

Columns: `memory_mb` is the Python heap traced (tracemalloc) from an empty machine to the
settled cluster, the state with the planner's books, `snapshot_mb` the machine's snapshot;
`plan_s` one planning pass of the settled cluster, every worker just heard from (the best of
PLAN_REPEATS; it must plan nothing); `recovery_s` and `recovery_passes` a worker's death:
the planner's passes, each committed, from the one that declares the worker dead (its
silence just past the detector's bound) until no partition is UNASSIGNED and every
partition's owner is a live worker (DEATHS workers die one after another, each once the
cluster has settled again: the median time, the most passes). The `many_over_one` row holds
each figure's ratio. The two rigs live side by side and the timed parts alternate between
them, so a slow moment of the shared machine lands on both. The issue's goal is at most
1.2x each for memory, a planning pass and a recovery; this benchmark reports the ratios and
asserts none.

The isolation half, on real processes and Spark, is bench/pipelines_isolation.py: its rows
(`alone`, `beside_a`, `beside_a_over_alone`) follow these.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import math
import random
import statistics
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from bench import pipelines_isolation as isolation
from coordinator.config import ClusterConfig
from coordinator.core.codec import encode_command
from coordinator.core.commands import (
    ActivatePipeline,
    Bootstrap,
    Command,
    CreatePipeline,
    FinalizeVersion,
    Ok,
    ProfileWorker,
    RegisterWorker,
    ReportVersions,
)
from coordinator.core.effects import (
    Batch,
    CheckpointCall,
    CheckpointDone,
    CommitOutcome,
    HostCall,
    HostDone,
)
from coordinator.core.executor import commit_batch
from coordinator.core.machine import Machine
from coordinator.core.model import (
    DEFAULT_PIPELINE_SETTINGS,
    PartitionStatus,
    PipelineName,
    WorkerId,
    WorkerState,
)
from coordinator.core.planner import Planner
from coordinator.core.result_codec import decode_result
from coordinator.core.versions import SPOKEN
from coordinator.planner_config import planner_settings

# Every pipeline's spec is the project's example of what an owner writes (apply checks only
# its hash), so the state holds a spec text of a real size per pipeline.
SPEC = (Path(__file__).resolve().parents[1] / "docs" / "examples" / "orders.toml").read_text(
    encoding="utf-8"
)
PARTITIONS_EACH = 16
SLOTS_PER_PARTITION_SHARE = 1.25  # each worker's slots over its even share of the survivors'
PLAN_REPEATS = 5
DEATHS = 3  # one after another, each recovered and settled: the median is reported
SETTLE_PASSES_MAX = 1_000
RECOVERY_PASSES_MAX = 100
START_MS = 1_000_000
RATIO_FIELDS = ("memory_mb", "snapshot_mb", "plan_s", "recovery_s", "recovery_passes")
TICK_MS = 100
CHECKPOINT_S = 86_400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    pipelines: int  # of the `many` case; `one` holds as many partitions in one pipeline
    workers: int


FULL = Shape(pipelines=1_000, workers=200)
QUICK = Shape(pipelines=100, workers=20)


class Rig:
    """A Machine, its planner and the workers it knows, driven pass by pass at a clock the
    rig owns."""

    def __init__(self, workers: int, calls_max: int) -> None:
        # Every host call of the settling is answered in the pass after it: calls_max as
        # large as the table settles the rig in a few passes; a settled pass makes no calls.
        # Checkpoint rounds, per worker and alike in both cases, would land in some timed
        # passes and not others: a day apart, they stay out of the way.
        cfg = ClusterConfig(
            total_partitions=workers, min_cluster_size=1, checkpoint_interval_s=CHECKPOINT_S
        )
        settings = dataclasses.replace(planner_settings(cfg), calls_max=calls_max)
        self.dead_after_ms = settings.dead_after_ms
        self.machine = Machine()
        self.now_ms = START_MS
        self.workers = [WorkerId(f"w{i:04d}") for i in range(workers)]
        self._ids = 0
        self.planner = Planner(settings, random.Random(0), self.machine.state, self.now_ms)

    def apply(self, cmd: Command) -> CommitOutcome:
        self._ids += 1
        result = decode_result(self.machine.apply(encode_command(cmd, f"bench-{self._ids}")))
        return CommitOutcome.OK if isinstance(result, Ok) else CommitOutcome.REJECTED

    def must(self, cmd: Command) -> None:
        if self.apply(cmd) is not CommitOutcome.OK:
            raise RuntimeError(f"{type(cmd).__name__} was refused")

    def heard(self, skip: WorkerId | None = None) -> None:
        """Every ACTIVE worker but `skip` heartbeats now."""
        workers = self.machine.state.workers
        for w in self.workers:
            if w != skip and workers[w].state is WorkerState.ACTIVE:
                self.planner.heartbeat(w, 0.0, self.now_ms)

    def one_pass(self) -> Batch:
        """One plan, its commands committed and its calls answered as a healthy worker
        would; returns the batch."""
        batch = self.planner.plan(self.machine.state, self.now_ms, self.now_ms)

        def commit(cmd: Command) -> CommitOutcome:
            return self.apply(cmd)

        run = commit_batch(self.planner, batch, commit, self.now_ms)
        if run.failed is not None:
            raise RuntimeError(f"{type(run.failed[0]).__name__}: {run.failed[1].value}")
        for call in run.calls():
            if isinstance(call, HostCall):
                self.planner.on_result(HostDone(call=call, ok=True), self.now_ms, self.now_ms)
            elif isinstance(call, CheckpointCall):
                self.planner.on_result(CheckpointDone(call=call, ok=True), self.now_ms, self.now_ms)
            else:
                raise RuntimeError(f"a settling cluster made a {type(call).__name__}")
        return batch


def _settled(rig: Rig) -> bool:
    return all(p.status is PartitionStatus.ONLINE for p in rig.machine.state.partitions)


def _recovered(rig: Rig) -> bool:
    live = {w for w, rec in rig.machine.state.workers.items() if rec.state is WorkerState.ACTIVE}
    return all(p.owner in live for p in rig.machine.state.partitions)


def build(pipelines: int, partitions_each: int, workers: int) -> Rig:
    """A settled cluster: `pipelines` ACTIVE pipelines of `partitions_each` partitions on
    `workers` profiled workers, every partition ONLINE."""
    total = pipelines * partitions_each
    rig = Rig(workers, calls_max=total + workers)
    rig.must(
        ReportVersions(
            node_id="n1",
            min_version=1,
            max_version=SPOKEN.max_version,
            package_version="bench",
            now_ms=rig.now_ms,
        )
    )
    rig.must(FinalizeVersion(version=SPOKEN.max_version, voters=("n1",), now_ms=rig.now_ms))
    rig.must(Bootstrap(total_partitions=workers, now_ms=rig.now_ms))
    sha = hashlib.sha256(SPEC.encode()).hexdigest()
    for i in range(pipelines):
        name = PipelineName(f"p{i:04d}")
        create = CreatePipeline(
            name=name,
            spec_text=SPEC,
            spec_sha256=sha,
            partitions=partitions_each,
            pool=(),
            settings=DEFAULT_PIPELINE_SETTINGS,
            by="bench",
            now_ms=rig.now_ms,
        )
        rig.must(create)
        incarnation = rig.machine.state.pipelines[name].incarnation
        rig.must(ActivatePipeline(name=name, incarnation=incarnation, now_ms=rig.now_ms))
    # Room for every partition once DEATHS workers are gone, with some to spare.
    slots = math.ceil(total / (workers - DEATHS) * SLOTS_PER_PARTITION_SHARE)
    for w in rig.workers:
        rig.must(RegisterWorker(worker_id=w, address=f"http://{w}", now_ms=rig.now_ms))
        inc = rig.machine.state.workers[w].incarnation
        rig.must(
            ProfileWorker(worker_id=w, incarnation=inc, labels=(), slots=slots, now_ms=rig.now_ms)
        )
        rig.planner.registered(w, rig.now_ms)
    settle(rig)
    return rig


def settle(rig: Rig) -> None:
    """Passes, every worker heard from, until one plans nothing and every partition is
    ONLINE."""
    for _ in range(SETTLE_PASSES_MAX):
        rig.now_ms += TICK_MS
        rig.heard()
        batch = rig.one_pass()
        if not batch.commands and not batch.calls and _settled(rig):
            return
    raise RuntimeError(f"not settled in {SETTLE_PASSES_MAX} passes")


def plan_s(rig: Rig) -> float:
    """One timed planning pass of the settled cluster, every worker just heard from; it
    must plan nothing."""
    rig.now_ms += TICK_MS
    rig.heard()
    t0 = time.perf_counter()
    batch = rig.planner.plan(rig.machine.state, rig.now_ms, rig.now_ms)
    spent_s = time.perf_counter() - t0
    if batch.commands or batch.calls:
        raise RuntimeError(f"a settled cluster planned {batch}")
    return spent_s


def recovery(rig: Rig, victim: WorkerId) -> tuple[float, int]:
    """`victim`'s death: (seconds in the passes until every partition has a live owner,
    how many passes). Only the passes are timed, not the checks between them."""
    rig.now_ms += rig.dead_after_ms + TICK_MS
    spent_s = 0.0
    for passes in range(1, RECOVERY_PASSES_MAX + 1):
        rig.heard(skip=victim)
        t0 = time.perf_counter()
        rig.one_pass()
        spent_s += time.perf_counter() - t0
        if rig.machine.state.workers[victim].state is WorkerState.DEAD and _recovered(rig):
            return spent_s, passes
        rig.now_ms += TICK_MS
    raise RuntimeError(f"not recovered in {RECOVERY_PASSES_MAX} passes")


def traced(pipelines: int, partitions_each: int, workers: int) -> tuple[Rig, float]:
    """A settled rig (`build`) and the megabytes its making left allocated."""
    gc.collect()
    tracemalloc.start()
    try:
        rig = build(pipelines, partitions_each, workers)
        gc.collect()
        memory_b = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()  # it slows every allocation: the timed parts run without it
    gc.collect()
    return rig, memory_b / 1e6


def compare(shape: Shape, partitions_each: int = PARTITIONS_EACH) -> dict[str, dict[str, float]]:
    """The `many` and `one` rows of `shape` and their ratios. The timed parts alternate
    between the two rigs, so a slow moment of the machine lands on both."""
    total = shape.pipelines * partitions_each
    counts = {"many": (shape.pipelines, partitions_each), "one": (1, total)}
    rigs: dict[str, Rig] = {}
    rows: dict[str, dict[str, float]] = {}
    for case, (pipelines, each) in counts.items():
        rigs[case], memory_mb = traced(pipelines, each, shape.workers)
        rows[case] = {
            "pipelines": float(pipelines),
            "partitions": float(total),
            "workers": float(shape.workers),
            "memory_mb": memory_mb,
            "snapshot_mb": len(rigs[case].machine.snapshot()) / 1e6,
        }
    plans: dict[str, list[float]] = {case: [] for case in rigs}
    for _ in range(PLAN_REPEATS):
        for case, rig in rigs.items():
            plans[case].append(plan_s(rig))
    deaths: dict[str, list[tuple[float, int]]] = {case: [] for case in rigs}
    for i in range(DEATHS):
        for case, rig in rigs.items():
            settle(rig)  # each death strikes a settled cluster
            deaths[case].append(recovery(rig, rig.workers[i]))
    for case, row in rows.items():
        row["plan_s"] = min(plans[case])
        row["recovery_s"] = statistics.median(s for s, _ in deaths[case])
        row["recovery_passes"] = float(max(n for _, n in deaths[case]))
    ratio = {f: rows["many"][f] / rows["one"][f] for f in RATIO_FIELDS}
    return {**rows, "many_over_one": ratio}


def run(quick: bool) -> dict[str, dict[str, float]]:
    """The scale rows, then the isolation rows (bench/pipelines_isolation.py)."""
    return {**compare(QUICK if quick else FULL), **isolation.run(quick)}
