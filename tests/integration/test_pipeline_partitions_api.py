"""The partition and migration routes with `?pipeline=` on a real three-node cluster: a
recorded pipeline's partitions are listed, read, reset and moved by their own numbers
(0 .. partitions - 1), each row naming its pipeline; no parameter is `default`, exactly as
before; an unknown pipeline is a 404 in the JSON error shape, a number past its count the
partition routes' own 404; a pipeline still CREATING has no partitions to show. /metrics
counts each pipeline's partitions under its own `pipeline` label, and `ripple partitions`,
`migrations` and `reassign` take `--pipeline NAME` to the same routes."""

from __future__ import annotations

import json
from typing import Any

from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.prom import parse, value
from testkit.wait import wait_until

# The same module-scoped fixture: a cluster of its own for this module, speaking version 5.
from tests.integration.test_pipelines_api import admin, create, state_of
from tests.integration.test_pipelines_api import cluster as cluster
from tests.integration.test_pipelines_cli import run

SLOT_BASE = 1 << 20  # coordinator/core/model.py: a recorded pipeline's numbers start here


def active(c: Cluster, name: str, partitions: int) -> None:
    made = create(c, name, partitions=partitions)
    assert made.status == 202, made.body
    wait_until(lambda: state_of(c, name) == "active", f"{name} ACTIVE", 15)


def read(c: Cluster, path: str) -> tuple[int, Any]:
    reply = c.get(c.leader(), path)
    return reply.status, reply.body


def test_a_pipelines_partitions_by_their_own_numbers(cluster: Cluster) -> None:
    active(cluster, "parts", 3)
    status, body = read(cluster, "/v1/partitions?pipeline=parts&consistent=true")
    assert status == 200, body
    rows = body["partitions"]
    assert [r["partition"] for r in rows] == [0, 1, 2]
    assert {r["pipeline"] for r in rows} == {"parts"}
    assert {(r["owner"], r["status"]) for r in rows} == {(None, "unassigned")}

    # No parameter is `default`'s table, as before: its numbers, none of the pipeline's.
    status, plain = read(cluster, "/v1/partitions?consistent=true")
    assert status == 200 and [r["partition"] for r in plain["partitions"]] == [0, 1, 2, 3]
    assert {r["pipeline"] for r in plain["partitions"]} == {"default"}
    _, named = read(cluster, "/v1/partitions?pipeline=default&consistent=true")
    assert named["partitions"] == plain["partitions"]

    status, one = read(cluster, "/v1/partitions/2?pipeline=parts")
    assert status == 200 and (one["partition"], one["pipeline"]) == (2, "parts"), one
    status, history = read(cluster, "/v1/partitions/1/history?pipeline=parts")
    assert status == 200 and (history["partition"], history["pipeline"]) == (1, "parts")
    # Past its count: the partition routes' 404, whatever `default` holds under that number.
    status, past = read(cluster, "/v1/partitions/3?pipeline=parts")
    assert status == 404 and past["error"] == "not_found" and past["field"] == "partition"
    # The number the table carries it under is nobody's own number.
    assert read(cluster, f"/v1/partitions/{SLOT_BASE}")[0] == 404
    assert read(cluster, f"/v1/partitions/{SLOT_BASE}?pipeline=parts")[0] == 404

    status, migrations = read(cluster, "/v1/migrations?pipeline=parts")
    assert status == 200 and migrations["migrations"] == [] and migrations["in_flight"] == 0


def test_an_unknown_pipeline_is_a_404_naming_the_parameter(cluster: Cluster) -> None:
    for path in (
        "/v1/partitions?pipeline=nope",
        "/v1/partitions/0?pipeline=nope",
        "/v1/partitions/0/history?pipeline=nope",
        "/v1/migrations?pipeline=nope",
    ):
        status, body = read(cluster, path)
        assert status == 404, (path, body)
        assert body == {"error": "not_found", "message": "no pipeline nope", "field": "pipeline"}
    status, body = read(cluster, "/v1/partitions?pipeline=no%20pe")
    assert status == 400 and body["field"] == "pipeline", body
    moved = admin(
        cluster,
        "POST",
        "/v1/admin/reassign?pipeline=nope",
        {"moves": [{"partition": 0, "to": "w"}]},
    )
    assert moved.status == 404 and moved.body["field"] == "pipeline", moved.body
    reset = admin(cluster, "POST", "/v1/admin/partitions/0/reset?pipeline=nope")
    assert reset.status == 404 and reset.body["field"] == "pipeline", reset.body


def test_the_writes_address_a_pipelines_partition_by_its_own_number(cluster: Cluster) -> None:
    active(cluster, "moves", 2)
    # An unowned partition: the move and the reset reach the state's own checks (409),
    # having found the partition by its own number; past the count is refused before.
    moved = admin(
        cluster,
        "POST",
        "/v1/admin/reassign?pipeline=moves",
        {"moves": [{"partition": 1, "to": "w1"}], "dry_run": True},
    )
    assert moved.status == 409, moved.body
    # The refusal names the partition as the request did, not by its table number.
    assert moved.body["message"] == "moves[0]: partition 1 has no owner", moved.body
    past = admin(
        cluster,
        "POST",
        "/v1/admin/reassign?pipeline=moves",
        {"moves": [{"partition": 2, "to": "w1"}]},
    )
    assert past.status == 400 and past.body["message"] == "moves[0]: partition 2 does not exist"
    balance = admin(cluster, "POST", "/v1/admin/reassign?pipeline=moves", {"strategy": "balance"})
    assert balance.status == 400 and balance.body["field"] == "pipeline", balance.body
    reset = admin(cluster, "POST", "/v1/admin/partitions/1/reset?pipeline=moves")
    assert reset.status == 409, reset.body
    assert reset.body["message"] == "partition 1 is unassigned; only an assigning one resets"
    assert admin(cluster, "POST", "/v1/admin/partitions/2/reset?pipeline=moves").status == 404


def test_a_pipeline_being_dropped_shows_its_partitions_until_it_is_gone(cluster: Cluster) -> None:
    active(cluster, "going", 2)
    dropped = admin(cluster, "DELETE", "/v1/pipelines/going")
    assert dropped.status == 202, dropped.body
    wait_until(lambda: state_of(cluster, "going") == "gone", "going forgotten", 15)
    status, body = read(cluster, "/v1/partitions?pipeline=going&consistent=true")
    assert status == 404 and body["field"] == "pipeline", body
    # The admin token is what the write routes admit, for a pipeline's partitions too.
    url = cluster.url(cluster.leader()) + "/v1/admin/partitions/0/reset?pipeline=going"
    assert call("POST", url).status == 401
    assert call("POST", url, token=ADMIN).status == 404


def test_metrics_count_each_pipelines_partitions_under_its_label(cluster: Cluster) -> None:
    active(cluster, "counted", 2)
    scraped = call("GET", cluster.url(cluster.leader()) + "/metrics")
    assert scraped.status == 200 and isinstance(scraped.body, str)
    samples = parse(scraped.body)
    assert value(samples, "ripple_partitions", pipeline="counted", status="unassigned") == 2
    assert value(samples, "ripple_partitions", pipeline="counted", status="online") == 0
    assert value(samples, "ripple_partitions_stuck", pipeline="counted") == 0
    # `default`'s four, counted apart from every recorded pipeline's.
    default = sum(
        value(samples, "ripple_partitions", pipeline="default", status=s) or 0
        for s in ("unassigned", "assigning", "online")
    )
    assert default == 4


# -- the same through `ripple` ------------------------------------------------------------


def test_the_command_line_reads_and_moves_by_a_pipelines_own_numbers(cluster: Cluster) -> None:
    active(cluster, "cli", 3)
    listed = json.loads(cluster.ripple("partitions", "--pipeline", "cli", "--json", "--consistent"))
    assert [(r["partition"], r["pipeline"]) for r in listed["partitions"]] == [
        (0, "cli"),
        (1, "cli"),
        (2, "cli"),
    ]
    title, header, *rows = cluster.ripple("partitions", "--pipeline", "cli").splitlines()
    assert title == "pipeline cli" and header.split()[0] == "PARTITION"
    assert [r.split()[:2] for r in rows] == [["0", "-"], ["1", "-"], ["2", "-"]], rows
    # Without the flag: `default`'s table, as before, no title line.
    plain = cluster.ripple("partitions").splitlines()
    assert plain[0].split()[0] == "PARTITION" and len(plain) == 1 + 4
    assert cluster.ripple("migrations", "--pipeline", "cli").splitlines()[:2] == [
        "pipeline cli",
        "in flight: 0",
    ]

    missing = run(cluster, "partitions", "--pipeline", "nope")
    assert missing.returncode == 1, missing.stderr
    assert "ripple: not_found: no pipeline nope (pipeline)" in missing.stderr
    token = ("--admin-token", ADMIN)
    unowned = run(cluster, "reassign", "--pipeline", "cli", "--move", "2:w1", "--dry-run", *token)
    assert unowned.returncode == 1, unowned.stderr
    assert "moves[0]: partition 2 has no owner" in unowned.stderr
    past = run(cluster, "reassign", "--pipeline", "cli", "--move", "3:w1", *token)
    assert past.returncode == 2, past.stderr
    assert "moves[0]: partition 3 does not exist" in past.stderr
    balance = run(cluster, "reassign", "--pipeline", "cli", *token)
    assert balance.returncode == 2 and "balance places default's" in balance.stderr
