"""The settings an operator types: a coordinator started with only `heartbeat_timeout_s = 3`
runs and hands workers the derived timings, and every subcommand takes the coordinator URLs
as `--coordinator` (with `--url` kept as an alias)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ripple.cli import build_parser, main
from testkit.cli import ripple
from testkit.cluster import Cluster


def test_only_heartbeat_timeout_set_starts_and_workers_get_the_derived_timings(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, nodes=1, heartbeat_timeout_s=3)
    text = cluster.config_path.read_text()
    assert "heartbeat_timeout_s = 3" in text and "lease_s" not in text
    cluster.start_all()
    try:
        leader = cluster.ready()
        reg = cluster.post(leader, "/v1/workers", {"worker_id": "w1", "address": "http://x:1"})
        assert reg.status == 200, reg.body
        assert reg.body["heartbeat_interval_s"] == pytest.approx(0.5)
        assert reg.body["lease_s"] == pytest.approx(2.0)
        url = cluster.url(leader)
        for flag in ("--coordinator", "--url"):
            out = ripple("status", flag, url, "--data-dir", str(tmp_path / "none"))
            assert out.returncode == 0, out.stderr
            assert f"node {leader} (leader)" in out.stdout
    finally:
        cluster.stop_all()


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["partitions"],
        ["workers"],
        ["migrations"],
        ["reassign"],
        ["drain", "w1"],
        ["produce", "--generate", "1"],
        ["get", "K"],
        ["worker", "--worker-id", "w1", "--listen", "127.0.0.1:1", "--store", "file:///x"],
    ],
)
def test_every_client_subcommand_takes_coordinator_and_url_alike(argv: list[str]) -> None:
    parser = build_parser()
    one = parser.parse_args([*argv, "--coordinator", "http://a:1", "--url", "http://b:2"])
    assert one.coordinator == ["http://a:1", "http://b:2"]


def test_a_worker_without_any_coordinator_url_is_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RIPPLE_URL", raising=False)
    code = main(
        [
            "worker",
            "--worker-id",
            "w1",
            "--listen",
            "127.0.0.1:1",
            "--store",
            "file:///nowhere",
            "--spark-remote",
            "sc://127.0.0.1:1",
        ]
    )
    assert code == 2
    assert "--coordinator" in capsys.readouterr().err


def test_a_bad_setting_on_the_command_line_names_it(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, nodes=1)
    out = ripple(
        "coordinator",
        "--config",
        str(cluster.config_path),
        "--node-id",
        "n1",
        "--heartbeat-timeout-s",
        "3",
        "--lease-s",
        "20",
    )
    assert out.returncode == 2
    assert "lease_s = 20.0: must be < heartbeat_timeout_s = 3.0" in out.stderr
