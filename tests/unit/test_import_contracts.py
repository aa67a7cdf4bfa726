"""The package graph's contracts (pyproject.toml, `lint-imports`) fail when broken.

`./dev test` runs lint-imports on the tree as it is; this test breaks each contract on a
copy of the tree, one import at a time, and checks that lint-imports names that contract
as broken, so no contract is one that cannot fail. The contracts hold the one list of what
the pure core may not import.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = (
    "shared",
    "coordinator",
    "replication",
    "pipeline",
    "ripple",
    "testkit",
    "bench",
    "tests",
)
LINT_TIMEOUT_S = 120


def copy_tree(dest: Path) -> None:
    for name in PACKAGES:
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(exe), "--no-cache"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=LINT_TIMEOUT_S,
        check=False,
    )


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    copy_tree(tmp_path)
    result = lint(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        (
            "coordinator/service/node.py",
            "import pipeline.store",
            "coordinator does not import pipeline",
        ),
        ("coordinator/config.py", "import ripple.cli", "coordinator does not import pipeline"),
        (
            "pipeline/source.py",
            "from coordinator.config import ClusterConfig",
            "pipeline imports only the client and shared",
        ),
        (
            "pipeline/store.py",
            "import coordinator.core.model",
            "pipeline imports only the client and shared",
        ),
        (
            "pipeline/gate.py",
            "import replication.log",
            "pipeline imports only the client and shared",
        ),
        ("coordinator/core/model.py", "import time", "coordinator.core is pure"),
        ("coordinator/core/placement.py", "import logging", "coordinator.core is pure"),
        ("coordinator/core/state.py", "import shared.system_clock", "coordinator.core is pure"),
        ("coordinator/core/commands.py", "import shared.http_statuses", "coordinator.core is pure"),
        (
            "coordinator/client.py",
            "import coordinator.core.model",
            "the client imports only shared",
        ),
        (
            "coordinator/client.py",
            "import coordinator.planner_config",
            "the client imports only shared",
        ),
        # A service takes the node's parts; metrics <-> node was a cycle through this.
        (
            "coordinator/service/metrics.py",
            "from coordinator.service.node import CoordinatorNode",
            "only the composition root imports coordinator.service.node",
        ),
        (
            "coordinator/service/http/views.py",
            "import coordinator.service.node",
            "only the composition root imports coordinator.service.node",
        ),
        (
            "coordinator/service/duties.py",
            "from coordinator.service.node import CoordinatorNode",
            "only the composition root imports coordinator.service.node",
        ),
        ("shared/routing.py", "import coordinator.core.model", "shared imports no other Ripple"),
        ("replication/batch.py", "import coordinator.core.codec", "replication knows no domain"),
        ("ripple/demo.py", "import tests.conftest", "product code imports no benchmark"),
        ("ripple/cli.py", "import testkit.process", "product code imports no benchmark"),
        ("pipeline/worker.py", "import testkit.wait", "product code imports no benchmark"),
        (
            "coordinator/service/http/app.py",
            "import bench.harness",
            "product code imports no benchmark",
        ),
        ("testkit/nodes.py", "import tests.chaos.history", "testkit imports neither tests nor"),
        ("testkit/cluster.py", "import bench.harness", "testkit imports neither tests nor"),
        ("bench/failover.py", "import tests.conftest", "bench imports no test"),
        ("bench/harness.py", "import tests.integration.test_duties", "bench imports no test"),
    ],
)
def test_each_contract_fails_when_broken(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    copy_tree(tmp_path)
    target = tmp_path / module
    # Inside a function body too: lint-imports sees imports wherever they are written.
    target.write_text(target.read_text() + f"\n\ndef _broken() -> None:\n    {line}\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    broken = [row for row in result.stdout.splitlines() if " BROKEN" in row]
    # An import into shared can break more than its own contract (whoever imports shared
    # then reaches the coordinator through it); the named one must be among them.
    assert any(row.startswith(contract) for row in broken), result.stdout
