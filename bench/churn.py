"""Churn: the replicated state under workers that come and go under fresh ids, with the
retirement of departed workers and without it, in one run (rows of `python -m bench memory`).

A fresh subprocess per variant (`python -m bench.churn probe IDS RETIRE`) applies to
`coordinator.core.machine.Machine` exactly the commands the leader would log: every second
of simulated time `ids / ROUNDS` workers register under ids never seen before and as many of
the oldest live ones are declared dead (pods replaced on a rollout), and, with retirement,
the `RetireWorkers` batches the leader's planner would propose (`coordinator/core/
retirement.py`'s `due`) at a retention window of `RETAIN_S`. Reported: the workers the
state holds and its snapshot at the end, the largest snapshot seen, and `restart_s`, the
restore of the final snapshot by a fresh machine (what a restarted node loads before it
replays the log's tail: its catch-up).
"""

from __future__ import annotations

import json
import sys
import time

from bench.harness import run_json

LIVE = 200  # workers alive at any moment
ROUNDS = 100  # one per simulated second
RETAIN_S = 10  # the retention window, in simulated seconds
PARTITIONS = 1_000
IDS_FULL = 100_000
IDS_QUICK = 10_000


def probe(ids: int, retire: bool) -> dict[str, float]:
    from coordinator.core.codec import encode_command
    from coordinator.core.commands import (
        Bootstrap,
        Command,
        DeclareDead,
        FinalizeVersion,
        RegisterWorker,
        ReportVersions,
    )
    from coordinator.core.machine import Machine
    from coordinator.core.model import WorkerId
    from coordinator.core.retirement import due
    from coordinator.core.versions import COMMAND_SET_VERSION

    m = Machine()
    seq = iter(range(10**9))

    def apply(cmd: Command) -> None:
        m.apply(encode_command(cmd, f"r{next(seq)}"))

    now = 1_700_000_000_000
    apply(
        ReportVersions(node_id="n1", min_version=1, max_version=3, package_version="b", now_ms=now)
    )
    apply(FinalizeVersion(version=COMMAND_SET_VERSION, voters=("n1",), now_ms=now))
    apply(Bootstrap(total_partitions=PARTITIONS, now_ms=now))
    live: list[str] = []
    registered = 0
    per_round = max(1, ids // ROUNDS)
    snapshot_max = 0
    while registered < ids:
        now += 1_000
        for _ in range(min(per_round, ids - registered)):
            wid = f"pod-{registered:07d}"
            registered += 1
            apply(
                RegisterWorker(worker_id=WorkerId(wid), address="http://10.0.0.1:8000", now_ms=now)
            )
            live.append(wid)
        gone, live = live[: max(0, len(live) - LIVE)], live[max(0, len(live) - LIVE) :]
        if gone:
            apply(DeclareDead(worker_ids=tuple(map(WorkerId, gone)), assignments=(), now_ms=now))
        while retire and (cmd := due(m.state, now, RETAIN_S * 1_000)) is not None:
            apply(cmd)
        if registered % (per_round * 10) == 0:
            snapshot_max = max(snapshot_max, len(m.snapshot()))
    snap = m.snapshot()
    snapshot_max = max(snapshot_max, len(snap))
    fresh = Machine()
    t0 = time.perf_counter()
    fresh.restore(snap)
    restart_s = time.perf_counter() - t0
    return {
        "ids": ids,
        "workers_held": len(fresh.state.workers),
        "snapshot_mb": len(snap) / 1e6,
        "snapshot_max_mb": snapshot_max / 1e6,
        "restart_s": restart_s,
    }


def rows(quick: bool) -> dict[str, dict[str, float]]:
    ids = IDS_QUICK if quick else IDS_FULL
    return {
        "churn_retired": run_json(["-m", "bench.churn", "probe", str(ids), "1"]),
        "churn_kept": run_json(["-m", "bench.churn", "probe", str(ids), "0"]),
    }


if __name__ == "__main__" and sys.argv[1:2] == ["probe"]:
    print(json.dumps(probe(int(sys.argv[2]), sys.argv[3] == "1")))
