"""Freshness: how long after a record is produced its key shows it through
`GET /v1/partitions/{p}/keys/{key}`, under a steady load, on the embedded default.

Rig as in testkit.pipeline_rig (three coordinators, three `ripple worker`s on one local Spark
Connect server, local store, 8 partitions) with the workers' default batch interval (0.5 s, what
`ripple up` runs) and data path (files; small batches go as Arrow). A background producer
appends `LOAD_ROWS` records every `LOAD_EVERY_S` (a steady stream over 500 keys). The probe
then, one at a time: produces ONE record of a fresh key, starts the clock when `produce`
returns (the record is durable in the source log), and polls the owner's key endpoint every
10 ms until it answers 200 with that value. p50/p99 over `probes` records. Baseline for
the table: the same probe with no background load.
"""

from __future__ import annotations

import random
import threading
import time

from bench.harness import caught_up_s, percentile, pipeline_rig, scratch
from pipeline.source import generate
from pipeline.worker import BATCH_INTERVAL_S_DEFAULT
from shared.routing import partition_for_key
from testkit.http import call
from testkit.pipeline_rig import PARTITIONS, PipelineRig

LOAD_ROWS = 2000
LOAD_EVERY_S = 0.5
LOAD_KEYS = 500
POLL_S = 0.01
VISIBLE_TIMEOUT_S = 60.0


def probe_s(rig: PipelineRig, n: int, owners: dict[int, str]) -> float:
    """Produce one record of the fresh key `FRESH{n}`: seconds until its owner's key
    endpoint shows it (polled every `POLL_S`, at most `VISIBLE_TIMEOUT_S`)."""
    key = f"FRESH{n:06d}"
    p = partition_for_key(key, PARTITIONS)
    value = float(n)
    rig.producer.produce([(key, value)])
    t0 = time.monotonic()
    url = rig.worker_url(owners[p]) + f"/v1/partitions/{p}/keys/{key}"
    while time.monotonic() - t0 < VISIBLE_TIMEOUT_S:
        r = call("GET", url, timeout_s=5.0)
        if r.status == 200 and r.body.get("last") == value:
            return time.monotonic() - t0
        time.sleep(POLL_S)
    raise RuntimeError(f"{key} not visible after {VISIBLE_TIMEOUT_S} s")


def _measure(rig: PipelineRig, probes: int, first: int, loaded: bool) -> dict[str, float]:
    owners = {x["partition"]: x["owner"] for x in rig.table()}
    stop = threading.Event()
    produced = [0]

    def load() -> None:
        seed = 0
        while not stop.is_set():
            rig.producer.produce(generate(LOAD_ROWS, LOAD_KEYS, seed=seed))
            produced[0] += LOAD_ROWS
            seed += 1
            stop.wait(LOAD_EVERY_S)

    feeder = threading.Thread(target=load, daemon=True)
    if loaded:
        feeder.start()
        time.sleep(3.0)  # into the steady state
    rng = random.Random(7)
    began = time.monotonic()
    try:
        seconds = []
        for i in range(probes):
            seconds.append(probe_s(rig, first + i, owners))
            time.sleep(rng.uniform(0.0, 0.3))  # probes not in phase with the batches
    finally:
        stop.set()
        if loaded:
            feeder.join(timeout=30.0)
    elapsed = time.monotonic() - began
    return {
        "probes": probes,
        "p50_s": percentile(seconds, 50),
        "p99_s": percentile(seconds, 99),
        "max_s": max(seconds),
        "load_rows_per_s": produced[0] / elapsed if loaded else 0.0,
    }


def run(quick: bool) -> dict[str, dict[str, float]]:
    probes = 5 if quick else 150
    with scratch("freshness") as root, pipeline_rig(root) as rig:
        for wid in ("w1", "w2", "w3"):
            rig.start_worker(wid, batch_interval_s=BATCH_INTERVAL_S_DEFAULT)
        caught_up_s(rig)
        idle = _measure(rig, probes, 0, loaded=False)
        steady = _measure(rig, probes, probes, loaded=True)
    return {"steady_load": steady, "idle": idle}
