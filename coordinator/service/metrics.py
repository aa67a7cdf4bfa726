"""Prometheus metrics of one coordinator node, in a registry of its own (tests run several
nodes in one process). Raft gauges are refreshed at scrape time from the log's status."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

ROLES = ("leader", "follower", "candidate")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.role = Gauge(
            "ripple_raft_role", "1 for this node's current Raft role", ["role"], registry=r
        )
        self.term = Gauge("ripple_raft_term", "Current Raft term", registry=r)
        self.commit_index = Gauge("ripple_raft_commit_index", "Raft commit index", registry=r)
        self.applied_index = Gauge("ripple_raft_applied_index", "Last applied index", registry=r)
        self.proposals = Counter(
            "ripple_proposals", "Commands proposed, by outcome", ["command", "outcome"], registry=r
        )
        self.proposal_seconds = Histogram(
            "ripple_proposal_latency_seconds",
            "Time from propose to applied result",
            ["command"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.redirects = Counter("ripple_redirects", "Writes redirected to the leader", registry=r)
        self.requests = Counter(
            "ripple_http_requests",
            "HTTP requests by route and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.workers_declared_dead = Counter(
            "ripple_workers_declared_dead",
            "Workers declared dead by this node as leader",
            registry=r,
        )
        self.host_calls = Counter(
            "ripple_host_calls", "Host-partition calls to workers", ["outcome"], registry=r
        )
        self.checkpoints = Counter(
            "ripple_checkpoint_reports", "Checkpoint reports by status", ["status"], registry=r
        )

    def set_raft(self, role: str, term: int, commit_index: int, applied_index: int) -> None:
        for name in ROLES:
            self.role.labels(role=name).set(1 if name == role else 0)
        self.term.set(term)
        self.commit_index.set(commit_index)
        self.applied_index.set(applied_index)

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
