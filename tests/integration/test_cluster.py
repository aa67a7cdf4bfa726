"""Three real `ripple coordinator` processes on 127.0.0.1: leadership, redirects, failover,
restart with data, whole-cluster restart, and what a stranger on the Raft port can do."""

from __future__ import annotations

import pickle
import socket
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.config_file import render_toml
from testkit.cluster import ADMIN, Cluster, worker_token
from testkit.http import call
from testkit.wait import wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    c.start_all()
    try:
        yield c
    finally:
        c.stop_all()


def register(c: Cluster, node: str, worker: str, port: int = 9, **kw: Any) -> dict:  # type: ignore[type-arg]
    body = {"worker_id": worker, "address": f"http://127.0.0.1:{port}"}
    r = c.post(node, "/v1/workers", body, **kw)
    assert r.status == 200, r
    return r.body  # type: ignore[no-any-return]


def test_one_leader_and_follower_redirects_writes(cluster: Cluster) -> None:
    leader = cluster.ready()
    followers = [s.id for s in cluster.specs if s.id != leader]
    for f in followers:
        h = cluster.health(f)
        assert h is not None and h["role"] == "follower" and h["leader_id"] == leader
        assert h["leader_url"] == cluster.url(leader)
    r = cluster.post(
        followers[0], "/v1/workers?trace=1", {"worker_id": "w1", "address": "http://127.0.0.1:9"}
    )
    assert r.status == 307
    assert r.headers["Location"] == cluster.url(leader) + "/v1/workers?trace=1"
    assert r.headers["Ripple-Leader"] == leader
    assert r.body["error"] == "not_leader"
    # Following the redirect lands the write.
    r2 = call("POST", r.headers["Location"], {"worker_id": "w1", "address": "http://127.0.0.1:9"})
    assert r2.status == 200 and r2.body["incarnation"] == 1
    # Every node serves on uvloop (a dependency; server.new_event_loop) with the GIL switch
    # interval and gc thresholds of server.run, and says so.
    for spec in cluster.specs:
        text = (cluster.root / "logs" / f"{spec.id}.log").read_text(errors="replace")
        assert f"node {spec.id}: raft" in text and "event loop uvloop" in text, text[-2000:]
        assert "GIL switch interval 1 ms, gc thresholds 10000,50,10" in text, text[-2000:]
    # Reads are served locally by followers (stale), never redirected...
    wait_until(
        lambda: any(
            w["worker_id"] == "w1" for w in cluster.get(followers[0], "/v1/workers").body["workers"]
        ),
        "follower catches up",
    )
    r3 = cluster.get(followers[0], "/v1/workers")
    assert r3.status == 200 and r3.body["stale"] is True
    # ...unless consistent=true, which is the leader's after a barrier.
    r4 = cluster.get(followers[0], "/v1/partitions?consistent=true")
    assert r4.status == 307 and r4.headers["Location"].endswith("/v1/partitions?consistent=true")
    r5 = cluster.get(leader, "/v1/partitions?consistent=true")
    assert r5.status == 200 and r5.body["stale"] is False
    assert len(r5.body["partitions"]) == 16
    assert set(r5.body["partitions"][0]) >= {"partition", "owner", "epoch", "status", "checkpoint"}


def test_worker_tokens_heartbeats_and_reregistration(cluster: Cluster) -> None:
    leader = cluster.ready()
    reg = register(cluster, leader, "w1")
    assert set(reg) == {
        "worker_id",
        "incarnation",
        "token",
        "token_expires_at_ms",
        "call_token",
        "heartbeat_interval_s",
        "lease_s",
    }
    hb = {"incarnation": 1, "load": 0.5, "partitions": {}}
    r = cluster.post(leader, "/v1/workers/w1/heartbeat", hb, token=reg["token"])
    assert r.status == 200, r
    assert set(r.body) == {
        "generation",
        "assignment",
        "checkpoint_due",
        "token",
        "token_expires_at_ms",
    }
    # The renewed token works like the first one.
    assert cluster.post(leader, "/v1/workers/w1/heartbeat", hb, token=r.body["token"]).status == 200
    # min_cluster_size 1: the leader assigns every partition to the only worker.
    wait_until(
        lambda: (
            len(
                cluster.post(leader, "/v1/workers/w1/heartbeat", hb, token=reg["token"]).body[
                    "assignment"
                ]
            )
            == 16
        ),
        "assignment to w1",
    )
    # A forged or missing token: 401; another worker's genuine token: 403.
    reg2 = register(cluster, leader, "w2")
    assert cluster.post(leader, "/v1/workers/w1/heartbeat", hb, token="1.deadbeef").status == 401
    assert cluster.post(leader, "/v1/workers/w1/heartbeat", hb, token=reg2["token"]).status == 403
    assert cluster.post(leader, "/v1/workers/w1/heartbeat", hb).status == 401
    # Re-registration of a live worker id takes its current token: new incarnation; the old
    # token is stale (409).
    again = register(cluster, leader, "w1", headers={"Ripple-Worker-Token": reg["token"]})
    assert again["incarnation"] == 2
    stale = cluster.post(leader, "/v1/workers/w1/heartbeat", hb, token=reg["token"])
    assert stale.status == 409 and stale.body["error"] == "stale_incarnation"
    ok = cluster.post(
        leader, "/v1/workers/w1/heartbeat", {**hb, "incarnation": 2}, token=again["token"]
    )
    assert ok.status == 200
    # Unknown worker: 404, it must register.
    ghost = cluster.post(leader, "/v1/workers/ghost/heartbeat", hb, token=worker_token("ghost", 1))
    assert ghost.status == 404 and ghost.body["error"] == "unknown_worker"


def test_failing_batches_reported_in_heartbeats_show_on_the_leader(cluster: Cluster) -> None:
    leader = cluster.ready()
    reg = register(cluster, leader, "w1")
    hb: dict[str, Any] = {"incarnation": 1, "load": 1.0, "partitions": {}}

    def assignment() -> dict[int, int]:
        r = cluster.post(leader, "/v1/workers/w1/heartbeat", hb, token=reg["token"])
        return {a["partition"]: a["epoch"] for a in r.body["assignment"]}

    owned = wait_until(lambda: (a := assignment()) and len(a) == 16 and a, "assignment to w1")
    error = "FAILED_READ_FILE.FILE_NOT_EXIST /stage/w1/source/p00003/x.parquet"
    reports = {str(p): {"epoch": e, "offset": 0} for p, e in owned.items()}
    reports["3"] = {"epoch": owned[3], "offset": 0, "failures": 4, "error": error}
    # A report about an epoch the worker no longer holds is not shown.
    reports["5"] = {"epoch": owned[5] + 7, "offset": 0, "failures": 9, "error": "old"}
    r = cluster.post(
        leader, "/v1/workers/w1/heartbeat", {**hb, "partitions": reports}, token=reg["token"]
    )
    assert r.status == 200, r
    parts = cluster.get(leader, "/v1/partitions").body["partitions"]
    assert {p["partition"]: p["failing"] for p in parts if p["failing"]} == {
        3: {"failures": 4, "error": error}
    }
    assert cluster.get(leader, "/v1/partitions/3").body["failing"]["failures"] == 4
    workers = cluster.get(leader, "/v1/workers").body["workers"]
    assert [(w["worker_id"], w["failing_partitions"]) for w in workers] == [("w1", 1)]
    follower = next(s.id for s in cluster.specs if s.id != leader)
    assert cluster.get(follower, "/v1/workers").body["workers"][0]["failing_partitions"] is None
    # An error over the bound is bad input: 400 naming the field, nothing recorded.
    too_long = {**reports, "3": {**reports["3"], "error": "x" * 5000}}
    bad = cluster.post(
        leader, "/v1/workers/w1/heartbeat", {**hb, "partitions": too_long}, token=reg["token"]
    )
    assert bad.status == 400 and "partitions" in bad.body.get("field", ""), bad
    # The next heartbeat without failures clears it.
    assignment()
    parts = cluster.get(leader, "/v1/partitions").body["partitions"]
    assert not any(p["failing"] for p in parts)
    assert cluster.get(leader, "/v1/workers").body["workers"][0]["failing_partitions"] == 0


def test_bad_input_is_a_clear_error_and_changes_nothing(cluster: Cluster) -> None:
    leader = cluster.ready()
    register(cluster, leader, "w1")
    before = cluster.get(leader, "/v1/workers?consistent=true").body["workers"]
    cases = [
        (cluster.post(leader, "/v1/workers", None, raw=b"{not json"), 400, "body"),
        (
            cluster.post(leader, "/v1/workers", {"worker_id": "bad id!", "address": "http://x:1"}),
            400,
            "worker_id",
        ),
        (cluster.post(leader, "/v1/workers", {"worker_id": "w9"}), 400, "address"),
        (
            cluster.post(
                leader, "/v1/workers", {"worker_id": "w9", "address": "http://x:1", "extra": 1}
            ),
            400,
            "extra",
        ),
        (
            cluster.post(leader, "/v1/workers", {"worker_id": 7, "address": "http://x:1"}),
            400,
            "worker_id",
        ),
        (cluster.post(leader, "/v1/workers", None, raw=b"x" * 2_000_000), 413, None),
        (cluster.get(leader, "/v1/partitions/abc"), 400, "partition"),
        (cluster.get(leader, "/v1/partitions/99999"), 404, "partition"),
        (cluster.get(leader, "/v1/partitions?consistent=maybe"), 400, "consistent"),
        (cluster.get(leader, "/v1/health?digest=maybe"), 400, "digest"),
        (cluster.post(leader, "/v1/admin/reassign", {"strategy": "balance"}), 401, None),
        (
            cluster.post(
                leader,
                "/v1/admin/reassign",
                {"strategy": "balance"},
                token="wrong-admin-token-xxxxxxxx",
            ),
            403,
            None,
        ),
        (
            cluster.post(leader, "/v1/admin/reassign", {"strategy": "chaos"}, token=ADMIN),
            400,
            "strategy",
        ),
        (cluster.get(leader, "/v1/nope"), 404, None),
    ]
    for reply, status, field in cases:
        assert reply.status == status, reply
        assert isinstance(reply.body, dict) and {"error", "message"} <= set(reply.body), reply
        if field is not None:
            assert reply.body.get("field", "").split(".")[0] == field, reply
        assert "Traceback" not in str(reply.body)
    after = cluster.get(leader, "/v1/workers?consistent=true").body["workers"]
    assert [w["worker_id"] for w in after] == [w["worker_id"] for w in before]


def test_metrics_and_openapi(cluster: Cluster) -> None:
    leader = cluster.ready()
    register(cluster, leader, "w1")
    text = cluster.get(leader, "/metrics").body
    for name in (
        "ripple_raft_role",
        "ripple_raft_term",
        "ripple_raft_commit_index",
        "ripple_raft_applied_index",
        "ripple_proposals_total",
        "ripple_proposal_latency_seconds_bucket",
        "ripple_http_requests_total",
    ):
        assert name in text, name
    assert 'ripple_raft_role{role="leader"} 1.0' in text
    doc = cluster.get(leader, "/v1/openapi.json").body
    assert doc["openapi"].startswith("3.")
    assert "/v1/workers/{worker_id}/heartbeat" in doc["paths"]
    schema = doc["components"]["schemas"]["RegisterRequest"]
    assert set(schema["required"]) == {"worker_id", "address"}


def test_kill_leader_new_leader_commits_and_old_node_catches_up(cluster: Cluster) -> None:
    leader = cluster.ready()
    for i in range(5):
        register(cluster, leader, f"w{i}")
    killed_at = time.monotonic()
    cluster.kill9(leader)
    r = cluster.write_via_any(
        "/v1/workers", {"worker_id": "after", "address": "http://127.0.0.1:9"}
    )
    failover_s = time.monotonic() - killed_at
    assert r.status == 200
    print(f"\nfailover: kill -9 of the leader to a committed write: {failover_s:.3f} s")
    new_leader = cluster.leader()
    assert new_leader != leader
    # The killed node restarts with its journal + dump and catches up.
    cluster.start(leader)

    def caught_up() -> bool:
        h_old, h_new = cluster.health(leader), cluster.health(new_leader)
        if not h_old or not h_new:
            return False
        return (
            h_old["applied_index"] >= h_new["commit_index"] - 1
            and h_old["cluster"]["total_workers"] == 6
        )

    wait_until(caught_up, "restarted node catches up", 30)
    workers = cluster.get(leader, "/v1/workers").body["workers"]
    assert sorted(w["worker_id"] for w in workers) == sorted(
        [f"w{i}" for i in range(5)] + ["after"]
    )

    # The whole replicated state, not just the worker list, is the same on every node.
    def digests() -> set[tuple[int, str]] | None:
        got = {
            (b["applied_index"], b["state_digest"])
            for n in ("n1", "n2", "n3")
            if (b := cluster.get(n, "/v1/health?digest=true").body)
        }
        return got if len(got) == 1 else None

    ((index, digest),) = wait_until(digests, "three nodes at one applied index", 30)
    assert len(digest) == 64 and index > 6
    assert cluster.get(leader, "/v1/health").body["state_digest"] is None
    register(cluster, new_leader, "later")
    moved = wait_until(digests, "three nodes at one applied index again", 30)
    assert moved != {(index, digest)}, "a new registration must change the digest"


def test_whole_cluster_restart_keeps_acknowledged_registrations(cluster: Cluster) -> None:
    cluster.ready()
    acked = []
    for i in range(20):
        r = cluster.write_via_any(
            "/v1/workers", {"worker_id": f"w{i}", "address": "http://127.0.0.1:9"}
        )
        assert r.status == 200
        acked.append(f"w{i}")
    for s in cluster.specs:
        cluster.kill9(s.id)
    cluster.start_all()
    leader = cluster.ready()
    workers = cluster.get(leader, "/v1/workers?consistent=true").body["workers"]
    assert sorted(w["worker_id"] for w in workers) == sorted(acked)


def test_failover_times_over_repeated_kills(tmp_path: Path) -> None:
    """kill -9 the leader 10 times; each time measure kill -> first committed write."""
    c = Cluster(tmp_path)
    c.start_all()
    times = []
    try:
        c.ready()
        for k in range(10):
            leader = c.leader()
            t0 = time.monotonic()
            c.kill9(leader)
            r = c.write_via_any(
                "/v1/workers", {"worker_id": f"k{k}", "address": "http://127.0.0.1:9"}
            )
            assert r.status == 200
            times.append(time.monotonic() - t0)
            c.start(leader)
            c.leader()
    finally:
        c.stop_all()
    print(
        f"\nfailover over {len(times)} kills: median {statistics.median(times):.3f} s, "
        f"max {max(times):.3f} s, all {[round(t, 3) for t in times]}"
    )
    assert len(times) == 10


def test_strangers_cannot_join_or_run_code(cluster: Cluster, tmp_path: Path) -> None:
    leader = cluster.ready()
    register(cluster, leader, "w1")
    # 1. A node without the secret refuses to start at all.
    no_secret = tmp_path / "nosecret.toml"
    no_secret.write_text(
        render_toml(cluster.config).replace(
            f'cluster_secret = "{cluster.config.cluster_secret}"', 'cluster_secret = ""'
        )
    )
    victim = next(s.id for s in cluster.specs if s.id != leader)
    cluster.kill9(victim)
    p = cluster.start(victim, config_path=no_secret)
    wait_until(lambda: not p.alive(), "secretless node exits")
    assert "cluster_secret is required" in p.output()
    # 2. A node with the wrong secret, in the killed node's place, never joins.
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(
        render_toml(cluster.config).replace(
            cluster.config.cluster_secret, "a-completely-different-secret"
        )
    )
    impostor = cluster.start(victim, config_path=wrong)
    register(cluster, leader, "w2")  # the real majority keeps committing
    # Up first (its start-up is seconds on a loaded machine), then time in which it could
    # have joined: a few election timeouts; there is nothing to poll for.
    wait_until(lambda: cluster.health(victim) is not None, "the impostor answers HTTP")
    time.sleep(2.0)
    h = cluster.health(victim)
    assert h is not None and h["role"] != "leader" and h["leader_id"] is None
    seen = [w["worker_id"] for w in cluster.get(victim, "/v1/workers").body["workers"]]
    assert "w2" not in seen  # committed after it started: it never received an entry
    assert impostor.alive()
    # 3. A raw connection to a Raft port sending a pickle that would run code does nothing.
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (open, (str(marker), "w"))

    raft_host, raft_port = next(s.raft for s in cluster.specs if s.id == leader).split(":")
    payload = pickle.dumps(Exploit())
    for frame in (payload, len(payload).to_bytes(4, "big") + payload):
        with socket.create_connection((raft_host, int(raft_port)), timeout=2) as s:
            s.sendall(frame)
            time.sleep(0.2)
    assert not marker.exists()
    r = cluster.write_via_any("/v1/workers", {"worker_id": "w3", "address": "http://127.0.0.1:9"})
    assert r.status == 200


def test_join_token_guards_registration(tmp_path: Path) -> None:
    c = Cluster(tmp_path, join_token="join-token-0123456789abcdef")
    c.start_all()
    try:
        leader = c.ready()
        body = {"worker_id": "w1", "address": "http://127.0.0.1:9"}
        missing = c.post(leader, "/v1/workers", body)
        assert missing.status == 401 and missing.body["error"] == "unauthorized"
        wrong = c.post(leader, "/v1/workers", body, token="not-the-join-token-at-all")
        assert wrong.status == 403
        assert c.get(leader, "/v1/workers?consistent=true").body["workers"] == []
        ok = c.post(leader, "/v1/workers", body, token="join-token-0123456789abcdef")
        assert ok.status == 200 and ok.body["incarnation"] == 1
    finally:
        c.stop_all()
