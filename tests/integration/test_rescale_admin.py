"""The operator's rescale surface on a real three-node cluster with no workers: a dry run
answers its numbers and changes nothing, bad bodies are 400 naming the field (a follower
sends the write to the leader first), a rescale starts and `/v1/status`, `/v1/health`,
`/metrics`, `ripple status` and `ripple rescale` show it in CUTTING. With no worker to
answer the cut calls it stays CUTTING, and a second one is refused while it is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.service.rescale_preview import preview
from testkit.cli import ripple
from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.prom import parse, value
from testkit.wait import wait_until

PARTITIONS = 8
ROUTE = "/v1/admin/rescale"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, total_partitions=PARTITIONS)
    c.start_all()
    try:
        c.ready(60)
        yield c
    finally:
        c.stop_all()


def status(c: Cluster) -> dict[str, Any]:
    return c.get(c.leader(), "/v1/status?consistent=true").body  # type: ignore[no-any-return]


def metrics(c: Cluster, node: str) -> Any:
    reply = call("GET", c.url(node) + "/metrics")
    assert reply.status == 200, reply
    return parse(reply.body)


def rescale(c: Cluster, body: dict[str, Any]) -> Any:
    """The admin route through any node; 503 in the moment before the leader finalizes
    command-set version 4 is waited out (StartRescale is of it)."""

    def attempt() -> Any:
        r = c.write_via_any(ROUTE, body, token=ADMIN)
        if r.status == 503 and r.body.get("error") == "version_not_finalized":
            return None
        return r

    return wait_until(attempt, "command-set version 4 finalized", 20)


def test_dry_run_bad_bodies_start_and_status(cluster: Cluster) -> None:
    c = cluster
    leader = c.ready()
    follower = next(s.id for s in c.specs if s.id != leader)
    before = status(c)
    assert before["rescale"] is None
    assert before["cluster"]["routing"] == [PARTITIONS]
    assert before["cluster"]["routing_generation"] == 0
    samples = metrics(c, leader)
    assert value(samples, "ripple_routing_generation") == 0
    assert value(samples, "ripple_rescale_phase", phase="cutting") == 0

    # Admin only, before the body is read; a follower sends the write to the leader.
    assert call("POST", c.url(leader) + ROUTE, {"partitions": 16}).status == 401
    wrong = call("POST", c.url(leader) + ROUTE, {"partitions": 16}, token="nope")
    assert wrong.status in (401, 403), wrong
    moved = call("POST", c.url(follower) + ROUTE, {"partitions": 16}, token=ADMIN)
    assert moved.status == 307 and moved.headers["Location"].startswith(c.url(leader)), moved

    # The dry run: its numbers, and nothing committed.
    dry = rescale(c, {"partitions": 16, "dry_run": True})
    assert dry.status == 200, dry
    assert dry.body == {
        "from": PARTITIONS,
        "to": 16,
        "generation": 1,
        "moved_fraction": preview((PARTITIONS,), 16).moved_fraction,
        # From generation 0 (modulo 8) a new partition's 4096 groups cover every residue.
        "feeders_max": PARTITIONS,
        "checkpoints_read": PARTITIONS,
        "partitions_built": 16,
    }
    assert 0 < dry.body["moved_fraction"] < 1
    after = status(c)
    assert after["rescale"] is None and after["cluster"]["routing"] == [PARTITIONS]
    assert after["generation"] == before["generation"]

    # Bad bodies: 400 with the field, nothing committed.
    for body, field in (
        ({}, "partitions"),
        ({"partitions": 0}, "partitions"),
        ({"partitions": 65_537}, "partitions"),
        ({"partitions": "16"}, "partitions"),
        ({"partitions": 16.5}, "partitions"),
        ({"partitions": 16, "dry_run": "yes"}, "dry_run"),
        ({"partitions": 16, "extra": 1}, "extra"),
    ):
        r = c.write_via_any(ROUTE, body, token=ADMIN)
        assert r.status == 400 and r.body["field"] == field, (body, r)
        assert r.body["error"] == "invalid" and r.body["message"], r
    raw = call("POST", c.url(c.leader()) + ROUTE, raw=b"{not json", token=ADMIN)
    assert raw.status == 400 and raw.body["field"] == "body", raw
    same = rescale(c, {"partitions": PARTITIONS, "dry_run": True})
    assert same.status == 409 and same.body["error"] == "same_partition_count", same
    assert same.body["field"] == "partitions"
    assert status(c)["rescale"] is None

    # The rescale: 202 with the record, CUTTING, and every view shows it.
    started = rescale(c, {"partitions": 16})
    assert started.status == 202, started
    record = started.body
    assert record["phase"] == "cutting" and record["by"] == "admin"
    assert (record["generation"], record["partitions"], record["previous"]) == (1, 16, 8)
    assert (record["cuts_done"], record["online"]) == (0, 0)
    shown = status(c)["rescale"]
    assert shown["phase"] == "cutting" and shown["partitions"] == 16, shown
    # The new generation exists only once its partitions are built.
    assert status(c)["cluster"]["routing_generation"] == 0
    for node in (leader, follower):
        samples = metrics(c, node)
        assert value(samples, "ripple_rescale_phase", phase="cutting") == 1, node
        assert value(samples, "ripple_rescale_phase", phase="done") == 0, node
        assert value(samples, "ripple_rescale_cuts_done") == 0, node
    health = c.get(follower, "/v1/health").body
    assert health["cluster"]["routing"] == [PARTITIONS]

    # One at a time: the dry run and the real one are refused while it is CUTTING.
    for dry_run in (True, False):
        again = rescale(c, {"partitions": 32, "dry_run": dry_run})
        assert again.status == 409 and again.body["error"] == "rescale_in_flight", again

    # The CLI shows it; with no worker to cut, it stays CUTTING.
    out = c.ripple("status")
    assert "routing generation: 0 (partitions by generation: 8)" in out, out
    assert "rescale: 8 -> 16 partitions (routing generation 1) by admin: cutting" in out, out
    assert "cuts 0/8, online 0/16" in out
    urls = [a for nid in c.alive() for a in ("--coordinator", c.url(nid))]
    refused = ripple("rescale", "--partitions", "32", "--admin-token", ADMIN, *urls)
    assert refused.returncode == 1 and "rescale_in_flight" in refused.stderr, refused


def test_the_cli_dry_run_and_run(cluster: Cluster) -> None:
    c = cluster
    c.ready()
    rescale(c, {"partitions": 16, "dry_run": True})  # waits out the version's finalization
    out = c.ripple("rescale", "--partitions", "12", "--dry-run", "--admin-token", ADMIN)
    assert "dry run: 8 -> 12 partitions (routing generation 1); nothing changed" in out, out
    assert "partitions built: 12" in out
    assert status(c)["rescale"] is None
    out = c.ripple("rescale", "--partitions", "12", "--admin-token", ADMIN)
    assert "rescale: 8 -> 12 partitions (routing generation 1) by admin: cutting" in out, out
    assert status(c)["rescale"]["phase"] == "cutting"
