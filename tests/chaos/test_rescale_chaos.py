"""Chaos: a live pipeline's partition count changed twice, 8 -> 12 -> 4, with the producer
running and kills inside each rescale, ends equal, key for key, to one Spark batch job over
every generation's input.

8 -> 12 -> 4 is the small equivalent of 128 -> 200 -> 64: up by a factor that is not a power
of two (generation 0's modulo routing to key groups, so every key moves), then down below
the starting count (key groups to key groups). Real parts only: three coordinator processes,
`ripple worker` processes on the session's Spark Connect server, moto's S3 server.

Faults, each while the rescale is in flight (a run where one lands after the rescale ended is
INVALID, not passed): in the first rescale a worker that owns partitions is killed -9 and
started again while the old partitions are being cut, and the leader is killed -9 and started
again once the cuts are in; in the second the leader is killed while cutting and a worker
while the states are built or hosted.

Checked at the end: the routing is [8, 12, 4]; every partition ONLINE and caught up with its
generation's log; the workers' state equals the batch job over all three generations (every
record counted once, whichever side of a cut it landed); no key in two partitions and every
key in the partition generation 2 routes it to; `ripple get` (routing by the newest
generation) reads a sample of keys as the batch job has them; no partition's epoch ever went
back across the consistent reads taken throughout.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.source import generate
from shared.routing import Routing
from testkit.cli import ripple
from testkit.cluster import ADMIN
from testkit.pipeline_rig import CATCH_UP_TIMEOUT_S, PipelineRig
from testkit.wait import wait_until
from tests.chaos.harness import Figures, request, wait_settled
from tests.chaos.test_pipeline_chaos import (
    LEADER_TIMEOUT_S,
    RESTART_AFTER_S,
    SETTLE_TIMEOUT_S,
    Feed,
    Observer,
    check_equal_to_batch_job,
    consistent,
    kill_leader,
)

SEED = 29
WORKERS = ("w1", "w2", "w3")
COUNTS = (12, 4)  # the two rescales, from the rig's 8
INITIAL_RECORDS = 2000
KEYS = 60
# A rescale cuts every partition, runs one Spark job and hosts every new partition: tens of
# seconds with one Spark server for every worker on 2 shared cores.
RESCALE_TIMEOUT_S = 300.0
PHASE_POLL_S = 0.1
# Keys `ripple get` reads after the rescales: it routes by the newest generation.
GET_SAMPLE = 5


def status(rig: PipelineRig) -> dict[str, Any]:
    return consistent(rig, "/v1/status")


def rescale_record(rig: PipelineRig) -> dict[str, Any] | None:
    r = request(rig.cluster, "GET", "/v1/status")
    if r.status != 200:
        return None
    return r.body.get("rescale")  # type: ignore[no-any-return]


def start_rescale(rig: PipelineRig, partitions: int) -> dict[str, Any]:
    r = wait_until(
        lambda: (
            (
                x := rig.cluster.write_via_any(
                    "/v1/admin/rescale", {"partitions": partitions}, token=ADMIN
                )
            ).status
            != 503
            and x
        ),
        f"the rescale to {partitions} accepted or refused",
        LEADER_TIMEOUT_S,
    )
    assert r.status == 202, r
    return r.body  # type: ignore[no-any-return]


def wait_phase(rig: PipelineRig, generation: int, phases: set[str], what: str) -> str:
    """The rescale of `generation`'s phase, once it is one of `phases` (or DONE)."""

    def reached() -> str | None:
        x = rescale_record(rig)
        if x is None or x["generation"] != generation:
            return None
        return x["phase"] if x["phase"] in phases | {"done"} else None

    return wait_until(reached, what, RESCALE_TIMEOUT_S, PHASE_POLL_S)


def in_flight_or_invalid(phase: str, fault: str) -> None:
    if phase == "done":
        raise AssertionError(f"INVALID RUN: {fault} came after the rescale ended")


def kill_owner(rig: PipelineRig, rng: random.Random, figures: Figures) -> None:
    parts = consistent(rig, "/v1/partitions?consistent=true")["partitions"]
    owning = sorted({x["owner"] for x in parts if x["owner"] and rig.workers[x["owner"]].alive()})
    victim = rng.choice(owning)
    rig.workers[victim].kill9()
    figures.fault("kill9_worker")
    time.sleep(rng.uniform(*RESTART_AFTER_S))
    rig.start_worker(victim)


Fault = Callable[[PipelineRig, random.Random, Figures], None]


def rescale_with_faults(
    rig: PipelineRig,
    rng: random.Random,
    figures: Figures,
    partitions: int,
    while_cutting: tuple[str, Fault],
    once_cut: tuple[str, Fault],
) -> None:
    """Rescale to `partitions`, one named fault while it cuts and one once the cuts are in."""
    generation = start_rescale(rig, partitions)["generation"]
    for phases, (what, fault) in (({"cutting"}, while_cutting), ({"moving", "hosting"}, once_cut)):
        phase = wait_phase(rig, generation, phases, f"the rescale to {partitions}: {phases}")
        in_flight_or_invalid(phase, what)
        fault(rig, rng, figures)
    wait_phase(rig, generation, set(), f"the rescale to {partitions} done")


def check_get(rig: PipelineRig, rng: random.Random, want: dict[str, tuple[Any, ...]]) -> None:
    """`ripple get` finds a sample of keys, routed by the newest generation, as the batch
    job has them."""
    urls = [arg for spec in rig.cluster.specs for arg in ("--coordinator", spec.url)]
    for key in rng.sample(sorted(want), GET_SAMPLE):
        done = ripple("get", key, "--json", *urls)
        assert done.returncode == 0, done.stderr
        body = json.loads(done.stdout)
        got = (body["count"], body["sum"], body["min"], body["max"], body["last"])
        assert got == want[key], (key, got, want[key])


def check_routes(
    parts: list[dict[str, Any]], state_of: dict[int, set[str]], figures: Figures
) -> None:
    """Every key lies in exactly the partition the newest routing names."""
    routing = Routing(generation=len(COUNTS), partitions=COUNTS[-1])
    assert len(parts) == COUNTS[-1]
    for p, keys in state_of.items():
        wrong = sorted(k for k in keys if routing.partition_for(k) != p)
        if wrong:
            figures.violations.append(f"p{p} holds {len(wrong)} keys routed elsewhere: {wrong[:3]}")


@pytest.fixture
def rig(
    tmp_path: Path, spark_remote: str, moto_endpoint: str, s3_bucket: tuple[Any, str]
) -> Iterator[PipelineRig]:
    _, bucket = s3_bucket
    p = PipelineRig(tmp_path, f"s3://{bucket}/pipeline", spark_remote, moto_endpoint)
    yield from p.running()


def test_rescale_up_and_down_under_kills_equals_the_batch_job(rig: PipelineRig) -> None:
    p = rig
    seed = SEED
    print(f"\nrescale chaos seed={seed}")
    rng = random.Random(seed)
    figures = Figures(scenario="rescale", seed=seed)
    started = time.monotonic()

    p.producer.produce(generate(INITIAL_RECORDS, KEYS, seed=seed))
    for wid in WORKERS:
        p.start_worker(wid)
    wait_until(p.caught_up, "the initial records processed", CATCH_UP_TIMEOUT_S, 0.2)

    feed, observer = Feed(p.producer, seed), Observer(p)
    try:
        feed.start()
        observer.start()
        try:
            worker, leader = ("the worker kill", kill_owner), ("the leader kill", kill_leader)
            rescale_with_faults(p, rng, figures, COUNTS[0], worker, leader)
            rescale_with_faults(p, rng, figures, COUNTS[1], leader, worker)
        finally:
            feed.stop()
        wait_settled(p.cluster, SETTLE_TIMEOUT_S)
        parts = wait_until(p.caught_up, "the pipeline caught up", CATCH_UP_TIMEOUT_S, 0.2)
    finally:
        observer.stop()
    observer.record(parts)

    assert p.routing() == [8, *COUNTS]
    assert status(p)["rescale"]["phase"] == "done"
    state_of = {x["partition"]: set(p.state([x])) for x in parts}
    check_routes(parts, state_of, figures)
    appended = None if feed.errors else INITIAL_RECORDS + feed.records
    check_equal_to_batch_job(p, parts, appended, figures)
    check_get(p, rng, p.oracle())
    figures.violations.extend(observer.violations)
    figures.ops.update(
        records_appended=INITIAL_RECORDS + feed.records,
        feed_errors=feed.errors,
        consistent_reads_ok=observer.reads_ok,
        gate_samples=observer.gate_samples,
    )
    figures.duration_s = time.monotonic() - started
    print(figures.line())
    assert figures.faults == {"kill9_worker": 2, "kill9_leader": 2}
    assert not figures.violations, f"seed={seed}: {figures.violations}"
