"""Coordinator membership online, on real `ripple coordinator` processes: a node joins, is
added through the admin API and removed again (and refused from then on), the leader is
replaced with `ripple nodes replace` (docs/runbooks/replace-a-node.md), a node whose disk
died is replaced by a new one, and a node of another cluster is refused. Every rejected
request changes nothing. The whole cluster replaced under load is test_replace_all.py."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

from replication.identity import write_cluster_id
from ripple.launch import coordinator_argv
from shared.ports import free_ports
from testkit.background import Background
from testkit.cluster import ADMIN, Cluster
from testkit.http import Reply, call
from testkit.prom import parse, value
from testkit.wait import wait_until

# Long enough for a real node to catch up on a loaded machine, short for one that never will.
FAST = {"membership_catch_up_timeout_s": 10.0}
CHANGE_S = 60.0
PORT_DRAWS_MAX = 20  # draws of ten free ports for one whose address sorts above a voter's


def voting(c: Cluster) -> list[str]:
    """The live nodes that say they vote (a joining node does not, so it names no leader
    until it is added)."""
    return [n for n in c.alive() if (h := c.health(n)) is not None and h["voter"]]


def leader_call(c: Cluster, method: str, path: str, body: Any = None, **kw: Any) -> Reply:
    return call(method, c.url(c.leader(among=voting(c))) + path, body, **kw)


def nodes_view(c: Cluster) -> dict[str, Any]:
    r = leader_call(c, "GET", "/v1/nodes?consistent=true")
    assert r.status == 200, r.body
    return dict(r.body)


def voters(view: dict[str, Any]) -> set[str]:
    return {n["id"] for n in view["nodes"] if n["voter"]}


def change_ended(c: Cluster) -> dict[str, Any]:
    return wait_until(
        lambda: (v := nodes_view(c))["change"] is None and v, "the change to end", CHANGE_S
    )


def everyone_sees(c: Cluster, expected: set[str]) -> None:
    """Every live node's own log names exactly `expected` as the voters."""

    def agreed() -> bool:
        for nid in c.alive():
            r = c.get(nid, "/v1/nodes")
            if r.status != 200 or voters(r.body) != expected:
                return False
        return True

    wait_until(agreed, f"every node to see the voters {sorted(expected)}", CHANGE_S)


def voters_line(leader: str, ids: tuple[str, ...] = ("n1", "n2", "n3")) -> str:
    """The voters as `ripple status` and `ripple nodes` print them (the leader starred)."""
    return ", ".join(i + ("*" if i == leader else "") for i in ids)


def refused(c: Cluster, reason: str, among: list[str] | None = None) -> int:
    total = 0
    for nid in among or c.alive():
        samples = parse(str(c.get(nid, "/metrics").body))
        total += int(value(samples, "ripple_raft_refused_connections_total", reason=reason) or 0)
    return total


def greater_raft_port(c: Cluster) -> int:
    """A free port whose address sorts above a voter's: pysyncobj's greater address dials,
    so a node on it keeps dialling after its removal (and is refused)."""
    lowest = min(s.raft for s in c.specs)
    for _ in range(PORT_DRAWS_MAX):  # ten free ports can all sort below it (seen once)
        port = max(free_ports(10), key=lambda p: f"127.0.0.1:{p}")
        if f"127.0.0.1:{port}" > lowest:
            return port
    raise AssertionError(f"no free port sorts above {lowest} in {PORT_DRAWS_MAX} draws of ten")


def test_a_node_joins_is_added_then_removed_and_refused(tmp_path: Path) -> None:
    c = Cluster(tmp_path, **FAST)
    with c.running():
        leader = c.ready()
        follower = next(s.id for s in c.specs if s.id != leader)
        n4 = c.join("n4", raft_port=greater_raft_port(c))
        joined = wait_until(lambda: c.health("n4"), "the joining node's health")
        assert joined["voter"] is False and {n["id"] for n in joined["nodes"]} == {"n1", "n2", "n3"}
        body = {"id": "n4", "raft": n4.raft, "http": n4.http}
        # Refused requests, each before anything is proposed.
        assert leader_call(c, "POST", "/v1/admin/nodes", body).status == 401
        moved = call("POST", c.url(follower) + "/v1/admin/nodes", body, token=ADMIN)
        assert moved.status == 307 and moved.headers["Location"].startswith(c.url(leader))
        bad = leader_call(c, "POST", "/v1/admin/nodes", {**body, "raft": "nowhere"}, token=ADMIN)
        assert bad.status == 400 and bad.body["field"] == "raft", bad.body
        partial = leader_call(c, "POST", "/v1/admin/nodes", {"id": "n4"}, token=ADMIN)
        assert partial.status == 400 and partial.body["error"] == "invalid", partial.body
        taken = leader_call(c, "POST", "/v1/admin/nodes", {**body, "id": "n1"}, token=ADMIN)
        assert taken.status == 409 and taken.body["field"] == "id", taken.body
        gone = leader_call(c, "DELETE", "/v1/admin/nodes/n9", token=ADMIN)
        assert gone.status == 404 and gone.body["field"] == "node_id", gone.body
        # A node that is not running never catches up: its addition fails after
        # membership_catch_up_timeout_s, and meanwhile any other change is a 409.
        ghost = {"id": "n5", "raft": f"127.0.0.1:{free_ports(1)[0]}", "http": "127.0.0.1:1"}
        started = leader_call(c, "POST", "/v1/admin/nodes", ghost, token=ADMIN)
        assert started.status == 202 and started.body["change"]["phase"] == "catching_up"
        # The change in flight, as /metrics and `ripple status` show it (from any node).
        samples = parse(str(c.get(leader, "/metrics").body))
        assert value(samples, "ripple_raft_membership_change_in_flight") == 1
        status = c.ripple("status")
        assert f"voters: {voters_line(leader)}" in status, status
        assert "change in flight: add n5 (catching_up)" in status, status
        busy = leader_call(c, "POST", "/v1/admin/nodes", body, token=ADMIN)
        assert busy.status == 409 and "in flight" in busy.body["message"], busy.body
        also_bad = leader_call(c, "DELETE", "/v1/admin/nodes/n%201", token=ADMIN)
        assert also_bad.status == 400 and also_bad.body["field"] == "node_id", also_bad.body
        view = change_ended(c)
        assert view["last_change"]["phase"] == "failed" and voters(view) == {"n1", "n2", "n3"}
        assert [n["id"] for n in view["nodes"]] == ["n1", "n2", "n3"]  # no learner left
        # The addition that runs.
        added = leader_call(c, "POST", "/v1/admin/nodes", body, token=ADMIN)
        assert added.status == 202, added.body
        view = change_ended(c)
        assert view["last_change"]["phase"] == "done", view
        everyone_sees(c, {"n1", "n2", "n3", "n4"})
        assert c.health("n4")["voter"] is True  # type: ignore[index]
        again = leader_call(c, "POST", "/v1/admin/nodes", body, token=ADMIN)
        assert again.status == 200 and again.body["change"] is None  # nothing to do
        samples = parse(str(c.get(leader, "/metrics").body))
        assert value(samples, "ripple_raft_voters") == 4
        assert value(samples, "ripple_raft_membership_change_in_flight") == 0
        # Its removal: refused by name from then on, and counted.
        removed = leader_call(c, "DELETE", "/v1/admin/nodes/n4", token=ADMIN)
        assert removed.status == 202, removed.body
        assert change_ended(c)["last_change"]["phase"] == "done"
        for nid in ("n1", "n2", "n3"):
            wait_until(
                lambda nid=nid: voters(c.get(nid, "/v1/nodes").body) == {"n1", "n2", "n3"},
                f"{nid} to drop n4",
            )
        wait_until(lambda: refused(c, "removed_node") >= 2, "n4's attempts refused", CHANGE_S)
        assert c.write_via_any("/v1/admin/barrier", {}, token=ADMIN).status == 200


class VoterCount(Background):
    """Every 50 ms, the number of voters the cluster reports (a node that does not answer is
    skipped), in `counts`."""

    every_s = 0.05

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.counts: list[int] = []
        super().__init__("voter-count")

    def step(self) -> None:
        with contextlib.suppress(OSError, AssertionError):
            self.counts.append(len(voters(nodes_view(self.cluster))))


def test_the_leader_is_replaced_with_the_cli_never_below_three_voters(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    with c.running():
        old = c.ready()
        n4 = c.join("n4")
        with VoterCount(c) as sampler:
            out = c.nodes("replace", old, "--with", "n4", "--raft", n4.raft, "--http", n4.http)
        fewest = sampler.counts
        rest = {s.id for s in c.specs if s.id != old} | {"n4"}
        assert "n4" in out and old not in out.split("voters:")[1].split()[0], out
        c.retire(old)
        shutil.rmtree(c.config.node_dir(old))
        everyone_sees(c, rest)
        assert fewest and min(fewest) >= 3, fewest
        assert c.write_via_any("/v1/admin/barrier", {}, token=ADMIN).status == 200


def test_a_node_whose_disk_died_is_replaced_and_cannot_come_back_as_itself(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path)
    with c.running():
        leader = c.ready()
        dead = next(s.id for s in c.specs if s.id != leader)
        c.kill9(dead)
        shutil.rmtree(c.config.node_dir(dead))
        # Back under its old id with an empty data directory: refused before Raft starts.
        spec = c.config.node(dead)
        argv = coordinator_argv(
            c.config_path, dead, join=[c.url(leader)], raft=spec.raft, http=spec.http
        )
        back = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert back.returncode != 0 and "is a voter already" in back.stderr, back.stderr
        c.retire(dead)
        # Replaced in one call: added first (four voters, three of them up), then removed.
        n4 = c.join("n4")
        c.nodes("replace", dead, "--with", "n4", "--raft", n4.raft, "--http", n4.http)
        rest = {s.id for s in c.specs if s.id != dead} | {"n4"}
        everyone_sees(c, rest)
        # The other first-class path: remove the dead node, then add a new one.
        second = next(n for n in rest if n not in (c.leader(among=voting(c)), "n4"))
        c.kill9(second)
        c.retire(second)
        c.nodes("remove", second)
        n5 = c.join("n5")
        c.nodes("add", "n5", "--raft", n5.raft, "--http", n5.http)
        everyone_sees(c, (rest - {second}) | {"n5"})
        assert c.write_via_any("/v1/admin/barrier", {}, token=ADMIN).status == 200


def test_a_node_whose_directory_belongs_to_another_cluster_is_refused(tmp_path: Path) -> None:
    # As a node of the cluster a backup was restored from would be: the same file and
    # secret, another cluster id in its data directory.
    c = Cluster(tmp_path)
    write_cluster_id(c.config.node_dir("n3"), "another-cluster")
    with contextlib.ExitStack() as stack:
        stack.callback(c.stop_all)
        c.start_all()
        leader = c.leader(among=["n1", "n2"])
        wait_until(lambda: c.health("n3"), "n3 to answer")
        ids = {c.get(n, "/v1/nodes").body["cluster_id"] for n in ("n1", "n2", "n3")}
        assert len(ids) == 2 and "another-cluster" in ids
        wait_until(
            lambda: refused(c, "wrong_cluster", ["n1", "n2"]) >= 1,
            "n3 refused by the others as another cluster's node",
        )
        assert c.health("n3")["leader_id"] is None  # type: ignore[index]
        assert c.write_via_any("/v1/admin/barrier", {}, token=ADMIN).status == 200
        assert c.health(leader)["role"] == "leader"  # type: ignore[index]
