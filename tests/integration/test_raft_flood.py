"""A stranger floods every Raft port of a real three-node cluster under a steady write load.

On pysyncobj's own transport, one connection streaming a frame that claims 2 GiB deposes
the leader within about a second, and a few keep every write failing. With the hardened
transport the same flood (plus many idle connections per port) changes nothing a client can
see: the term and the leader stay, every write succeeds, and the nodes count what they
refused.

"The slowest write stays under a second" is a safety criterion under attack, not a speed
goal: on pysyncobj's transport writes fail outright or take seconds. The bound is
generous for a loaded 2-core machine (a write takes a few ms here without the flood).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from tests.raft_flood import RaftFlood

FLOOD_S = 8.0
WRITE_PERIOD_S = 0.05
SLOWEST_WRITE_S_MAX = 1.0
REFUSED = re.compile(r'^ripple_raft_refused_connections_total\{reason="([a-z_]+)"\} (\S+)$', re.M)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    c.start_all()
    try:
        yield c
    finally:
        c.stop_all()


def refusals(c: Cluster, node_id: str) -> dict[str, float]:
    r = call("GET", c.url(node_id) + "/metrics")
    assert r.status == 200
    return {reason: float(v) for reason, v in REFUSED.findall(str(r.body))}


def terms_and_leaders(c: Cluster) -> dict[str, tuple[int, str | None]]:
    out = {}
    for s in c.specs:
        h = c.health(s.id)
        assert h is not None, f"{s.id} stopped answering"
        out[s.id] = (h["term"], h["leader_id"])
    return out


def test_stranger_flood_neither_deposes_the_leader_nor_delays_writes(cluster: Cluster) -> None:
    leader = cluster.ready()
    before = terms_and_leaders(cluster)
    url = cluster.url(leader) + "/v1/admin/barrier"
    targets = []
    for s in cluster.specs:
        host, port = s.raft.rsplit(":", 1)
        targets.append((host, int(port)))
    latencies: list[float] = []
    failures: list[str] = []
    with RaftFlood(targets, streamers_per_target=3, idlers_per_target=100) as flood:
        deadline = time.monotonic() + FLOOD_S
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                r = call("POST", url, {}, token=ADMIN, timeout_s=5.0)
                if r.status != 200:
                    failures.append(f"{r.status} {r.body}")
            except OSError as exc:
                failures.append(repr(exc))
            latencies.append(time.monotonic() - t0)
            time.sleep(WRITE_PERIOD_S)
    after = terms_and_leaders(cluster)
    slowest = max(latencies)
    print(
        f"\nflood: {len(latencies)} writes, slowest {slowest * 1000:.1f} ms, "
        f"median {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms; {flood.stats}"
    )
    assert flood.stats.stream_connects > len(targets), "the flood never got going"
    assert after == before, f"term or leader changed under the flood: {before} -> {after}"
    assert not failures, f"{len(failures)} writes failed, first: {failures[:3]}"
    assert slowest < SLOWEST_WRITE_S_MAX, f"slowest write {slowest:.3f} s"
    for s in cluster.specs:
        counted = refusals(cluster, s.id)
        assert counted.get("bad_handshake", 0) > 0, f"{s.id} counted no refusal: {counted}"
        assert counted.get("handshake_timeout", 0) + counted.get("unauthenticated_limit", 0) > 0, (
            f"{s.id} never closed an idle stranger: {counted}"
        )
