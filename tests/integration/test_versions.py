"""A rolling upgrade of the command set and the Raft transport, on three real coordinator
processes under a write load: one node is held at the previous command-set version
(`--command-set-version-max 1`, speaking and advertising only what the previous release
spoke) and at the previous transport version (`--raft-transport-version-max 2`: a plain
version-2 handshake, as the previous release makes) while the others speak the newest. Its
links talk transport version 2, the newer nodes' link between them version 3. A command of
the newer version is refused before it is proposed, naming the node behind, until that node
is restarted without the caps; then its links move to version 3, the leader finalizes the
newer command-set version and the command is accepted, with no whole-cluster restart. Every
write of the load lands and the three replicas stay equal. Held back again after the
finalization (a downgrade), the node halts loudly rather than diverge, and catches up once
upgraded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.core.versions import COMMAND_SET_VERSION
from ripple.launch import coordinator_argv
from shared.version import PACKAGE_VERSION
from testkit.background import Background
from testkit.cli import ripple
from testkit.cluster import ADMIN, Cluster
from testkit.prom import parse, value
from testkit.wait import wait_until

NODES = ("n1", "n2", "n3")
HELD = "n3"
NEWEST = f"1..{COMMAND_SET_VERSION}"  # what an unheld node speaks
WAIT_S = 30.0
LOAD_PAUSE_S = 0.01
NEWEST = f"1..{COMMAND_SET_VERSION}"  # what a node without the cap speaks
# A backup record as `ripple backup` sends it: RecordBackup, command-set version 2.
BACKUP = {
    "cluster_id": "c1",
    "applied_index": 10,
    "term": 1,
    "sha256": "ab" * 32,
    "size_bytes": 100,
    "created_at_ms": 1_700_000_000_000,
}


class WriteLoad(Background):
    """Registers new workers one after another from a thread: every write must land (the
    cluster retries through failovers and restarts with `write_via_any`)."""

    join_timeout_s = WAIT_S + 5  # a write in flight may take WAIT_S

    def __init__(self, cluster: Cluster, prefix: str) -> None:
        super().__init__(f"write-load-{prefix}")
        self.cluster = cluster
        self.prefix = prefix
        self.landed = 0
        self.failed: list[Any] = []

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            body = {"worker_id": f"{self.prefix}-{i}", "address": "http://127.0.0.1:9"}
            try:
                r = self.cluster.write_via_any("/v1/workers", body, timeout_s=WAIT_S)
            except AssertionError as exc:
                self.failed.append(str(exc))
            else:
                if r.status == 200:
                    self.landed += 1
                else:
                    self.failed.append((r.status, r.body))
            i += 1
            self._stop.wait(LOAD_PAUSE_S)


def start_held(cluster: Cluster, node_id: str) -> None:
    """Start `node_id` held at command-set version 1 and transport version 2, as a node of
    the previous release."""
    argv = [
        *coordinator_argv(cluster.config_path, node_id),
        "--command-set-version-max",
        "1",
        "--raft-transport-version-max",
        "2",
    ]
    cluster.spawn(node_id, argv)


def links(cluster: Cluster, node_id: str) -> dict[str, int]:
    """`node_id`'s open Raft links by the transport version they talk (/metrics), and the
    connections it refused for want of a common version."""
    samples = parse(str(cluster.get(node_id, "/metrics").body))
    got = {v: int(value(samples, "ripple_raft_links", version=v) or 0) for v in ("2", "3")}
    bad = value(samples, "ripple_raft_refused_connections_total", reason="bad_version")
    return {**got, "bad_version": int(bad or 0)}


def links_are(cluster: Cluster, expected: dict[str, dict[str, int]], what: str) -> None:
    wait_until(lambda: all(links(cluster, n) == want for n, want in expected.items()), what, WAIT_S)


def restart(cluster: Cluster, node_id: str, *, held: bool) -> None:
    cluster.procs[node_id].stop()
    if held:
        start_held(cluster, node_id)
    else:
        cluster.start(node_id)


def status(cluster: Cluster) -> dict[str, Any]:
    leader = cluster.leader(WAIT_S)
    return cluster.get(leader, "/v1/status?consistent=true").body  # type: ignore[no-any-return]


def speaks(cluster: Cluster) -> dict[str, str]:
    return {
        c["node_id"]: f"{c['min_version']}..{c['max_version']}"
        for c in status(cluster)["coordinators"]
    }


def record_backup(cluster: Cluster) -> Any:
    return cluster.write_via_any("/v1/admin/backups", BACKUP, token=ADMIN, timeout_s=WAIT_S)


def one_state(cluster: Cluster, among: tuple[str, ...]) -> tuple[int, str]:
    """The (applied index, state digest) every node of `among` reaches: the replicas are
    equal, not merely alike."""

    def equal() -> set[tuple[int, str]] | None:
        got = set()
        for n in among:
            body = cluster.get(n, "/v1/health?digest=true").body
            got.add((body["applied_index"], body["state_digest"]))
        return got if len(got) == 1 else None

    ((index, digest),) = wait_until(equal, f"{among} at one applied index and state", WAIT_S)
    return index, digest


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # No partition is assigned to the load's made-up workers: nothing calls them.
    c = Cluster(tmp_path, min_cluster_size=100_000)
    for node_id in NODES:
        if node_id == HELD:
            start_held(c, node_id)
        else:
            c.start(node_id)
    try:
        c.ready(WAIT_S)
        yield c
    finally:
        c.stop_all()


def test_a_newer_command_waits_for_the_held_node_then_lands_with_no_full_restart(
    cluster: Cluster,
) -> None:
    c = cluster
    with WriteLoad(c, "upgrade") as load:
        wait_until(
            lambda: speaks(c) == {"n1": NEWEST, "n2": NEWEST, "n3": "1..1"},
            "every node's versions recorded",
            WAIT_S,
        )
        st = status(c)
        assert st["finalized_command_set_version"] == 1 and st["voters"] == list(NODES)
        health = c.health(HELD)
        assert health is not None and health["command_set"] == {"min_version": 1, "max_version": 1}
        assert health["package_version"] == PACKAGE_VERSION and health["halted"] is None
        # The transport: every link to the held node talks version 2, the newer two talk 3
        # between them, and no connection is refused for want of a common version.
        links_are(
            c,
            {
                "n1": {"2": 1, "3": 1, "bad_version": 0},
                "n2": {"2": 1, "3": 1, "bad_version": 0},
                HELD: {"2": 2, "3": 0, "bad_version": 0},
            },
            "n3's links at transport version 2, n1-n2 at 3",
        )

        refused = record_backup(c)
        assert refused.status == 409, refused
        assert refused.body["error"] == "version_unsupported"
        assert f"n3 speaks 1..1 (ripple {PACKAGE_VERSION})" in refused.body["message"]
        assert "n1" not in refused.body["message"] and "n2" not in refused.body["message"]
        cli = ripple("status", "--coordinator", c.url("n1"))
        assert cli.returncode == 0, cli.stderr
        assert "command set: finalized at version 1" in cli.stdout
        assert [ln.split() for ln in cli.stdout.splitlines() if ln.startswith("n3 ")] == [
            ["n3", "yes", PACKAGE_VERSION, "1..1"]
        ]

        # The held node is upgraded: restarted alone, on the same data directory.
        restart(c, HELD, held=False)
        every_link_at_3 = {"2": 0, "3": 2, "bad_version": 0}
        links_are(c, dict.fromkeys(NODES, every_link_at_3), "every link at version 3")
        wait_until(
            lambda: status(c)["finalized_command_set_version"] == COMMAND_SET_VERSION,
            "the leader finalizes the newest version once n3 speaks it",
            WAIT_S,
        )
        assert speaks(c) == {"n1": NEWEST, "n2": NEWEST, "n3": NEWEST}
        accepted = record_backup(c)
        assert accepted.status == 200, accepted
        assert accepted.body == {"applied_index": 10, "latest": True}
        assert status(c)["last_backup"]["sha256"] == BACKUP["sha256"]
    assert load.failed == [] and load.landed > 0, load.failed
    print(f"\n{load.landed} writes landed during the upgrade")
    one_state(c, NODES)

    # Held back again after the newest version was finalized (a downgrade): the node halts at once
    # rather than skip what it cannot apply, says why, and leaves Raft; the others go on.
    restart(c, HELD, held=True)
    halted = wait_until(lambda: (c.health(HELD) or {}).get("halted"), "n3 halts", WAIT_S)
    assert f"finalized at command-set version {COMMAND_SET_VERSION}" in halted
    assert "speaks 1..1" in halted
    metrics = parse(str(c.get(HELD, "/metrics").body))
    assert value(metrics, "ripple_apply_halted") == 1
    refused_here = c.post(HELD, "/v1/admin/backups", BACKUP, token=ADMIN)
    assert refused_here.status == 503 and refused_here.body["error"] == "halted"
    assert "CRITICAL replication.log: HALTED" in c.procs[HELD].output()
    with WriteLoad(c, "downgrade") as load:
        wait_until(lambda: load.landed >= 20, "writes land without n3", WAIT_S)
    assert load.failed == []
    restart(c, HELD, held=False)
    wait_until(lambda: (c.health(HELD) or {}).get("halted", "") is None, "n3 runs", WAIT_S)
    one_state(c, NODES)
    assert status(c)["finalized_command_set_version"] == COMMAND_SET_VERSION
