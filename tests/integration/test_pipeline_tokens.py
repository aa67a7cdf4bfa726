"""Tokens scoped to one pipeline, on a real three-node cluster: the admin issues one (its
text shown once), lists and revokes it through the routes and `ripple pipelines tokens`;
the holder pauses, resumes and drops its own pipeline and nothing else; a revoked token stops
working; and no node's data directory (log, snapshots) holds a token's secret."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.cluster import ADMIN, Cluster
from testkit.http import Reply, call
from testkit.wait import wait_until
from tests.integration.test_cli import ripple

ROOT = Path(__file__).resolve().parents[2]
ORDERS = (ROOT / "docs" / "examples" / "orders.toml").read_text()
TOKENS_VERSION = 6  # the command set IssueToken and RevokeToken belong to
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(Path(tmp_path_factory.mktemp("tokens")), total_partitions=4)
    c.start_all()
    try:

        def finalized() -> str | None:
            leader = c.ready()
            health = c.health(leader) or {}
            return (
                leader if health.get("finalized_command_set_version", 0) >= TOKENS_VERSION else None
            )

        wait_until(finalized, f"command-set version {TOKENS_VERSION} finalized", WAIT_S)
        for name in ("orders", "other"):
            made = at_leader(c, "POST", "/v1/pipelines", {"name": name, "spec_text": ORDERS}, ADMIN)
            assert made.status == 202, made
        # The leader sets each up (CREATING -> ACTIVE) after the create's commit point.
        for name in ("orders", "other"):
            wait_until(
                lambda n=name: c.get(c.leader(), f"/v1/pipelines/{n}").body["state"] == "active",
                f"{name} active",
                WAIT_S,
            )
        yield c
    finally:
        c.stop_all()


def at_leader(
    c: Cluster, method: str, path: str, body: Any = None, token: str | None = None
) -> Reply:
    return call(method, c.url(c.leader()) + path, body, token=token)


def urls(c: Cluster) -> list[str]:
    return [a for spec in c.specs for a in ("--coordinator", spec.url)]


def issue(c: Cluster, name: str) -> dict[str, Any]:
    r = at_leader(c, "POST", f"/v1/pipelines/{name}/tokens", {"role": "operate"}, ADMIN)
    assert r.status == 201, r
    return r.body  # type: ignore[no-any-return]


def test_a_token_operates_its_own_pipeline_and_nothing_else(cluster: Cluster) -> None:
    c = cluster
    issued = issue(c, "orders")
    token, token_id = issued["token"], issued["token_id"]
    assert issued["pipeline"] == "orders" and token.startswith(f"rpt_{token_id}_")

    paused = at_leader(c, "POST", "/v1/pipelines/orders/pause", None, token)
    assert paused.status == 200 and paused.body["state"] == "paused", paused
    described = c.get(c.leader(), "/v1/pipelines/orders").body
    assert described["by"] == f"token {token_id}"
    resumed = at_leader(c, "POST", "/v1/pipelines/orders/resume", None, token)
    assert resumed.status == 200 and resumed.body["state"] == "active", resumed

    # Another pipeline, the admin's routes, a create, its own tokens: all refused, 403.
    for method, path, body in (
        ("POST", "/v1/pipelines/other/pause", None),
        ("DELETE", "/v1/pipelines/other", None),
        ("POST", "/v1/pipelines", {"name": "mine", "spec_text": ORDERS}),
        ("POST", "/v1/pipelines/orders/tokens", {"role": "operate"}),
        ("GET", "/v1/pipelines/orders/tokens", None),
        ("POST", "/v1/admin/rescale", {"partitions": 8}),
    ):
        r = at_leader(c, method, path, body, token)
        assert r.status == 403 and r.body["error"] == "forbidden", (path, r)
    assert c.get(c.leader(), "/v1/pipelines/other").body["state"] == "active"
    no_token = at_leader(c, "POST", "/v1/pipelines/orders/pause")
    assert no_token.status == 401 and no_token.body["error"] == "unauthorized"

    # The CLI: the holder passes the token where the admin token goes.
    done = ripple("pipelines", "pause", "orders", "--admin-token", token, *urls(c))
    assert done.returncode == 0 and "paused" in done.stdout, done.stderr
    done = ripple("pipelines", "resume", "orders", "--admin-token", token, *urls(c))
    assert done.returncode == 0 and "active" in done.stdout, done.stderr

    # Listed by id, never with a secret; revoked, it stops working at once.
    listed = ripple("pipelines", "tokens", "list", "orders", "--admin-token", ADMIN, *urls(c))
    assert listed.returncode == 0 and token_id in listed.stdout, listed.stderr
    assert token.split("_")[2] not in listed.stdout
    gone = ripple(
        "pipelines", "tokens", "revoke", "orders", token_id, "--admin-token", ADMIN, *urls(c)
    )
    assert gone.returncode == 0 and "revoked" in gone.stdout, gone.stderr
    r = at_leader(c, "POST", "/v1/pipelines/orders/pause", None, token)
    assert r.status == 403, r
    again = ripple(
        "pipelines", "tokens", "revoke", "orders", token_id, "--admin-token", ADMIN, *urls(c)
    )
    assert again.returncode == 0 and "was not there" in again.stdout, again.stderr


def test_the_cli_issues_a_token_that_drops_its_pipeline(cluster: Cluster) -> None:
    c = cluster
    made = at_leader(c, "POST", "/v1/pipelines", {"name": "short", "spec_text": ORDERS}, ADMIN)
    assert made.status == 202, made
    out = ripple(
        "pipelines",
        "tokens",
        "issue",
        "short",
        "--role",
        "operate",
        "--json",
        "--admin-token",
        ADMIN,
        *urls(c),
    )
    assert out.returncode == 0, out.stderr
    token = json.loads(out.stdout)["token"]
    dropped = at_leader(c, "DELETE", "/v1/pipelines/short", None, token)
    assert dropped.status == 202 and dropped.body["state"] == "dropping", dropped


def test_bad_token_requests_are_refused_with_the_field_named(cluster: Cluster) -> None:
    c = cluster
    for path, body, field in (
        ("/v1/pipelines/orders/tokens", {"role": "owner"}, "role"),
        ("/v1/pipelines/orders/tokens", {"role": "operate", "extra": 1}, "extra"),
        ("/v1/pipelines/no.such/tokens", {"role": "operate"}, "name"),
    ):
        r = at_leader(c, "POST", path, body, ADMIN)
        assert r.status in (400, 404) and r.body.get("field") == field, (path, r)
    r = at_leader(c, "DELETE", "/v1/pipelines/orders/tokens/" + "x" * 40, None, ADMIN)
    assert r.status == 400 and r.body["field"] == "token_id", r
    r = at_leader(c, "POST", "/v1/pipelines/default/tokens", {"role": "operate"}, ADMIN)
    assert r.status == 409 and r.body["field"] == "name", r
    # Verify answers workers only: no credential, or the admin's, is refused before the body.
    for credential in (None, ADMIN):
        r = at_leader(c, "POST", "/v1/pipelines/orders/tokens/verify", {"token": "x"}, credential)
        assert r.status == 401 and r.body["error"] == "unauthorized", r


def test_no_data_directory_holds_a_tokens_secret(cluster: Cluster) -> None:
    c = cluster
    secret = issue(c, "other")["token"].split("_")[2].encode()
    # Every node has applied the issue (and snapshots written after it hold it too).
    leader = c.leader()
    index = c.get(leader, "/v1/health").body["applied_index"]
    for n in c.alive():
        wait_until(
            lambda n=n: c.get(n, "/v1/health").body["applied_index"] >= index,
            f"{n} applied",
            WAIT_S,
        )
    files = [f for f in c.root.rglob("*") if f.is_file()]
    assert files
    holding = [str(f) for f in files if secret in f.read_bytes()]
    assert holding == []
