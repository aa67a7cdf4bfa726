"""Moves: how long a partition moved by an admin goes unprocessed, warm hand-offs against
cold ones, in one run.

Two pipeline rigs (testkit.pipeline_rig: three coordinators, three `ripple worker`s at the
default 0.5 s micro-batch interval, local store, 8 partitions) share one local Spark Connect
server and differ in one setting: `warm_moves` on (the target loads the checkpoint and
follows the source log while the source serves, then the source releases) or off (the
source releases first, the target loads its final checkpoint and replays). Every other
setting is the default. A producer appends `ROWS` records to each rig every `PRODUCE_EVERY_S`
all along (steady load, a new Parquet segment per partition each time), so every
micro-batch of every partition has input.

Moves alternate between the rigs (warm, cold, warm, ...), one at a time: partition
`i % 8` goes from its owner to the next worker through `POST /v1/admin/reassign`. Around
each, the source's and the target's `GET /v1/health` are polled every `POLL_S`: the clock
first waits for one advance of the partition's offset on the source (so the source's last
batch is seen, not guessed), then the move is asked for. The processing gap is from the
moment the source's offset for the partition was first seen at its final value (its last
micro-batch) to the moment the target, hosting it, was first seen past that offset (its
first batch beyond what the source processed; a warm copy already past it counts from the
host). The release waits for the source's batch in flight and follows it within
milliseconds, so often no poll sees that last batch's offset: the final value is then the
offset of the source's final checkpoint (in the store), and the gap counts from the last
poll that saw the source still at the offset before it, at most one poll round before that
batch ended, so never less than the true gap (`final_batch_unseen` counts these moves). p50
and p99 (nearest rank) per rig; `batch_interval_s` is the workers' setting and
`observed_batch_s` the median time between two advances of a partition's offset on a source
before its move (what an interval is on this machine under this load); `goal_met` is whether
the warm p99 is at most `batch_interval_s + 1 s`. `hosted_warm` counts the moves whose target
started from its warm copy (`ripple_worker_warm_copy_outcomes_total{outcome="used"}`), the
`warm_up_*` columns the releases by how each move's warm-up ended
(`ripple_migration_releases_total`, summed over the nodes; a cold rig's are all `cold`).
Nothing passes or fails on these figures.
"""

from __future__ import annotations

import itertools
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import CATCH_UP_TIMEOUT_S, percentile, scratch
from pipeline.source import generate
from pipeline.spark_server import SparkConnectServer
from pipeline.worker import BATCH_INTERVAL_S_DEFAULT
from shared.checkpoint_ref import checkpoint_key_parts, checkpoints_prefix
from testkit.background import Background
from testkit.cluster import ADMIN
from testkit.http import call
from testkit.pipeline_rig import PARTITIONS, PipelineRig
from testkit.prom import parse, value

WORKERS = ("w1", "w2", "w3")
ROWS = 200
KEYS = 500
PRODUCE_EVERY_S = 0.25
PRODUCE_BATCHES_MAX = 20_000
POLL_S = 0.02
HEALTH_TIMEOUT_S = 5.0
# A move, from the request to the target's first batch: a warm-up's deadline (60 s by
# default), the release, a cold load and replay, with room for a machine whose micro-batches
# take tens of seconds under other load.
MOVE_TIMEOUT_S = 600.0
SYNC_TIMEOUT_S = 30.0
OUTCOMES = ("warm", "refused", "timed_out", "cold")
MODES = {"warm": True, "cold": False}
USED = "ripple_worker_warm_copy_outcomes_total"


class Producer(Background):
    """Appends `ROWS` records over `keys` symbols every `PRODUCE_EVERY_S` in a thread, until
    stopped (bench/rescale.py's producer too); a failed append ends the run."""

    every_s = PRODUCE_EVERY_S
    steps_max = PRODUCE_BATCHES_MAX

    def __init__(self, rig: PipelineRig, seed: int, keys: int = KEYS) -> None:
        super().__init__("producer")
        self.rig, self.keys, self.seed = rig, keys, seed

    def step(self) -> None:
        self.rig.producer.produce(generate(ROWS, self.keys, seed=self.seed + self.steps))


def _seen(rig: PipelineRig, wid: str, p: int) -> tuple[int, int] | None:
    """(epoch, offset) of `p` as `wid` holds it now, or None."""
    try:
        r = call("GET", rig.worker_url(wid) + "/v1/health", timeout_s=HEALTH_TIMEOUT_S)
    except OSError:
        return None
    mine = r.body.get("partitions", {}).get(str(p)) if r.status == 200 else None
    return None if mine is None else (int(mine["epoch"]), int(mine["offset"]))


def _advances(rig: PipelineRig, wid: str, p: int, count: int) -> list[float]:
    """Wait for `count` advances of `p`'s offset on `wid`; the times they were first seen."""
    times: list[float] = []
    last = _seen(rig, wid, p)
    deadline = time.monotonic() + SYNC_TIMEOUT_S * count
    while len(times) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"p{p} does not advance on {wid}")
        time.sleep(POLL_S)
        now = _seen(rig, wid, p)
        if now is not None and last is not None and now[1] > last[1]:
            times.append(time.monotonic())
        last = now
    return times


def _final_offset(rig: PipelineRig, p: int, epoch: int) -> int | None:
    """The offset of the source's final checkpoint of `p` at `epoch`: the highest its owner
    wrote at that epoch (a release writes it last), None when there is none."""
    named = (checkpoint_key_parts(k) for k in rig.store.list_keys(checkpoints_prefix(p)))
    return max((n[2] for n in named if n is not None and n[1] == epoch), default=None)


@dataclass(slots=True)
class Move:
    gap_s: float
    batch_s: float  # the median time between the source's advances just before
    # The source's last micro-batch ended and the release followed before a poll saw it.
    final_unseen: bool


def _gap_s(rig: PipelineRig, p: int, source: str, target: str) -> Move:
    """Move `p` from `source` to `target` and time its processing gap (the module doc)."""
    synced = _advances(rig, source, p, 3)
    before = _seen(rig, source, p)
    assert before is not None
    src_offset, src_at = before[1], synced[-1]
    held_at = src_at  # the last poll that saw the source hold `p` at `src_offset`
    r = rig.cluster.write_via_any(
        "/v1/admin/reassign", {"moves": [{"partition": p, "to": target}]}, token=ADMIN
    )
    if r.status != 202:
        raise RuntimeError(f"reassign of p{p} to {target} refused: {r.status} {r.body}")
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    final: int | None = None
    unseen = False
    while time.monotonic() < deadline:
        polled = time.monotonic()
        src = _seen(rig, source, p)
        if src is not None and src[0] == before[0]:
            if src[1] > src_offset:
                src_offset, src_at = src[1], polled
            held_at = polled
        dst = _seen(rig, target, p)
        if src is None and final is None:
            # Released. A release follows the source's last batch within milliseconds, so
            # a poll may never have seen that batch's offset: the final checkpoint names it.
            final = _final_offset(rig, p, before[0])
            if final is not None and final > src_offset:
                # That batch ended after the last poll that saw the source at the old
                # offset: the gap counts from that poll (at most one poll early).
                src_offset, src_at, unseen = final, held_at, True
        if src is None and dst is not None and dst[0] > before[0] and dst[1] > src_offset:
            batch = statistics.median(b - a for a, b in itertools.pairwise(synced))
            return Move(time.monotonic() - src_at, batch, unseen)
        time.sleep(POLL_S)
    raise RuntimeError(f"p{p}: {target} processed nothing past {src_offset} in time")


def _releases(rig: PipelineRig) -> dict[str, float]:
    """Every node's count of releases by warm-up outcome, summed: each node counts what it
    committed as leader, so a change of leader loses nothing."""
    c = rig.cluster
    out = dict.fromkeys(OUTCOMES, 0.0)
    for spec in c.specs:
        samples = parse(str(c.get(spec.id, "/metrics").body))
        for o in OUTCOMES:
            out[o] += value(samples, "ripple_migration_releases_total", warm_up=o) or 0.0
    return out


def _hosted_warm(rig: PipelineRig, wid: str) -> float:
    """How many partitions `wid` started from a warm copy (instead of a checkpoint)."""
    text = call("GET", rig.worker_url(wid) + "/metrics", timeout_s=HEALTH_TIMEOUT_S).body
    return value(parse(str(text)), USED, outcome="used") or 0.0


def _start(stack: ExitStack, root: Path, spark: str, warm: bool) -> PipelineRig:
    """A rig's coordinators and workers started (not waited for: both rigs start at once)."""
    root.mkdir()
    settings: dict[str, Any] = {
        "total_partitions": PARTITIONS,
        "min_cluster_size": len(WORKERS),
        "warm_moves": warm,
    }
    rig = PipelineRig(root, f"file://{root / 'store'}", spark, settings=settings)
    stack.callback(rig.stop)
    rig.start()
    for wid in WORKERS:
        rig.start_worker(wid, batch_interval_s=BATCH_INTERVAL_S_DEFAULT)
    return rig


def run(quick: bool) -> dict[str, dict[str, float]]:
    moves = 2 if quick else PARTITIONS
    gaps: dict[str, list[float]] = {m: [] for m in MODES}
    hosted_warm = dict.fromkeys(MODES, 0.0)
    unseen = dict.fromkeys(MODES, 0)
    batches: dict[str, list[float]] = {m: [] for m in MODES}
    with scratch("moves") as root, ExitStack() as stack:
        server = SparkConnectServer(str(root / "spark"))
        stack.callback(server.stop)
        spark = server.start()
        rigs = {mode: _start(stack, root / mode, spark, warm) for mode, warm in MODES.items()}
        for i, rig in enumerate(rigs.values()):
            rig.wait_ready()
            rig.wait_caught_up(CATCH_UP_TIMEOUT_S)
            stack.enter_context(Producer(rig, seed=1_000_000 * (i + 1)))
        before = {mode: _releases(rig) for mode, rig in rigs.items()}
        for i in range(moves):
            for mode, rig in rigs.items():
                p = i % PARTITIONS
                source = next(x["owner"] for x in rig.table() if x["partition"] == p)
                target = WORKERS[(WORKERS.index(source) + 1) % len(WORKERS)]
                used = _hosted_warm(rig, target)
                move = _gap_s(rig, p, source, target)
                hosted_warm[mode] += _hosted_warm(rig, target) - used
                gaps[mode].append(move.gap_s)
                batches[mode].append(move.batch_s)
                unseen[mode] += move.final_unseen
        after = {mode: _releases(rig) for mode, rig in rigs.items()}
    goal_s = BATCH_INTERVAL_S_DEFAULT + 1.0
    warm_p99 = percentile(gaps["warm"], 99)
    rows: dict[str, dict[str, float]] = {}
    for mode in MODES:
        rows[mode] = {
            "moves": len(gaps[mode]),
            "p50_gap_s": percentile(gaps[mode], 50),
            "p99_gap_s": percentile(gaps[mode], 99),
            "max_gap_s": max(gaps[mode]),
            "batch_interval_s": BATCH_INTERVAL_S_DEFAULT,
            "observed_batch_s": statistics.median(batches[mode]),
            "goal_s": goal_s,
            "goal_met": float(warm_p99 <= goal_s),
            "hosted_warm": hosted_warm[mode],
            "final_batch_unseen": float(unseen[mode]),
            **{f"warm_up_{o}": after[mode][o] - before[mode][o] for o in OUTCOMES},
        }
    return rows
