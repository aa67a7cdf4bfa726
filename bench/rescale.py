"""Rescale: how long a live pipeline's change of partition count takes, and how long each
new partition goes without processing, at two state sizes, in one run.

One pipeline rig per state size (testkit.pipeline_rig: three coordinators, three `ripple
worker`s at the default 0.5 s micro-batch interval, local store, 8 partitions), both on one
local Spark Connect server. A rig's source log first gets `KEYS[size]` distinct keys (so
the state every rescale moves holds that many), then `bench.moves`' producer appends 200 records
over those keys every 0.25 s throughout, so every new partition has input from the moment it
exists.
Each rig is rescaled 8 -> 12 through `POST /v1/admin/rescale`, the rigs one after the other.

Columns: `to_online_s` is from the request's answer to every new partition ONLINE with the
rescale DONE; `cutting_s`, `moving_s` and `hosting_s` are the time spent in each phase as
seen by polling `/v1/status` every `POLL_S` (so each is within a poll of the truth; a phase
no poll saw counts from the next one seen);
`gap_p50_s`, `gap_p99_s` and `gap_max_s` are, over the new partitions, the time from the
request to the partition's first micro-batch in the new generation (its owner's offset seen
past the generation's base): the processing gap the design names, from the first seal to
the new partition's first batch, measured from the request because the seals follow it at
once. Nothing passes or fails on these figures.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.harness import CATCH_UP_TIMEOUT_S, percentile, scratch
from bench.moves import Producer
from pipeline.source import generate, generation_base
from pipeline.spark_server import SparkConnectServer
from pipeline.worker import BATCH_INTERVAL_S_DEFAULT
from testkit.cluster import ADMIN
from testkit.http import call
from testkit.pipeline_rig import PARTITIONS, PipelineRig

WORKERS = ("w1", "w2", "w3")
TO_PARTITIONS = 12
# Distinct keys in the state a rescale moves, per case; quick runs keep the shape smaller.
KEYS = {"small": 2_000, "large": 200_000}
KEYS_QUICK = {"small": 500, "large": 20_000}
SEED_ROWS_PER_KEY = 2
POLL_S = 0.05
HEALTH_TIMEOUT_S = 5.0
RESCALE_TIMEOUT_S = 900.0
PHASES = ("cutting", "moving", "hosting")


def _status(rig: PipelineRig) -> dict[str, Any] | None:
    leader = rig.cluster.leader()
    r = rig.cluster.get(leader, "/v1/status")
    return r.body if r.status == 200 else None


def _offsets(rig: PipelineRig) -> dict[int, int]:
    """Partition -> the offset its hosting worker reports, over every live worker."""
    out: dict[int, int] = {}
    for wid in rig.workers:
        try:
            r = call("GET", rig.worker_url(wid) + "/v1/health", timeout_s=HEALTH_TIMEOUT_S)
        except OSError:
            continue
        if r.status == 200:
            for p, g in r.body.get("partitions", {}).items():
                if g.get("open"):
                    out[int(p)] = max(out.get(int(p), 0), int(g["offset"]))
    return out


def _rescale(rig: PipelineRig) -> dict[str, float]:
    r = rig.cluster.write_via_any("/v1/admin/rescale", {"partitions": TO_PARTITIONS}, token=ADMIN)
    if r.status != 202:
        raise RuntimeError(f"rescale refused: {r.status} {r.body}")
    asked = time.monotonic()
    generation = int(r.body["generation"])
    base = generation_base(generation)
    entered: dict[str, float] = {"cutting": asked}
    first_batch: dict[int, float] = {}
    done_at = None
    deadline = asked + RESCALE_TIMEOUT_S
    while time.monotonic() < deadline and (done_at is None or len(first_batch) < TO_PARTITIONS):
        now = time.monotonic()
        status = _status(rig)
        record = (status or {}).get("rescale") or {}
        phase = record.get("phase")
        if record.get("generation") == generation and isinstance(phase, str):
            entered.setdefault(phase, now)
            if phase == "done" and done_at is None:
                done_at = now
        for p, offset in _offsets(rig).items():
            if offset > base and p not in first_batch:
                first_batch[p] = now
        time.sleep(POLL_S)
    if done_at is None or len(first_batch) < TO_PARTITIONS:
        raise RuntimeError(f"rescale not done in {RESCALE_TIMEOUT_S} s: {sorted(entered)}")
    order = [*PHASES, "done"]

    def start_of(i: int) -> float:
        # A phase shorter than a poll is never seen: it starts when the next one seen does.
        return next((entered[ph] for ph in order[i:] if ph in entered), done_at)

    spent = {f"{ph}_s": start_of(i + 1) - start_of(i) for i, ph in enumerate(PHASES)}
    gaps = [t - asked for t in first_batch.values()]
    return {
        "to_online_s": done_at - asked,
        **spent,
        "gap_p50_s": percentile(gaps, 50),
        "gap_p99_s": percentile(gaps, 99),
        "gap_max_s": max(gaps),
    }


def _start(stack: ExitStack, root: Path, spark: str) -> PipelineRig:
    root.mkdir()
    settings: dict[str, Any] = {"total_partitions": PARTITIONS, "min_cluster_size": len(WORKERS)}
    rig = PipelineRig(root, f"file://{root / 'store'}", spark, settings=settings)
    stack.callback(rig.stop)
    rig.start()
    return rig


def run(quick: bool) -> dict[str, dict[str, float]]:
    keys = KEYS_QUICK if quick else KEYS
    rows: dict[str, dict[str, float]] = {}
    with scratch("rescale") as root, ExitStack() as stack:
        server = SparkConnectServer(str(root / "spark"))
        stack.callback(server.stop)
        spark = server.start()
        for i, (case, n) in enumerate(keys.items()):
            with ExitStack() as one:
                rig = _start(one, root / case, spark)
                rig.producer.produce(generate(n * SEED_ROWS_PER_KEY, n, seed=i))
                for wid in WORKERS:
                    rig.start_worker(wid, batch_interval_s=BATCH_INTERVAL_S_DEFAULT)
                rig.wait_ready()
                rig.wait_caught_up(CATCH_UP_TIMEOUT_S)
                with Producer(rig, seed=1_000_000 * (i + 1), keys=n):
                    rows[case] = {"key_space": n, **_rescale(rig)}
    return rows
