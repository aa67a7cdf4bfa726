"""A coordinator cluster: real `ripple coordinator` processes on 127.0.0.1, one cluster file.

`Cluster` is a `testkit.nodes.NodeCluster` running `ripple coordinator`: it writes the
cluster file (a fixed test secret and admin token, free ports, the settings a test asks
for), and its ready leader is the one every live node names, once bootstrapped. With
`tls_cert` set the nodes serve https:// and the rig's own calls trust `tls_ca`. Nodes come
and go online as an operator's would: `join` starts a new node with `--join`, `nodes` runs
`ripple nodes ...` against the cluster, `retire` stops a removed node and forgets it.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from coordinator.config import ClusterConfig, NodeSpec
from coordinator.config_file import render_toml
from coordinator.service.auth import issue_token
from ripple.launch import coordinator_argv
from shared.ports import free_ports
from testkit.nodes import Healths, NodeCluster, NodeProgram
from testkit.process import Proc
from testkit.prom import parse, value
from testkit.wait import wait_until

__all__ = ["ADMIN", "SECRET", "Cluster", "worker_token"]

SECRET = "integration-secret-0123456789"
ADMIN = "integration-admin-token-0123"
METRICS_TIMEOUT_S = 5.0
NODES_CLI_TIMEOUT_S = 300.0


def worker_token(worker_id: str, incarnation: int) -> str:
    """A genuine worker token, as the leader issues it (good for an hour)."""
    return issue_token(SECRET, worker_id, incarnation, int(time.time() * 1000) + 3_600_000)


def agreed_leader(healths: Healths) -> str | None:
    """One node says it is the ready leader, and every node names it as leader."""
    leaders = [h["node_id"] for h in healths.values() if h["role"] == "leader" and h["ready"]]
    if len(leaders) != 1:
        return None
    if any(h["leader_id"] != leaders[0] for h in healths.values()):
        return None
    return str(leaders[0])


class Cluster(NodeCluster):
    def __init__(
        self, root: Path, *, nodes: int = 3, raft_bind: bool = False, **settings: Any
    ) -> None:
        """`raft_bind`: every node listens for Raft on a port of its own, distinct from
        the `raft` address its peers dial (where testkit.faults.raft_links puts a forwarder)."""
        ports = free_ports(3 * nodes)
        specs = tuple(
            NodeSpec(
                id=f"n{i + 1}",
                raft=f"127.0.0.1:{ports[3 * i]}",
                http=f"127.0.0.1:{ports[3 * i + 1]}",
                raft_bind=f"127.0.0.1:{ports[3 * i + 2]}" if raft_bind else None,
            )
            for i in range(nodes)
        )
        # `store`: what the workers get as --store; checkpoint references are checked
        # against it (tests with real workers pass theirs).
        # open_registration: tests register workers without a join token unless they set one.
        defaults: dict[str, Any] = {
            "total_partitions": 16,
            "store": f"file://{root}/store",
            "open_registration": True,
        }
        self.config = ClusterConfig(
            cluster_secret=SECRET,
            admin_token=ADMIN,
            data_dir=str(root / "data"),
            nodes=specs,
            **{**defaults, **settings},
        )
        self.specs = self.config.nodes  # their URLs carry the scheme
        self.config_path = root / "cluster.toml"
        self.config_path.write_text(render_toml(self.config))
        tls_ca = self.config.tls_ca
        super().__init__(
            root,
            NodeProgram(
                argv=lambda node_id: coordinator_argv(self.config_path, node_id),
                health_path="/v1/health",
                agreed_leader=agreed_leader,
            ),
            {s.id: s.url for s in self.specs},
            ssl.create_default_context(cafile=tls_ca) if tls_ca else None,
        )

    def start(self, node_id: str, *, config_path: Path | None = None) -> Proc:
        """Start `node_id`, from another cluster file if given (a test's edited copy)."""
        return self.spawn(node_id, coordinator_argv(config_path or self.config_path, node_id))

    def join(self, node_id: str, *, raft_port: int | None = None) -> NodeSpec:
        """Start a new node `node_id` on free ports (`raft_port` if given) with `--join`
        through the live nodes, as docs/runbooks/ do; it is a voter only
        once added (`nodes("add", ...)`)."""
        raft, http = free_ports(2)
        spec = NodeSpec(
            id=node_id,
            raft=f"127.0.0.1:{raft_port or raft}",
            http=f"127.0.0.1:{http}",
            scheme="https" if self.config.tls_cert else "http",
        )
        via = [self.url(n) for n in self.alive()]
        self.urls[node_id] = spec.url
        argv = coordinator_argv(self.config_path, node_id, join=via, raft=spec.raft, http=spec.http)
        self.spawn(node_id, argv)
        return spec

    def retire(self, node_id: str) -> None:
        """Stop node `node_id` and forget it (a node removed from the cluster)."""
        proc = self.procs.pop(node_id, None)
        if proc is not None:
            proc.stop()
        self.urls.pop(node_id, None)

    def nodes(self, *args: str, timeout_s: float = NODES_CLI_TIMEOUT_S) -> str:
        """`ripple nodes ARGS` against the live nodes with the admin token; its output, or
        AssertionError with its stderr when it fails."""
        return self.ripple("nodes", *args, "--admin-token", ADMIN, timeout_s=timeout_s)

    def ripple(self, *args: str, timeout_s: float = NODES_CLI_TIMEOUT_S) -> str:
        """`ripple ARGS` against the live nodes; its output, or AssertionError with its
        stderr when it fails."""
        argv = [sys.executable, "-m", "ripple.cli", *args]
        for nid in self.alive():
            argv += ["--coordinator", self.url(nid)]
        if self.config.tls_ca:
            argv += ["--tls-ca", self.config.tls_ca]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
        assert done.returncode == 0, f"ripple {' '.join(args)}: {done.stderr}"
        return done.stdout

    def ready(self, timeout_s: float = 30.0) -> str:
        """The agreed leader, once it has bootstrapped the partition table."""
        leader = self.leader(timeout_s)
        wait_until(
            lambda: (self.health(leader) or {}).get("cluster", {}).get("total_partitions", 0) > 0,
            "bootstrap",
            timeout_s,
        )
        return leader

    def proposed(self, node_id: str) -> tuple[int, int] | None:
        """(log entries, commands) this node's group commit proposed since it started, from
        its /metrics; None when the node does not answer."""
        try:
            r = self.get(node_id, "/metrics", timeout_s=METRICS_TIMEOUT_S)
        except OSError:
            return None
        if r.status != 200:
            return None
        samples = parse(str(r.body))

        def total(name: str) -> int:
            found = value(samples, name)
            if found is None:
                raise KeyError(f"{name} missing from {node_id}'s /metrics")
            return int(found)

        return (
            total("ripple_raft_entries_proposed_total"),
            total("ripple_raft_commands_proposed_total"),
        )
