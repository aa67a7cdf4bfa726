"""Warm moves on a real pipeline: three coordinator processes, real `ripple worker`
processes on one Spark Connect server, a producer appending all along.

A move an admin asks for goes WARMING (the target loads the checkpoint and follows the log
while the source serves), then RELEASING, and the target hosts the partition from its warm
copy. A warm move whose target is killed while warming aborts: the source, which never
stopped serving, keeps the partition at its epoch. After each, every key equals one Spark
batch job over all the input.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.source import generate
from testkit.background import Background
from testkit.cluster import ADMIN
from testkit.http import call
from testkit.pipeline_rig import PipelineRig
from testkit.prom import parse, value
from testkit.wait import wait_until
from tests.integration.test_pipeline_restart import Producer

# The lifecycle of a move (docs/design.md §4); a poll may miss a short phase, never reorder.
PHASES = ["planned", "warming", "releasing", "handed_off", "done"]
POLL_EVERY_S = 0.05
MOVE_TIMEOUT_S = 90.0
USED = "ripple_worker_warm_copy_outcomes_total"


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path / 'store'}", spark_remote).running()


class Phases(Background):
    """Polls the leader's migrations in a thread: every phase seen per migration id, in
    order of first sight."""

    every_s = POLL_EVERY_S

    def __init__(self, rig: PipelineRig) -> None:
        super().__init__()
        self.rig = rig
        self.seen: dict[str, list[str]] = {}

    def step(self) -> None:
        c = self.rig.cluster
        try:
            migrations = c.get(c.leader(), "/v1/migrations").body["migrations"]
        except (OSError, KeyError, TypeError, AssertionError):
            return  # a slow answer: the next poll sees the phase, or a later one
        for m in migrations:
            phases = self.seen.setdefault(m["id"], [])
            if not phases or phases[-1] != m["phase"]:
                phases.append(m["phase"])

    def of(self, mid: str) -> list[str]:
        return list(self.seen.get(mid, []))


def leader_metric(rig: PipelineRig, name: str, **labels: str) -> float:
    c = rig.cluster
    return value(parse(str(c.get(c.leader(), "/metrics").body)), name, **labels) or 0.0


def worker_metric(rig: PipelineRig, wid: str, name: str, **labels: str) -> float:
    text = call("GET", rig.worker_url(wid) + "/metrics").body
    return value(parse(str(text)), name, **labels) or 0.0


def partition(rig: PipelineRig, part: int) -> dict[str, Any]:
    return next(x for x in rig.table() if x["partition"] == part)


def migration(rig: PipelineRig, mid: str) -> dict[str, Any]:
    c = rig.cluster
    return next(m for m in c.get(c.leader(), "/v1/migrations").body["migrations"] if m["id"] == mid)


def move(rig: PipelineRig, partition: int, to: str) -> str:
    body = {"moves": [{"partition": partition, "to": to}]}
    r = rig.cluster.write_via_any("/v1/admin/reassign", body, token=ADMIN)
    assert r.status == 202, r
    return str(r.body["migrations"][0]["id"])


# Three workers' start (up to START_TIMEOUT_S on a loaded machine), two moves, the batch job.
@pytest.mark.timeout(600)
def test_a_warm_move_under_load_and_one_whose_target_dies_while_warming(
    rig: PipelineRig,
) -> None:
    p = rig
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid)
    p.wait_ready()
    p.producer.produce(generate(2000, 40, seed=1))
    owners = {x["partition"]: x["owner"] for x in p.wait_caught_up()}
    with Producer(p) as producer, Phases(p) as phases:
        # -- a warm move: the source serves while the target warms up --------------------
        part = min(x for x, o in owners.items() if o == "w1")
        warm_before = leader_metric(p, "ripple_migration_releases_total", warm_up="warm")
        used_before = worker_metric(p, "w2", USED, outcome="used")
        mid = move(p, part, "w2")
        wait_until(lambda: migration(p, mid)["phase"] == "done", "the warm move", MOVE_TIMEOUT_S)
        # The watcher polls on its own thread: it may see "done" a poll after the check above.
        wait_until(lambda: phases.of(mid)[-1:] == ["done"], "the watcher sees it done", 30.0)
        seen = phases.of(mid)
        assert "warming" in seen and seen[-1] == "done", seen
        assert seen == sorted(seen, key=PHASES.index), seen
        assert leader_metric(p, "ripple_migration_releases_total", warm_up="warm") == (
            warm_before + 1
        )
        wait_until(lambda: partition(p, part)["status"] == "online", "online on w2", MOVE_TIMEOUT_S)
        assert partition(p, part)["owner"] == "w2"
        used = worker_metric(p, "w2", USED, outcome="used")
        assert used == used_before + 1  # hosted from its warm copy, not the checkpoint

        # -- the target dies while warming: the move aborts, the source keeps it ----------
        source = partition(p, part)
        target = next(w for w in ("w1", "w3") if w != source["owner"])
        mid = move(p, part, target)
        # Stopped at once, the target never answers a warm call: the move stays WARMING
        # until the leader gives the target up.
        p.workers[target].signal(signal.SIGSTOP)
        wait_until(lambda: "warming" in phases.of(mid), "the move warming", MOVE_TIMEOUT_S)
        p.workers[target].kill9()
        wait_until(
            lambda: migration(p, mid)["phase"] == "aborted", "the move aborted", MOVE_TIMEOUT_S
        )
        wait_until(lambda: phases.of(mid)[-1:] == ["aborted"], "the watcher sees it abort", 30.0)
        assert "releasing" not in phases.of(mid), phases.of(mid)
        after = partition(p, part)
        assert (after["owner"], after["epoch"]) == (source["owner"], source["epoch"])
    total = p.check_equal_to_batch_job()
    assert {x["owner"] for x in p.table()} <= {"w1", "w2", "w3"} - {target}
    print(f"\n{total} records ({producer.batches} batches produced during the moves)")
