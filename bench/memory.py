"""Memory: coordinator state with 100,000 partitions and 1,000 workers.

Two measurements, each labelled in the table:

- `machine` (a fresh subprocess, `python -m bench.memory probe`): apply Bootstrap(100,000),
  1,000 RegisterWorker and one balanced AssignPartitions to `coordinator.core.machine
  .Machine`, exactly the commands the leader would log. `rss_mb` is the process's VmRSS
  (/proc/self/status) with that state, `base_rss_mb` the same process before the state
  (interpreter + imports): the state costs the difference. `snapshot_mb` is
  `len(Machine.snapshot())`; `restart_s` here is `Machine.restore` of that snapshot only.
- `node` (three real `ripple coordinator` processes, total_partitions 100,000, 1,000
  workers registered through the HTTP API; nothing assigned, since assigning would start
  100,000 host calls to workers that do not exist): `rss_mb` of the leader process;
  `restart_s` = all three stopped (SIGTERM), started again, until a ready leader serves
  `/v1/health` with all 1,000 workers back, restoring from its pysyncobj dump + journal
  (compaction is set to 200 entries so a dump exists). Quick mode registers fewer workers.
- `churn_retired` and `churn_kept` (`bench/churn.py`): workers come and go under fresh ids
  (100,000 over the run; 10,000 in quick mode), with the retirement of departed workers and
  without it: the workers the state holds, its snapshot and a restart's restore of it.
"""

from __future__ import annotations

import json
import sys
import time

from bench import churn
from bench.harness import run_json, scratch
from testkit.cluster import Cluster
from testkit.wait import wait_until

PARTITIONS = 100_000
WORKERS = 1_000
SETTLE_TIMEOUT_S = 120.0


def _rss_mb(pid: str = "self") -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def probe(partitions: int, workers: int) -> dict[str, float]:
    import gc

    from coordinator.core.codec import encode_command
    from coordinator.core.commands import Assignment, AssignPartitions, Bootstrap, RegisterWorker
    from coordinator.core.machine import Machine
    from coordinator.core.model import PartitionId, WorkerId
    from coordinator.core.placement import plan_balanced

    gc.collect()
    base = _rss_mb()
    m = Machine()
    now = 1_700_000_000_000
    m.apply(encode_command(Bootstrap(total_partitions=partitions, now_ms=now), "b"))
    ids = [f"worker-{i:04d}" for i in range(workers)]
    for i, wid in enumerate(ids):
        address = f"http://10.0.0.{i % 250}:8000"
        cmd = RegisterWorker(worker_id=WorkerId(wid), address=address, now_ms=now)
        m.apply(encode_command(cmd, f"r{i}"))
    owners = plan_balanced([None] * partitions, ids)
    assign = AssignPartitions(
        assignments=tuple(
            Assignment(partition=PartitionId(p), owner=WorkerId(o))
            for p, o in enumerate(owners)
            if o
        ),
        now_ms=now,
    )
    m.apply(encode_command(assign, "a"))
    del assign, owners
    gc.collect()
    rss = _rss_mb()
    t0 = time.perf_counter()
    snap = m.snapshot()
    snapshot_s = time.perf_counter() - t0
    fresh = Machine()
    t0 = time.perf_counter()
    fresh.restore(snap)
    restore_s = time.perf_counter() - t0
    assert len(fresh.state.partitions) == partitions
    return {
        "rss_mb": rss,
        "base_rss_mb": base,
        "snapshot_mb": len(snap) / 1e6,
        "snapshot_s": snapshot_s,
        "restart_s": restore_s,
    }


def _node(root_workers: int) -> dict[str, float]:
    with scratch("memory") as root:
        (root / "c").mkdir()
        cluster = Cluster(
            root / "c",
            total_partitions=PARTITIONS,
            min_cluster_size=1_000_000,
            log_compaction_min_entries=200,
            heartbeat_interval_s=5.0,
            lease_s=20.0,
            suspect_after_s=300.0,
            heartbeat_timeout_s=600.0,
            checkpoint_interval_s=3600.0,
        )
        try:
            cluster.start_all()
            leader = cluster.ready(SETTLE_TIMEOUT_S)
            run_json(
                [
                    "-m",
                    "bench.load",
                    "ops",
                    "--url",
                    cluster.url(leader) + "/v1/workers",
                    "--count",
                    str(root_workers),
                    "--concurrency",
                    "64",
                    "--register",
                ]
            )
            cluster.leader(SETTLE_TIMEOUT_S)
            rss = _rss_mb(str(cluster.procs[leader].pid))
            cluster.stop_all()
            t0 = time.monotonic()
            cluster.start_all()

            def back() -> bool:
                lid = cluster.leader(SETTLE_TIMEOUT_S)
                h = cluster.health(lid) or {}
                c = h.get("cluster", {})
                return c.get("total_workers") == root_workers and h.get("ready") is True

            wait_until(back, "restart with all workers", SETTLE_TIMEOUT_S)
            restart_s = time.monotonic() - t0
            dumps = sorted(p.stat().st_size for p in (root / "c" / "data").rglob("*dump*"))
        finally:
            cluster.stop_all()
    return {
        "partitions": PARTITIONS,
        "workers": root_workers,
        "rss_mb": rss,
        "dump_mb": (dumps[-1] / 1e6) if dumps else 0.0,
        "restart_s": restart_s,
    }


def run(quick: bool) -> dict[str, dict[str, float]]:
    machine = run_json(["-m", "bench.memory", "probe", str(PARTITIONS), str(WORKERS)])
    empty = run_json(["-m", "bench.memory", "probe", "1", "1"])
    rows = {
        "machine": {"partitions": PARTITIONS, "workers": WORKERS, **machine},
        "machine_empty": {"partitions": 1, "workers": 1, **empty},
        "node": _node(300 if quick else WORKERS),
        **churn.rows(quick),
    }
    return rows


if __name__ == "__main__" and sys.argv[1:2] == ["probe"]:
    print(json.dumps(probe(int(sys.argv[2]), int(sys.argv[3]))))
