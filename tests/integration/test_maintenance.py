"""Maintenance mode and its ending on a real three-node cluster with scripted workers:
while on, a new worker gets no balance move (it would otherwise), a dead worker's partitions
still move; off, the balance that waited happens; turned on with `--for`, the leader ends it
by itself and balancing resumes. Shown in /v1/status, `ripple status` and /metrics."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.prom import parse, value
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until

SETTINGS: dict[str, Any] = {
    "total_partitions": 12,
    "min_cluster_size": 3,
    "heartbeat_interval_s": 0.3,
    "suspect_after_s": 1.0,
    "lease_s": 1.5,
    "heartbeat_timeout_s": 2.5,
    "checkpoint_interval_s": 1.0,
    "rebalance_on_join": True,
}
# Commands the leader proposes after a new worker is alive before the test looks for a move:
# two checkpoint rounds of three owners, each round planned by the planner (1 s rounds, a
# planning pass every 0.1 s), so many passes have had the chance to balance onto it.
QUIET_COMMANDS = 6
CLI_TIMEOUT_S = 60
# How long the second maintenance lasts: room for a death verdict, a worker's start and the
# quiet spell above, all while it is on.
FOR_S = 15


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[Cluster, ScriptedWorkers]]:
    c = Cluster(tmp_path, **SETTINGS)
    c.start_all()
    w = ScriptedWorkers(c)
    try:
        yield c, w
    finally:
        w.stop_all()
        c.stop_all()


def owners(c: Cluster) -> dict[str, int] | None:
    """Partitions per owner once every partition is ONLINE and nothing moves; else None."""
    leader = c.leader()
    parts = c.get(leader, "/v1/partitions?consistent=true").body["partitions"]
    moving = c.get(leader, "/v1/migrations?consistent=true").body["in_flight"]
    if moving or any(p["status"] != "online" for p in parts):
        return None
    out: dict[str, int] = {}
    for p in parts:
        out[p["owner"]] = out.get(p["owner"], 0) + 1
    return out


def settled_on(c: Cluster, workers: set[str]) -> dict[str, int]:
    return wait_until(
        lambda: o if (o := owners(c)) is not None and set(o) == workers else None,
        f"partitions settled on {sorted(workers)}",
        40,
    )


def planned_past(c: Cluster, worker: str) -> None:
    """Until `worker` is alive on the leader and the leader has since proposed QUIET_COMMANDS
    more commands: a balance onto it, if one were coming, would have been proposed."""

    def alive() -> bool:
        workers = c.get(c.leader(), "/v1/workers").body["workers"]
        return any(x["worker_id"] == worker and x["liveness"] == "alive" for x in workers)

    wait_until(alive, f"{worker} alive on the leader", 30)
    leader = c.leader()
    start = c.proposed(leader)
    assert start is not None
    wait_until(
        lambda: (now := c.proposed(leader)) is not None and now[1] >= start[1] + QUIET_COMMANDS,
        "the leader's next planning passes",
        30,
    )


def status(c: Cluster) -> dict[str, Any]:
    return c.get(c.leader(), "/v1/status?consistent=true").body  # type: ignore[no-any-return]


def maintenance_gauge(c: Cluster) -> float | None:
    reply = call("GET", c.url(c.leader()) + "/metrics")
    assert reply.status == 200, reply
    return value(parse(reply.body), "ripple_maintenance_mode")


def ripple(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    urls = [a for s in c.specs for a in ("--url", s.url)]
    return subprocess.run(
        [sys.executable, "-m", "ripple.cli", *args, *urls],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def switch(c: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v1/admin/maintenance/on|off; right after start the leader may not have finalized
    command-set version 3 yet (503 version_not_finalized): retried until it has."""

    def attempt() -> dict[str, Any] | None:
        path = "/v1/admin/maintenance/" + ("on" if body["on"] else "off")
        r = c.write_via_any(path, {k: v for k, v in body.items() if k != "on"}, token=ADMIN)
        if r.status == 503 and r.body.get("error") == "version_not_finalized":
            return None
        assert r.status == 200, r
        return r.body  # type: ignore[no-any-return]

    return wait_until(attempt, "command-set version 3 finalized", 20)


def test_maintenance_pauses_balance_not_recovery_and_ends_by_itself(
    env: tuple[Cluster, ScriptedWorkers],
) -> None:
    c, w = env
    c.ready()
    for wid in ("w1", "w2", "w3"):
        w.start(wid)
    settled_on(c, {"w1", "w2", "w3"})
    assert maintenance_gauge(c) == 0

    # On: a new worker would get its share by rebalance_on_join; it gets nothing.
    on = switch(c, {"on": True, "reason": "kernel upgrade"})
    assert on["changed"] and on["maintenance"]["reason"] == "kernel upgrade"
    assert on["maintenance"]["by"] == "admin" and on["maintenance"]["until_ms"] is None
    bad = c.write_via_any("/v1/admin/maintenance/on", {}, token=ADMIN)
    assert bad.status == 400 and bad.body["field"] == "reason", bad
    w.start("w4")
    planned_past(c, "w4")
    assert settled_on(c, {"w1", "w2", "w3"}) == {"w1": 4, "w2": 4, "w3": 4}
    assert status(c)["maintenance"]["reason"] == "kernel upgrade"
    assert maintenance_gauge(c) == 1
    refused = c.write_via_any("/v1/admin/reassign", {"strategy": "balance"}, token=ADMIN)
    assert refused.status == 409 and "maintenance mode is on" in refused.body["message"]

    # Off (by the CLI): the balance that waited happens.
    turned = ripple(c, "maintenance", "off", "--reason", "done", "--admin-token", ADMIN)
    assert turned.returncode == 0 and "maintenance: off" in turned.stdout, turned
    assert settled_on(c, {"w1", "w2", "w3", "w4"}) == {"w1": 3, "w2": 3, "w3": 3, "w4": 3}
    assert status(c)["maintenance"] is None

    # On for a while (by the CLI): a dead worker's partitions still move, a new one waits.
    turned = ripple(
        c, "maintenance", "on", "--reason", "rolling", "--for", f"{FOR_S}s", "--admin-token", ADMIN
    )
    assert turned.returncode == 0 and "maintenance: ON" in turned.stdout, turned
    began = time.monotonic()
    shown = ripple(c, "status")
    assert shown.returncode == 0 and "maintenance: ON" in shown.stdout and "rolling" in shown.stdout
    record = status(c)["maintenance"]
    assert record["until_ms"] - record["since_ms"] == FOR_S * 1000
    w.silence("w1")
    after = settled_on(c, {"w2", "w3", "w4"})  # w1's three went to the others
    assert after == {"w2": 4, "w3": 4, "w4": 4}
    w.start("w5")
    planned_past(c, "w5")
    assert owners(c) == {"w2": 4, "w3": 4, "w4": 4}  # w5 waits for the end
    assert time.monotonic() - began < FOR_S, "all of it happened while maintenance was on"
    assert status(c)["maintenance"] is not None
    workers = {x["worker_id"]: x["state"] for x in c.get(c.leader(), "/v1/workers").body["workers"]}
    assert workers["w1"] == "dead" and workers["w5"] == "active"

    # Its time is up: the leader turns it off and balancing resumes, w5 gets its share.
    wait_until(lambda: status(c)["maintenance"] is None, "maintenance ended by itself", 20)
    assert time.monotonic() - began >= FOR_S - 1  # not before its time (less the CLI's start)
    assert settled_on(c, {"w2", "w3", "w4", "w5"}) == {"w2": 3, "w3": 3, "w4": 3, "w5": 3}
    assert maintenance_gauge(c) == 0
