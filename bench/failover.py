"""Failover: kill -9 the leader, time until a write is committed again through HTTP.

Both clusters run at once and their rounds interleave (ripple, raw, ripple, raw, ...), so
machine noise lands on both. Each round: find the agreed leader, SIGKILL it by PID, then
probe with writes to every live node (following a follower's 307 to the leader, retrying
503s every 20 ms, 3 s per call) until one is committed; that is `failover_s`. Meanwhile a
background thread keeps a light load of about 10 writes/s going. The killed node is then
restarted and the next round waits for all three to agree on a ready leader.

- ripple: three `ripple coordinator` processes; the write is a worker registration (the
  same two worker ids throughout, one for the probe and one for the load) made with the admin
  token, since only the admin or the worker's own token may register a live worker id again.
  Each write has an idempotency key of its own, so a retry whose first attempt committed
  unseen gets that attempt's answer.
- raw: three `bench.raw_node` processes (ReplicatedLog + a counting machine + one aiohttp
  handler), the same Raft timeouts (RaftSettings defaults = ClusterConfig defaults).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from bench.harness import raw_cluster, scratch, summary
from testkit.cluster import ADMIN, Cluster
from testkit.nodes import NodeCluster

ADDRESS = "http://127.0.0.1:9"
LOAD_PERIOD_S = 0.1
SETTLE_TIMEOUT_S = 60.0
LOAD_JOIN_S = 35.0
# No partition is ever assigned (min_cluster_size is never reached), so the leader's host
# and checkpoint duties stay idle and the figure is the write path's failover alone.
SETTINGS: dict[str, Any] = {"total_partitions": 16, "min_cluster_size": 1_000_000}


def _light_load(write: Callable[[], object], stop: threading.Event) -> None:
    while not stop.is_set():
        with suppress(Exception):
            write()
        stop.wait(LOAD_PERIOD_S)


def raw_write(raw: NodeCluster, timeout_s: float) -> None:
    r = raw.write_via_any("/write", {"x": 1}, timeout_s=timeout_s)
    if r.status != 200:
        raise RuntimeError(f"raw write refused: {r.status} {r.body}")


def run(quick: bool) -> dict[str, dict[str, float]]:
    rounds = 5 if quick else 20
    times: dict[str, list[float]] = {"ripple": [], "raw": []}
    with scratch("failover") as root:
        (root / "ripple").mkdir()
        ripple = Cluster(root / "ripple", **SETTINGS)
        raw = raw_cluster(root / "raw")
        stop = threading.Event()
        loads: list[threading.Thread] = []
        try:
            ripple.start_all()
            raw.start_all()
            ripple.ready(SETTLE_TIMEOUT_S)
            raw.leader(SETTLE_TIMEOUT_S)

            writes = itertools.count()

            def ripple_write(wid: str = "fo-probe") -> None:
                r = ripple.write_via_any(
                    "/v1/workers",
                    {"worker_id": wid, "address": ADDRESS},
                    timeout_s=30.0,
                    token=ADMIN,
                    headers={"Idempotency-Key": f"{wid}-{next(writes)}"},
                )
                if r.status != 200:
                    raise RuntimeError(f"{wid} write refused: {r.status} {r.body}")

            loads += [
                threading.Thread(
                    target=_light_load, args=(lambda: ripple_write("fo-load"), stop), daemon=True
                ),
                threading.Thread(
                    target=_light_load, args=(lambda: raw_write(raw, 10.0), stop), daemon=True
                ),
            ]
            for t in loads:
                t.start()

            for _ in range(rounds):
                leader = ripple.leader(SETTLE_TIMEOUT_S)
                t0 = time.monotonic()
                ripple.kill9(leader)
                ripple_write()
                times["ripple"].append(time.monotonic() - t0)
                ripple.start(leader)

                raw_leader = raw.leader(SETTLE_TIMEOUT_S)
                t0 = time.monotonic()
                raw.kill9(raw_leader)
                raw_write(raw, 30.0)
                times["raw"].append(time.monotonic() - t0)
                raw.start(raw_leader)
                ripple.leader(SETTLE_TIMEOUT_S)
                raw.leader(SETTLE_TIMEOUT_S)
        finally:
            stop.set()
            for t in loads:
                t.join(LOAD_JOIN_S)
            ripple.stop_all()
            raw.stop_all()
    base = summary(times["raw"])
    rows: dict[str, dict[str, float]] = {}
    for name, values in times.items():
        s = summary(values)
        rows[name] = {
            "kills": len(values),
            "median_s": s["median"],
            "min_s": s["min"],
            "max_s": s["max"],
            "baseline_median_s": base["median"],
            "ratio": s["median"] / base["median"] if base["median"] else 0.0,
        }
    return rows
