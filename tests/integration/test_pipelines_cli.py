"""`ripple pipelines` against a real three-node cluster, run as an operator runs it: create
from the example spec with a pool and a setting, list, describe, pause, resume, drop with
--purge; a bad spec and a missing token are errors shown as every `ripple` error is, with
the field named and exit status 2 for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline.store import LocalStore
from testkit.cli import CLI_TIMEOUT_S
from testkit.cluster import ADMIN, Cluster
from testkit.wait import wait_until

# The same module-scoped fixture: a cluster of its own for this module, speaking version 5.
from tests.integration.test_pipelines_api import ORDERS
from tests.integration.test_pipelines_api import cluster as cluster


def run(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`ripple ARGS` against the cluster, failing or not (Cluster.ripple wants success)."""
    argv = [sys.executable, "-m", "ripple.cli", *args]
    for nid in c.alive():
        argv += ["--coordinator", c.url(nid)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env, check=False
    )


def listed(c: Cluster) -> dict[str, str]:
    out = c.ripple("pipelines", "list", "--json", "--consistent")
    return {p["name"]: p["state"] for p in json.loads(out)["pipelines"]}


def test_the_whole_lifecycle_from_the_command_line(cluster: Cluster, tmp_path: Path) -> None:
    spec = tmp_path / "orders.toml"
    spec.write_text(ORDERS)
    out = cluster.ripple(
        "pipelines", "create", "orders", "--spec", str(spec), "--partitions", "3",
        "--label", "gpu=true", "--label", "zone=b", "--set", "batch_interval_ms=250",
        "--admin-token", ADMIN,
    )  # fmt: skip
    assert out.startswith("pipeline orders (incarnation "), out
    assert out.rstrip().endswith(": creating"), out
    wait_until(lambda: listed(cluster).get("orders") == "active", "orders ACTIVE", 15)

    table = cluster.ripple("pipelines", "list")
    header, *rows = table.splitlines()
    assert header.split() == ["NAME", "STATE", "PARTITIONS", "SPEC", "POOL", "INCARNATION"]
    assert rows[0].split()[:3] == ["default", "active", "4"]
    assert rows[1].split()[:5] == ["orders", "active", "3", "1", "gpu=true,zone=b"]

    described = cluster.ripple("pipelines", "describe", "orders")
    assert "pool: gpu=true, zone=b" in described
    assert "batch_interval_ms=250" in described
    assert 'fn = "approx_distinct"' in described  # the spec text itself
    assert "spec text: none" in cluster.ripple("pipelines", "describe", "default")

    paused = cluster.ripple("pipelines", "pause", "orders", "--admin-token", ADMIN)
    assert paused.rstrip().endswith(": paused"), paused
    again = cluster.ripple("pipelines", "pause", "orders", "--admin-token", ADMIN)
    assert again.rstrip().endswith(": paused (unchanged)"), again
    resumed = cluster.ripple("pipelines", "resume", "orders", "--admin-token", ADMIN)
    assert resumed.rstrip().endswith(": active"), resumed

    # A store with one object of the pipeline's and one of another number's.
    first = json.loads(cluster.ripple("pipelines", "describe", "orders", "--json"))["first_slot"]
    store = LocalStore(str(tmp_path / "store"))
    assert store.put_if_absent(f"source/p{first}/{0:020d}.parquet", b"x")
    assert store.put_if_absent(f"source/p{first + 3}/{0:020d}.parquet", b"x")
    dropped = cluster.ripple(
        "pipelines",
        "drop",
        "orders",
        "--purge",
        "--admin-token",
        ADMIN,
        "--store",
        f"file://{tmp_path / 'store'}",
    )
    said = dropped.rstrip().splitlines()
    assert said[0].endswith(": dropping") and said[1].startswith("purged 1 objects"), dropped
    assert "orders" not in listed(cluster)  # the purge waited for it to be gone
    assert store.list_keys("source/") == [f"source/p{first + 3}/{0:020d}.parquet"]
    # A purge whose store is not there is refused before anything is dropped.
    cluster.ripple("pipelines", "create", "spare", "--spec", str(spec), "--admin-token", ADMIN)
    missing = run(
        cluster,
        "pipelines",
        "drop",
        "spare",
        "--purge",
        "--admin-token",
        ADMIN,
        "--store",
        f"file://{tmp_path / 'nowhere'}",
    )
    assert missing.returncode == 2 and "no store at" in missing.stderr, missing.stderr
    assert not (tmp_path / "nowhere").exists() and "spare" in listed(cluster)


def test_a_bad_spec_is_shown_with_its_field(cluster: Cluster, tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(ORDERS.replace('column = "amount"', 'column = "price"', 1))
    done = run(cluster, "pipelines", "create", "bad", "--spec", str(spec), "--admin-token", ADMIN)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("ripple: invalid: "), done.stderr
    assert "(spec_text.aggregations[1].column)" in done.stderr
    assert "bad" not in listed(cluster)


def test_usage_and_refusals_are_errors_not_traces(cluster: Cluster, tmp_path: Path) -> None:
    spec = tmp_path / "orders.toml"
    spec.write_text(ORDERS)
    no_token = run(
        cluster, "pipelines", "create", "x", "--spec", str(spec), "--data-dir", str(tmp_path)
    )
    assert no_token.returncode != 0 and "admin token needed" in no_token.stderr
    bad_label = run(
        cluster, "pipelines", "create", "x", "--spec", str(spec), "--label", "gpu",
        "--admin-token", ADMIN,
    )  # fmt: skip
    assert bad_label.returncode == 2 and "--label wants KEY=VALUE" in bad_label.stderr
    missing = run(cluster, "pipelines", "describe", "nope")
    assert missing.returncode == 1 and "ripple: not_found: no pipeline nope" in missing.stderr
    own = run(cluster, "pipelines", "drop", "default", "--admin-token", ADMIN)
    assert own.returncode == 1 and "ripple: conflict: " in own.stderr
    for done in (no_token, bad_label, missing, own):
        assert "Traceback" not in done.stderr
