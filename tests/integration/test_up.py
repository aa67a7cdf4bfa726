"""`ripple up` end to end: it starts three nodes, prints their URLs and a status table,
the read commands work against it, and SIGTERM stops every process it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from testkit.process import Proc, python_argv
from testkit.wait import wait_until


def test_ripple_up_runs_a_cluster_and_stops_everything(tmp_path: Path) -> None:
    data = tmp_path / "data"
    up = Proc(
        python_argv(
            "-m",
            "ripple.cli",
            "up",
            "--data-dir",
            str(data),
            "--workers",
            "0",
            "--partitions",
            "8",
        ),
        tmp_path / "up.log",
    )
    try:
        out = wait_until(
            lambda: up.output() if "Ctrl-C stops" in up.output() else None, "ripple up is ready", 60
        )
        urls = re.findall(r"(http://127\.0\.0\.1:\d+)", out)
        assert len(set(urls)) == 3, out
        assert "partitions by status" in out
        cluster_file = data / "cluster.toml"
        assert oct(cluster_file.stat().st_mode & 0o777) == "0o600"
        status = subprocess.run(
            [sys.executable, "-m", "ripple.cli", "status", "--data-dir", str(data)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "partitions: 8" in status.stdout
        parts = subprocess.run(
            [sys.executable, "-m", "ripple.cli", "partitions", "--json", "--url", urls[1]],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert '"partitions"' in parts.stdout
        bad = subprocess.run(
            [
                sys.executable,
                "-m",
                "ripple.cli",
                "reassign",
                "--move",
                "x:y",
                "--data-dir",
                str(data),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 2 and "PARTITION:WORKER" in bad.stderr
        children = [int(p) for p in re.findall(r"pid (\d+)", up.output())]
        up.signal(signal.SIGTERM)
        wait_until(lambda: not up.alive(), "ripple up exits", 30)
        assert "stopped." in up.output()
        for pid in children:
            wait_until(lambda pid=pid: not _alive(pid), f"child {pid} gone", 15)
    finally:
        up.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes: its parent (ripple up) reaps it on exit.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_ripple_up_demo_shows_the_pipeline_and_a_failover(
    tmp_path: Path, spark_remote: str
) -> None:
    # spark_remote is unused here (ripple up starts its own Spark server), but requesting it
    # keeps this test after the session server is up, so two JVMs never start at once.
    fast = {
        "RIPPLE_HEARTBEAT_INTERVAL_S": "0.3",
        "RIPPLE_SUSPECT_AFTER_S": "1",
        "RIPPLE_LEASE_S": "1.5",
        "RIPPLE_HEARTBEAT_TIMEOUT_S": "3",
        "RIPPLE_CHECKPOINT_INTERVAL_S": "1",
    }
    up = Proc(
        python_argv(
            "-m",
            "ripple.cli",
            "up",
            "--data-dir",
            str(tmp_path / "d"),
            "--partitions",
            "8",
            "--demo",
        ),
        tmp_path / "up.log",
        env=fast,
    )
    try:
        out = wait_until(
            lambda: (
                up.output()
                if "[demo] done" in up.output() or "[demo] stopped" in up.output()
                else None
            ),
            "demo finishes",
            300,
            0.5,
        )
        assert "[demo] done" in out, out[-3000:]
        assert out.count("vs one Spark batch job over the same input: equal") == 2, out[-3000:]
        assert "DIFFER" not in out
        assert re.search(r"partition 0 now on w\d at epoch [2-9]", out), out[-3000:]
        up.signal(signal.SIGTERM)
        wait_until(lambda: not up.alive(), "ripple up exits", 60)
    finally:
        up.stop()
