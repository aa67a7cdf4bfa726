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

import pytest

from testkit.faults.netproxy import LinkFaults
from tests.chaos.matrix import (
    CLOCK_WORKER,
    RECOVER_TIMEOUT_S,
    Matrix,
    environ,
    run_cell,
)

pytestmark = [pytest.mark.spark]

STEP_S = 3600.0
HOLD_STEP_S = 8.0  # long enough for a few heartbeats, token checks and planner rounds
LATENCY = LinkFaults(delay_s=0.15, loss=0.05)
LATENCY_HOLD_S = 30.0
PARTITION_HOLD_S = 20.0
# Elections under 150 ms latency with 5% loss as stalls: allowed, but bounded.
ELECTIONS_UNDER_LATENCY_MAX = 3


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
