"""Workers restart without reshuffling, end to end: three coordinator processes, real
`ripple worker` processes on one Spark Connect server, a producer appending all along.

A rolling restart (each worker SIGTERMed and started again with the same command line a few
seconds after it exited, as Kubernetes, systemd and `docker stop` do) changes no partition's
owner at any moment: the table is polled all through the roll, no migration is created,
and each partition's history names only its one owner (a `restart` entry, new epoch). Then
a drain of one worker moves only that worker's partitions. After both, every key equals one
Spark batch job over all the input.
"""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.source import generate
from testkit.background import Background
from testkit.cluster import ADMIN
from testkit.http import call
from testkit.pipeline_rig import SETTINGS, PipelineRig
from testkit.wait import wait_until
from tests.integration.test_cli import ripple

# Long enough for a real worker's start (Python, the Spark Connect session, the start-up
# probe) on a loaded machine, and far past the 3 s heartbeat timeout: the hold, not the
# timeout, is what keeps the partitions in place.
REJOIN_GRACE_S = 60.0
# The scenario's gap: the same command started again this long after the process exited.
RESTART_GAP_S = 2.0
EXIT_TIMEOUT_S = 30.0
BACK_TIMEOUT_S = 90.0
POLL_EVERY_S = 0.1
# The longest the watch may go without a look at the table while it is meant to watch (a
# poll is two reads on loopback; room for a busy moment of Spark beside them). A count of
# looks instead would depend on how long the roll took.
WATCH_GAP_S_MAX = 3.0
PRODUCE_EVERY_S = 0.5
PRODUCE_BATCHES_MAX = 2_000


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    settings = {**SETTINGS, "rejoin_grace_s": REJOIN_GRACE_S}
    yield from PipelineRig(
        tmp_path, f"file://{tmp_path / 'store'}", spark_remote, settings=settings
    ).running()


class Watch(Background):
    """Polls the leader's partition table and migrations in a thread: every owner seen,
    with when it was seen (monotonic), and the most migrations ever in flight."""

    every_s = POLL_EVERY_S

    def __init__(self, rig: PipelineRig) -> None:
        super().__init__()
        self.rig = rig
        self.seen: list[tuple[float, dict[int, str | None]]] = []
        self.migrations_max = 0
        self.errors: list[str] = []
        self._leader: str | None = None

    def step(self) -> None:
        c = self.rig.cluster
        try:
            # The leader the watch began with: a rolling restart of workers changes none.
            self._leader = self._leader or c.leader()
            leader = self._leader
            parts = c.get(leader, "/v1/partitions").body["partitions"]
            moving = c.get(leader, "/v1/migrations").body["in_flight"]
        except (OSError, KeyError, TypeError, AssertionError) as exc:
            self.errors.append(repr(exc))
            return
        self.seen.append((time.monotonic(), {p["partition"]: p["owner"] for p in parts}))
        self.migrations_max = max(self.migrations_max, moving)

    def owners_between(self, start: float, end: float) -> list[dict[int, str | None]]:
        return [owners for t, owners in self.seen if start <= t <= end]

    def largest_gap_s(self, start: float, end: float) -> float:
        """The longest stretch from `start` to `end` with no look at the table."""
        times = [start, *(t for t, _ in self.seen if start <= t <= end), end]
        return max(b - a for a, b in itertools.pairwise(times))


class Producer(Background):
    """Appends records all along, in a thread, until stopped."""

    every_s = PRODUCE_EVERY_S
    steps_max = PRODUCE_BATCHES_MAX

    def __init__(self, rig: PipelineRig) -> None:
        super().__init__()
        self.rig = rig

    @property
    def batches(self) -> int:
        return self.steps

    def step(self) -> None:
        self.rig.producer.produce(generate(100, 40, seed=1000 + self.steps))


def workers(rig: PipelineRig) -> dict[str, dict[str, Any]]:
    c = rig.cluster
    return {w["worker_id"]: w for w in c.get(c.leader(), "/v1/workers").body["workers"]}


def back_online(rig: PipelineRig, wid: str, incarnation: int) -> bool:
    """`wid` registered as its next incarnation, says it is back at work (its readiness,
    what a rolling restart waits for) and every partition is ONLINE again."""
    if workers(rig)[wid]["incarnation"] <= incarnation:
        return False
    try:
        ready = call("GET", rig.worker_url(wid) + "/v1/ready", timeout_s=5.0).status == 200
    except OSError:
        return False
    return ready and all(p["status"] == "online" for p in rig.table())


def test_a_rolling_restart_moves_no_partition_and_a_drain_moves_only_its_own(
    rig: PipelineRig,
) -> None:
    p, c = rig, rig.cluster
    for wid in ("w1", "w2", "w3"):
        p.start_worker(wid)
    p.producer.produce(generate(2000, 40, seed=1))
    owners = {x["partition"]: x["owner"] for x in p.wait_caught_up()}
    assert set(owners.values()) == {"w1", "w2", "w3"}
    with Producer(p) as producer, Watch(p) as watch:
        rolled_from = time.monotonic()
        for wid in ("w1", "w2", "w3"):
            incarnation = workers(p)[wid]["incarnation"]
            proc = p.workers[wid]
            proc.signal(signal.SIGTERM)
            wait_until(lambda proc=proc: not proc.alive(), f"{wid} exits", EXIT_TIMEOUT_S)
            assert proc.popen.returncode == 0, proc.output()[-2000:]
            assert workers(p)[wid]["liveness"] == "restarting"
            time.sleep(RESTART_GAP_S)
            p.restart_worker(wid)
            wait_until(
                lambda wid=wid, inc=incarnation: back_online(p, wid, inc),
                f"{wid} back",
                BACK_TIMEOUT_S,
                0.2,
            )
        rolled_until = time.monotonic()
        # Only w3 leaves: only its partitions may move.
        out = ripple("drain", "w3", "--coordinator", c.url(c.leader()), "--admin-token", ADMIN)
        assert out.returncode == 0, out.stderr
        wait_until(lambda: workers(p)["w3"]["state"] == "left", "w3 drained", 60)
        drained_until = time.monotonic()
    total = p.check_equal_to_batch_job()
    print(f"\n{total} records ({producer.batches} batches produced during the roll and drain)")

    assert not watch.errors, watch.errors[:5]
    during_roll = watch.owners_between(rolled_from, rolled_until)
    assert during_roll and watch.largest_gap_s(rolled_from, rolled_until) <= WATCH_GAP_S_MAX, (
        len(during_roll),
        watch.largest_gap_s(rolled_from, rolled_until),
    )  # watched all along
    changed = [(p_, o[p_]) for o in during_roll for p_ in o if o[p_] != owners[p_]]
    assert changed == [], changed[:10]
    w3s = {p_ for p_, o in owners.items() if o == "w3"}
    for seen in watch.owners_between(rolled_until, drained_until):
        assert {p_: o for p_, o in seen.items() if p_ not in w3s} == {
            p_: o for p_, o in owners.items() if p_ not in w3s
        }
    after = {x["partition"]: x["owner"] for x in p.table()}
    assert {after[p_] for p_ in w3s} <= {"w1", "w2"}
    assert {p_: after[p_] for p_ in after if p_ not in w3s} == {
        p_: o for p_, o in owners.items() if p_ not in w3s
    }
    migrations = c.get(c.leader(), "/v1/migrations").body["migrations"]
    assert {(m["partition"], m["reason"]) for m in migrations} == {(p_, "drain") for p_ in w3s}
    for partition, owner in owners.items():
        history = c.get(c.leader(), f"/v1/partitions/{partition}/history").body["history"]
        if partition not in w3s:
            assert {h["owner"] for h in history} == {owner}, history
        assert "restart" in [h["reason"] for h in history], history
