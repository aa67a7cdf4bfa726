"""A recorded pipeline's rescale and spec update through the routes and `ripple`, on a real
three-node cluster with no workers (so a started rescale stays CUTTING: no owner writes a
cut): the refusals are the DESIGN error shape with the core's codes and change nothing; a
started one shows in describe with its fresh numbers; a drop mid-rescale with --purge leaves
none of the pipeline's objects, its reserved numbers' included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.store import LocalStore
from testkit.cluster import ADMIN, Cluster
from testkit.http import Reply, call
from testkit.wait import wait_until
from tests.integration.test_pipelines_api import ORDERS
from tests.integration.test_pipelines_cli import run

RESCALE_VERSION = 7  # the command set StartPipelineRescale belongs to
WAIT_S = 60.0
# The spec with one output renamed: a new version, the same key column.
ORDERS_V2 = ORDERS.replace('name = "revenue"', 'name = "income"', 1)
# The spec per hour of order time: event-time windows.
HOURLY = ORDERS + '\n[window]\ncolumn = "ts"\nsize = "1h"\n'


def at_leader(
    c: Cluster, method: str, path: str, body: Any = None, token: str | None = ADMIN
) -> Reply:
    return call(method, c.url(c.leader()) + path, body, token=token)


def described(c: Cluster, name: str) -> dict[str, Any]:
    body: dict[str, Any] = c.get(c.leader(), f"/v1/pipelines/{name}?consistent=true").body
    return body


def create_active(c: Cluster, name: str, partitions: int) -> None:
    made = at_leader(c, "POST", "/v1/pipelines", {"name": name, "spec_text": ORDERS,
                                                  "partitions": partitions})  # fmt: skip
    assert made.status == 202, made
    wait_until(lambda: described(c, name)["state"] == "active", f"{name} active", WAIT_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(Path(tmp_path_factory.mktemp("prescale")), total_partitions=4)
    c.start_all()
    try:

        def finalized() -> str | None:
            leader = c.ready()
            health = c.health(leader) or {}
            top = health.get("finalized_command_set_version", 0)
            return leader if top >= RESCALE_VERSION else None

        wait_until(finalized, f"command-set version {RESCALE_VERSION} finalized", WAIT_S)
        for name in ("orders", "other"):
            create_active(c, name, 2)
        made = at_leader(c, "POST", "/v1/pipelines", {"name": "hourly", "spec_text": HOURLY,
                                                      "partitions": 2})  # fmt: skip
        assert made.status == 202, made
        wait_until(lambda: described(c, "hourly")["state"] == "active", "hourly active", WAIT_S)
        yield c
    finally:
        c.stop_all()


def refused(r: Reply, status: int, code: str, field: str | None = None) -> None:
    assert r.status == status, r
    assert r.body["error"] == code, r.body
    assert isinstance(r.body["message"], str) and r.body["message"], r.body
    if field is not None:
        assert r.body["field"] == field, r.body


def test_the_view_has_past_and_rescale(cluster: Cluster) -> None:
    listed = cluster.get(cluster.leader(), "/v1/pipelines").body["pipelines"]
    for p in listed:
        assert p["past"] == [] and p["rescale"] is None, p
    one = described(cluster, "other")
    assert one["past"] == [] and one["rescale"] is None


def test_a_windowed_pipeline_is_rescaled_but_its_window_is_kept(cluster: Cluster) -> None:
    # An update that adds, drops or changes the window: 409, nothing proposed.
    c = cluster
    before = described(c, "hourly"), described(c, "other")
    refused(at_leader(c, "POST", "/v1/pipelines/other/update", {"spec": HOURLY}),
            409, "conflict", "spec")  # fmt: skip
    refused(at_leader(c, "POST", "/v1/pipelines/hourly/update", {"spec": ORDERS}),
            409, "conflict", "spec")  # fmt: skip
    wider = HOURLY.replace('size = "1h"', 'size = "2h"')
    refused(at_leader(c, "POST", "/v1/pipelines/hourly/update", {"spec": wider}),
            409, "conflict", "spec")  # fmt: skip
    for name, was in zip(("hourly", "other"), before, strict=True):
        now = described(c, name)
        assert now["rescale"] is None and now["past"] == [], now
        assert (now["partitions"], now["spec_sha256"]) == (was["partitions"], was["spec_sha256"])
    # A rescale keeping the window starts (its windows are carried by the build).
    started = at_leader(c, "POST", "/v1/pipelines/hourly/rescale", {"partitions": 3})
    assert started.status == 202, started
    assert described(c, "hourly")["rescale"] is not None


def test_the_refusals_change_nothing(cluster: Cluster) -> None:
    c = cluster
    before = described(c, "other")
    for m in (0, -1, 65_537, 2.5, "3", None):
        refused(at_leader(c, "POST", "/v1/pipelines/other/rescale", {"partitions": m}),
                400, "invalid", "partitions")  # fmt: skip
    refused(at_leader(c, "POST", "/v1/pipelines/other/rescale", {"partitions": 3, "x": 1}),
            400, "invalid")  # fmt: skip
    refused(at_leader(c, "POST", "/v1/pipelines/other/rescale", {"partitions": 2}),
            409, "same_partition_count", "partitions")  # fmt: skip
    bad = ORDERS.replace('column = "amount"', 'column = "price"', 1)
    refused(at_leader(c, "POST", "/v1/pipelines/other/update", {"spec": bad}),
            400, "invalid", "spec.aggregations[1].column")  # fmt: skip
    rekeyed = ORDERS_V2.replace("customer STRING", "customer BIGINT", 1)
    assert rekeyed != ORDERS_V2
    refused(at_leader(c, "POST", "/v1/pipelines/other/update", {"spec": rekeyed}),
            400, "invalid", "spec.schema.key")  # fmt: skip
    refused(at_leader(c, "POST", "/v1/pipelines/other/update", {"spec": ORDERS}),
            409, "same_partition_count")  # fmt: skip
    refused(at_leader(c, "POST", "/v1/pipelines/default/rescale", {"partitions": 3}),
            400, "invalid", "name")  # fmt: skip
    refused(at_leader(c, "POST", "/v1/pipelines/nope/rescale", {"partitions": 3}),
            404, "not_found", "name")  # fmt: skip
    # Who: no token, and the operate token of another pipeline.
    refused(at_leader(c, "POST", "/v1/pipelines/other/rescale", {"partitions": 3}, None),
            401, "unauthorized")  # fmt: skip
    issued = at_leader(c, "POST", "/v1/pipelines/orders/tokens", {"role": "operate"})
    assert issued.status == 201, issued
    theirs = issued.body["token"]
    refused(at_leader(c, "POST", "/v1/pipelines/other/rescale", {"partitions": 3}, theirs),
            403, "forbidden")  # fmt: skip
    refused(at_leader(c, "POST", "/v1/pipelines/other/update", {"spec": ORDERS_V2}, theirs),
            403, "forbidden")  # fmt: skip
    # A dry run: its cost, 200, nothing proposed.
    dry = at_leader(c, "POST", "/v1/pipelines/other/rescale", {"partitions": 3, "dry_run": True})
    assert dry.status == 200, dry
    assert (dry.body["from"], dry.body["to"], dry.body["generation"]) == (2, 3, 1), dry.body
    assert dry.body["checkpoints_read"] == 2 and dry.body["partitions_built"] == 3
    refused(at_leader(c, "POST", "/v1/pipelines/other/rescale",
                      {"partitions": 2, "dry_run": True}),
            409, "same_partition_count", "partitions")  # fmt: skip
    shown = c.ripple("rescale", "--pipeline", "other", "--partitions", "4", "--dry-run",
                     "--admin-token", ADMIN)  # fmt: skip
    assert shown.startswith("dry run: 2 -> 4 partitions (routing generation 1)"), shown
    # Paused: it cannot cut.
    assert at_leader(c, "POST", "/v1/pipelines/other/pause").status == 200
    refused(at_leader(c, "POST", "/v1/pipelines/other/rescale", {"partitions": 3}),
            409, "conflict", "name")  # fmt: skip
    assert at_leader(c, "POST", "/v1/pipelines/other/resume").status == 200
    after = described(c, "other")
    assert after["rescale"] is None and after["partitions"] == before["partitions"]
    assert after["spec_version"] == before["spec_version"] == 1


def test_rescale_and_update_from_the_command_line_then_drop_with_purge(
    cluster: Cluster, tmp_path: Path
) -> None:
    c = cluster
    out = c.ripple("pipelines", "rescale", "orders", "--partitions", "3", "--admin-token", ADMIN)
    assert out.startswith("pipeline orders: active\nrescale: 2 -> 3 partitions"), out
    assert ": cutting, cuts 0/2, numbers " in out, out
    one = described(c, "orders")
    r = one["rescale"]
    assert (r["phase"], r["partitions"], r["previous"], r["generation"]) == ("cutting", 3, 2, 1)
    assert (r["cuts_done"], r["base_epoch"], r["spec_text"]) == (0, None, None)
    assert r["spec_version"] == one["spec_version"] == 1
    assert r["spec_sha256"] == one["spec_sha256"] and r["by"] == "admin"
    current = range(one["first_slot"], one["first_slot"] + one["partitions"])
    reserved = range(r["first_slot"], r["first_slot"] + r["partitions"])
    assert not set(current) & set(reserved) and reserved.start > current.start
    assert one["partitions"] == 2 and one["past"] == []
    # Asked again: the one under way (202); another count meanwhile: 409.
    again = at_leader(c, "POST", "/v1/pipelines/orders/rescale", {"partitions": 3})
    assert again.status == 202 and again.body["rescale"] == r, again
    refused(at_leader(c, "POST", "/v1/pipelines/orders/rescale", {"partitions": 4}),
            409, "rescale_in_flight")  # fmt: skip
    refused(at_leader(c, "POST", "/v1/pipelines/orders/rescale",
                      {"partitions": 4, "dry_run": True}),
            409, "rescale_in_flight")  # fmt: skip
    shown = c.ripple("pipelines", "describe", "orders")
    assert "rescale: 2 -> 3 partitions (routing generation 1, spec version 1)" in shown, shown

    # An update of the other one, at a new count, through the operate token of its own.
    spec = tmp_path / "orders-v2.toml"
    spec.write_text(ORDERS_V2)
    token = at_leader(c, "POST", "/v1/pipelines/other/tokens", {"role": "operate"}).body["token"]
    out = c.ripple("pipelines", "update", "other", "--spec", str(spec), "--partitions", "3",
                   "--admin-token", token, "--json")  # fmt: skip
    u = json.loads(out)["rescale"]
    assert (u["phase"], u["partitions"], u["spec_version"]) == ("cutting", 3, 2), u
    assert u["spec_text"] == ORDERS_V2 and u["by"].startswith("token "), u
    assert "update: 2 -> 3 partitions" in c.ripple("pipelines", "describe", "other")
    # `ripple rescale --pipeline` is the same request: the update under way refuses another.
    done = run(c, "rescale", "--pipeline", "other", "--partitions", "4", "--admin-token", ADMIN)
    assert done.returncode != 0 and "rescale_in_flight" in done.stderr, done.stderr

    # Drop mid-rescale with --purge: the current and the reserved numbers' objects go.
    store = LocalStore(str(tmp_path / "store"))
    mine = [f"source/p{n:05d}/{0:020d}.parquet" for n in (*current, *reserved)]
    mine += [f"checkpoints/p{n:05d}/e1.json" for n in reserved]
    theirs = f"source/p{reserved.stop + 100:05d}/{0:020d}.parquet"
    for key in [*mine, theirs]:
        assert store.put_if_absent(key, b"x")
    dropped = c.ripple("pipelines", "drop", "orders", "--purge", "--admin-token", ADMIN,
                       "--store", f"file://{tmp_path / 'store'}")  # fmt: skip
    said = dropped.rstrip().splitlines()
    assert said[-1] == f"purged {len(mine)} objects of pipeline orders", dropped
    assert store.list_keys("source/") == [theirs] and store.list_keys("checkpoints/") == []
    assert c.get(c.leader(), "/v1/pipelines/orders?consistent=true").status == 404
