"""Recovery: how long the pipeline takes to heal after a kill -9.

Rig: three coordinators, three `ripple worker` processes on one Spark Connect server, local
store, 8 partitions, short timeouts (testkit.pipeline_rig.SETTINGS: heartbeat_interval_s 0.3,
suspect_after_s 1, lease_s 1.5, heartbeat_timeout_s 3, checkpoint_interval_s 1).

- `worker_kill`: new input is produced, then the worker owning the most partitions is
  SIGKILLed. `partitions_online_s`: until every partition is ONLINE on another worker.
  `caught_up_s`: until, in addition, every owner has processed the whole source log (they
  replay from the last accepted checkpoint). A fresh worker then replaces the dead one.
- `leader_kill`: the coordinator leader is SIGKILLed. `partitions_online_s`: until a new
  leader is ready; `caught_up_s`: until every live worker has heartbeated to it (its
  `/v1/workers` shows a load for each; a new leader knows no load until it hears one).

Baseline: the configured `heartbeat_timeout_s` (the floor for declaring a worker dead: the
detector cannot move partitions sooner) and, for the leader, the raw Raft election window
raft_max_timeout_s; `ratio` is the median over that floor.
"""

from __future__ import annotations

import time
from functools import partial

from bench.harness import caught_up_s, pipeline_rig, scratch, summary
from pipeline.source import generate
from testkit.pipeline_rig import SETTINGS, PipelineRig
from testkit.wait import wait_until

RAFT_MAX_TIMEOUT_S = 0.6  # ClusterConfig default
HEAL_TIMEOUT_S = 120.0


def _all_online_without(rig: PipelineRig, gone: str) -> bool:
    return all(p["status"] == "online" and p["owner"] != gone for p in rig.table())


def _workers_heartbeating(rig: PipelineRig, leader: str) -> bool:
    r = rig.cluster.get(leader, "/v1/workers")
    if r.status != 200:
        return False
    live = {w for w, p in rig.workers.items() if p.alive()}
    seen = {w["worker_id"] for w in r.body["workers"] if w.get("load") is not None}
    return live <= seen


def run(quick: bool) -> dict[str, dict[str, float]]:
    rounds = 1 if quick else 3
    results: dict[str, dict[str, list[float]]] = {
        "worker_kill": {"online": [], "caught": []},
        "leader_kill": {"online": [], "caught": []},
    }
    with scratch("recovery") as root, pipeline_rig(root) as rig:
        for wid in ("w1", "w2", "w3"):
            rig.start_worker(wid)
        rig.producer.produce(generate(3000, 40, seed=1))
        caught_up_s(rig)
        spare = 4
        for r in range(rounds):
            # -- worker kill
            parts = rig.table()
            counts: dict[str, int] = {}
            for p in parts:
                counts[p["owner"]] = counts.get(p["owner"], 0) + 1
            victim = max(counts, key=lambda w: (counts[w], w))
            rig.producer.produce(generate(1000, 40, seed=10 + r))
            t0 = time.monotonic()
            rig.workers[victim].kill9()
            wait_until(partial(_all_online_without, rig, victim), "moved", HEAL_TIMEOUT_S, 0.05)
            results["worker_kill"]["online"].append(time.monotonic() - t0)
            caught_up_s(rig, HEAL_TIMEOUT_S)
            results["worker_kill"]["caught"].append(time.monotonic() - t0)
            rig.start_worker(f"w{spare}")
            spare += 1

            # -- leader kill
            leader = rig.cluster.leader()
            t0 = time.monotonic()
            rig.cluster.kill9(leader)
            new = rig.cluster.leader(HEAL_TIMEOUT_S)
            results["leader_kill"]["online"].append(time.monotonic() - t0)
            wait_until(
                partial(_workers_heartbeating, rig, new),
                "workers heartbeat the new leader",
                HEAL_TIMEOUT_S,
                0.05,
            )
            results["leader_kill"]["caught"].append(time.monotonic() - t0)
            rig.cluster.start(leader)
            rig.cluster.leader(HEAL_TIMEOUT_S)
            caught_up_s(rig)

    floors = {"worker_kill": SETTINGS["heartbeat_timeout_s"], "leader_kill": RAFT_MAX_TIMEOUT_S}
    rows: dict[str, dict[str, float]] = {}
    for case, v in results.items():
        online, caught = summary(v["online"]), summary(v["caught"])
        rows[case] = {
            "kills": len(v["online"]),
            "partitions_online_s": online["median"],
            "online_min_s": online["min"],
            "online_max_s": online["max"],
            "caught_up_s": caught["median"],
            "caught_min_s": caught["min"],
            "caught_max_s": caught["max"],
            "floor_s": floors[case],
            "ratio": online["median"] / floors[case],
        }
    rows["settings"] = {
        "heartbeat_interval_s": SETTINGS["heartbeat_interval_s"],
        "suspect_after_s": SETTINGS["suspect_after_s"],
        "lease_s": SETTINGS["lease_s"],
        "heartbeat_timeout_s": SETTINGS["heartbeat_timeout_s"],
    }
    return rows
