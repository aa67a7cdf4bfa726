"""A three-node coordinator cluster of real `ripple coordinator` processes on 127.0.0.1.

Each node is a child process tracked by PID (tests.support.Proc). HTTP calls use
http.client directly so redirects are never followed behind a test's back.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from coordinator.config import ClusterConfig, NodeSpec, render_toml
from coordinator.service.auth import issue_token
from ripple.launch import coordinator_argv
from tests.support import Proc, free_ports, wait_until

SECRET = "integration-secret-0123456789"
ADMIN = "integration-admin-token-0123"
HTTP_TIMEOUT_S = 10.0


def worker_token(worker_id: str, incarnation: int) -> str:
    """A genuine worker token, as the leader issues it (good for an hour)."""
    return issue_token(SECRET, worker_id, incarnation, int(time.time() * 1000) + 3_600_000)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


def call(
    method: str,
    url: str,
    body: Any = None,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    timeout_s: float = HTTP_TIMEOUT_S,
    context: ssl.SSLContext | None = None,
) -> Reply:
    """One request; https:// URLs are verified with `context` (a test CA's)."""
    parts = urlsplit(url)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout_s, context=context
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    hdrs = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
    finally:
        conn.close()
    try:
        parsed: Any = json.loads(payload) if payload else None
    except ValueError:
        parsed = payload.decode(errors="replace")
    return Reply(resp.status, {k: v for k, v in resp.getheaders()}, parsed)


class Cluster:
    def __init__(
        self, root: Path, *, nodes: int = 3, raft_bind: bool = False, **settings: Any
    ) -> None:
        """`raft_bind`: every node listens for Raft on a port of its own, distinct from
        the `raft` address its peers dial (where tests.chaos.netproxy puts a forwarder)."""
        self.root = root
        ports = free_ports(3 * nodes)
        self.specs = tuple(
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
            nodes=self.specs,
            **{**defaults, **settings},
        )
        # With tls_cert set the nodes serve https://; the test's own calls trust tls_ca.
        tls_ca = self.config.tls_ca
        self.context = ssl.create_default_context(cafile=tls_ca) if tls_ca else None
        self.specs = self.config.nodes  # their URLs carry the scheme
        self.config_path = root / "cluster.toml"
        self.config_path.write_text(render_toml(self.config))
        self.procs: dict[str, Proc] = {}

    # -- processes ---------------------------------------------------------------------------

    def start(self, node_id: str, *, config_path: Path | None = None) -> Proc:
        proc = Proc(
            coordinator_argv(config_path or self.config_path, node_id),
            self.root / "logs" / f"{node_id}.log",
        )
        self.procs[node_id] = proc
        return proc

    @contextlib.contextmanager
    def running(self, timeout_s: float = 60.0) -> Iterator[Cluster]:
        """Every node started and the cluster bootstrapped; every node stopped after."""
        self.start_all()
        try:
            self.ready(timeout_s)
            yield self
        finally:
            self.stop_all()

    def start_all(self) -> None:
        for s in self.specs:
            self.start(s.id)

    def kill9(self, node_id: str) -> None:
        self.procs[node_id].kill9()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.stop()

    def alive(self) -> list[str]:
        return [nid for nid, p in self.procs.items() if p.alive()]

    # -- http ---------------------------------------------------------------------------------

    def url(self, node_id: str) -> str:
        return next(s.url for s in self.specs if s.id == node_id)

    def health(self, node_id: str) -> dict[str, Any] | None:
        try:
            r = call("GET", self.url(node_id) + "/v1/health", timeout_s=2.0, context=self.context)
        except OSError:
            return None
        return r.body if r.status == 200 else None

    def proposed(self, node_id: str) -> tuple[int, int] | None:
        """(log entries, commands) this node's group commit proposed since it started, from
        its /metrics; None when the node does not answer."""
        try:
            r = call("GET", self.url(node_id) + "/metrics", timeout_s=5.0, context=self.context)
        except OSError:
            return None
        if r.status != 200:
            return None
        values: dict[str, int] = {}
        for line in str(r.body).splitlines():
            name, _, value = line.partition(" ")
            if name in (
                "ripple_raft_entries_proposed_total",
                "ripple_raft_commands_proposed_total",
            ):
                values[name] = int(float(value))
        return (
            values["ripple_raft_entries_proposed_total"],
            values["ripple_raft_commands_proposed_total"],
        )

    def leader(self, timeout_s: float = 30.0, among: list[str] | None = None) -> str:
        """The id of the single ready leader that every live node agrees on."""

        def agreed() -> str | None:
            nodes = among or self.alive()
            hs = [self.health(n) for n in nodes]
            if any(h is None for h in hs):
                return None
            leaders = [h["node_id"] for h in hs if h and h["role"] == "leader" and h["ready"]]
            if len(leaders) != 1:
                return None
            if any(h and h["leader_id"] != leaders[0] for h in hs):
                return None
            return leaders[0]

        return wait_until(agreed, "one agreed ready leader", timeout_s)

    def ready(self, timeout_s: float = 30.0) -> str:
        leader = self.leader(timeout_s)
        wait_until(
            lambda: (self.health(leader) or {}).get("cluster", {}).get("total_partitions", 0) > 0,
            "bootstrap",
            timeout_s,
        )
        return leader

    def post(self, node_id: str, path: str, body: Any, **kw: Any) -> Reply:
        return call("POST", self.url(node_id) + path, body, context=self.context, **kw)

    def get(self, node_id: str, path: str, **kw: Any) -> Reply:
        return call("GET", self.url(node_id) + path, context=self.context, **kw)

    def write_via_any(self, path: str, body: Any, *, timeout_s: float = 30.0, **kw: Any) -> Reply:
        """POST to whichever node answers, following redirects and 503s, until it lands."""
        deadline = time.monotonic() + timeout_s
        last: Reply | None = None
        while time.monotonic() < deadline:
            for nid in self.alive():
                try:
                    r = self.post(nid, path, body, timeout_s=3.0, **kw)
                    if r.status == 307:
                        loc = r.headers["Location"]
                        r = call("POST", loc, body, timeout_s=3.0, context=self.context, **kw)
                except OSError:
                    continue
                last = r
                if r.status < 500 and r.status != 307:
                    return r
            time.sleep(0.02)
        raise AssertionError(f"no write landed within {timeout_s} s (last: {last})")
