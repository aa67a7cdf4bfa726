"""Pipelines' isolation: pipeline B's recovery from a worker's death while pipeline A
rescales and its transform throws on every batch, against B alone, in one run (`python -m
bench pipelines`).

Three rigs (testkit.pipeline_rig: three `ripple coordinator` processes, three `ripple worker`s
labelled zone=a with SLOTS slots each, a local-directory store, its short timeouts:
heartbeat_timeout_s 3) share one local Spark Connect server. In `alone` the cluster runs
pipeline B (B_PARTITIONS partitions, a count per key); in `beside_a` it runs B and pipeline A
(A_PARTITIONS partitions, the same spec with a transform that raises), both in the zone=a
pool, so A's failing partitions sit on the same workers as B's. Each pipeline gets ROWS
records first; A's partitions then fail every micro-batch (their offsets stay at 0, so every
batch has input), which is checked on the workers' health before B's recoveries are timed.
Then A's rescale to A_RESCALED partitions is started: a pipeline that never processes never
reaches its cuts, so the rescale stays under way (CUTTING, the leader calling A's owners for
their cuts every poll) through every round, which the run checks at its end.

A third rig, `beside_healthy_a`, runs B beside the same A without the transform (it
processes), which tells what A's partitions cost B's recovery from what A's trouble costs.

Rounds alternate between the rigs (alone, beside_a, beside_healthy_a, alone, ...), so a slow
moment of the shared machine lands on each: the worker holding most of B's partitions is
SIGKILLed, and `recovery_s` runs from the kill to every one of B's partitions ONLINE on a
live worker, as `GET /v1/partitions?pipeline=B` on the leader shows it (polled every
POLL_S). The killed worker is then started again and the rig settled (every worker ready,
B's partitions ONLINE) before its next round. `beside_a_over_alone` and
`beside_healthy_a_over_alone` hold the ratios of the medians; the issue's goal is at most
1.1x for the first (`note_rescale_of_a` is 1: A's rescale was under way in every round of
`beside_a`). Nothing passes or fails on these figures.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from bench.harness import scratch
from coordinator.core.versions import COMMAND_SET_VERSION
from pipeline.spark_server import SparkConnectServer
from pipeline.spec.produce import SpecProducer
from pipeline.spec.run import PipelineInfo
from testkit.cluster import ADMIN
from testkit.http import call
from testkit.pipeline_rig import SETTINGS, PipelineRig
from testkit.wait import wait_until

WORKERS = ("w1", "w2", "w3")
SLOTS = 16
POOL = {"zone": "a"}
A_PARTITIONS = 8  # one A in each rig but `alone`
A_RESCALED = 12  # beside_a: A's rescale, under way through B's recoveries
B_PARTITIONS = 8
ROWS = 2_000
KEYS = 200
POLL_S = 0.05
SETTLE_TIMEOUT_S = 180.0
RECOVERY_TIMEOUT_S = 120.0
FAILING_BATCHES_MIN = 3  # A's partitions have failed this many batches in a row: it throws
SPEC = """
[schema]
ddl = "k STRING, v DOUBLE"
key = "k"

[[aggregations]]
name = "n"
fn = "count"
"""
THROWING = """
[transform]
source = '''
def transform(df):
    raise ValueError("pipeline A refuses every batch")
'''
"""
# B alone; beside A throwing; beside A healthy (the same spec without the transform), which
# tells A's partitions' own cost from the cost of its trouble.
CASES = {"alone": None, "beside_a": SPEC + THROWING, "beside_healthy_a": SPEC}


def _leader_call(rig: PipelineRig, method: str, path: str, body: Any = None) -> Any:
    c = rig.cluster
    reply = call(method, c.url(c.leader()) + path, body, token=ADMIN)
    if reply.status >= 300:
        raise RuntimeError(f"{method} {path}: {reply.status} {reply.body}")
    return reply.body


def _speaks_pipelines(rig: PipelineRig) -> bool:
    c = rig.cluster
    health = c.health(c.leader()) or {}
    return int(health.get("finalized_command_set_version", 0)) >= COMMAND_SET_VERSION


def _active(rig: PipelineRig, name: str) -> dict[str, Any] | None:
    body = _leader_call(rig, "GET", f"/v1/pipelines/{name}?consistent=true")
    return body if body["state"] == "active" and body["first_slot"] else None


def _create(rig: PipelineRig, name: str, spec_text: str, partitions: int) -> SpecProducer:
    body = {"name": name, "spec_text": spec_text, "partitions": partitions, "pool": POOL}
    _leader_call(rig, "POST", "/v1/pipelines", body)
    described = wait_until(partial(_active, rig, name), f"{name} active", SETTLE_TIMEOUT_S)
    producer = SpecProducer(rig.store, PipelineInfo.from_describe(described))
    producer.produce([{"k": f"k{i % KEYS}", "v": float(i)} for i in range(ROWS)])
    return producer


def _b_partitions(rig: PipelineRig) -> list[dict[str, Any]]:
    return _leader_call(rig, "GET", "/v1/partitions?pipeline=B")["partitions"]  # type: ignore[no-any-return]


def _b_online(rig: PipelineRig, gone: str | None = None) -> bool:
    parts = _b_partitions(rig)
    return len(parts) == B_PARTITIONS and all(
        p["status"] == "online" and p["owner"] != gone for p in parts
    )


def _a_failing(rig: PipelineRig, a: PipelineInfo) -> bool:
    """Every partition of A held with FAILING_BATCHES_MIN failed batches in a row or more."""
    failing = 0
    for wid in WORKERS:
        for p, part in ((rig.health(wid) or {}).get("partitions") or {}).items():
            if a.contains(int(p)) and part["failures"] >= FAILING_BATCHES_MIN:
                failing += 1
    return failing == a.partitions


def _a_rescaling(rig: PipelineRig) -> bool:
    r = _leader_call(rig, "GET", "/v1/pipelines/A?consistent=true").get("rescale")
    return r is not None and r["partitions"] == A_RESCALED and r["phase"] == "cutting"


def _start(stack: ExitStack, root: Path, spark: str) -> PipelineRig:
    root.mkdir()
    rig = PipelineRig(root, f"file://{root / 'store'}", spark, settings=dict(SETTINGS))
    stack.callback(rig.stop)
    rig.start()
    for wid in WORKERS:
        rig.start_worker(wid, "--label", "zone=a", "--slots", str(SLOTS))
    return rig


def _settle(rig: PipelineRig) -> None:
    rig.wait_ready()
    wait_until(partial(_b_online, rig), "B online", SETTLE_TIMEOUT_S, 0.2)


def _recovery_s(rig: PipelineRig) -> float:
    """Kill the worker holding most of B's partitions; seconds until B is ONLINE again."""
    owners = Counter(p["owner"] for p in _b_partitions(rig))
    victim = max(owners, key=lambda w: (owners[w], w))
    began = time.monotonic()
    rig.workers[victim].kill9()
    wait_until(partial(_b_online, rig, victim), "B recovered", RECOVERY_TIMEOUT_S, POLL_S)
    took = time.monotonic() - began
    rig.start_worker(victim, "--label", "zone=a", "--slots", str(SLOTS))
    return took


def run(quick: bool) -> dict[str, dict[str, float]]:
    rounds = 1 if quick else 5  # quick: checks it runs (CI), in a few minutes
    times: dict[str, list[float]] = {case: [] for case in CASES}
    with scratch("pipelines_isolation") as root, ExitStack() as stack:
        server = SparkConnectServer(str(root / "spark"))
        stack.callback(server.stop)
        spark = server.start()
        rigs = {case: _start(stack, root / case, spark) for case in CASES}
        for case, rig in rigs.items():
            wait_until(partial(_speaks_pipelines, rig), "pipelines spoken", SETTLE_TIMEOUT_S)
            a_spec = CASES[case]
            if a_spec is not None:
                a = _create(rig, "A", a_spec, A_PARTITIONS).info
            _create(rig, "B", SPEC, B_PARTITIONS)
        for rig in rigs.values():
            _settle(rig)
        wait_until(partial(_a_failing, rigs["beside_a"], a), "A failing", SETTLE_TIMEOUT_S, 0.5)
        _leader_call(
            rigs["beside_a"], "POST", "/v1/pipelines/A/rescale", {"partitions": A_RESCALED}
        )
        wait_until(partial(_a_rescaling, rigs["beside_a"]), "A rescaling", SETTLE_TIMEOUT_S, 0.2)
        for _ in range(rounds):
            for case, rig in rigs.items():
                _settle(rig)
                times[case].append(_recovery_s(rig))
        # A kept failing on the workers it moved to (a new host starts its count again).
        wait_until(partial(_a_failing, rigs["beside_a"], a), "A failing", SETTLE_TIMEOUT_S, 0.5)
        rescaling = _a_rescaling(rigs["beside_a"])
    rows = {
        case: {
            "rounds": float(rounds),
            "recovery_s": statistics.median(times[case]),
            "recovery_min_s": min(times[case]),
            "recovery_max_s": max(times[case]),
            "heartbeat_timeout_s": float(SETTINGS["heartbeat_timeout_s"]),
        }
        for case in CASES
    }
    alone_s = rows["alone"]["recovery_s"]
    rows["beside_a_over_alone"] = {
        "recovery_s": rows["beside_a"]["recovery_s"] / alone_s,
        "note_rescale_of_a": float(rescaling),
    }
    rows["beside_healthy_a_over_alone"] = {
        "recovery_s": rows["beside_healthy_a"]["recovery_s"] / alone_s
    }
    return rows
