"""The pure core imports no I/O, clock, randomness or framework (STYLE rule 1).

lint-imports enforces the same contract in `./dev test`; this test keeps it inside pytest
and proves the check itself can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

BANNED = {
    "asyncio",
    "aiohttp",
    "pysyncobj",
    "pyspark",
    "time",
    "random",
    "uuid",
    "socket",
    "threading",
    "boto3",
    "logging",
    "replication",
    "pipeline",
}
CORE = Path(__file__).resolve().parents[2] / "coordinator" / "core"


def banned_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [
            n for n in names if n.split(".")[0] in BANNED or n.startswith("coordinator.service")
        ]
    return found


def test_core_modules_are_pure() -> None:
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 8
    offenders = {f.name: b for f in files if (b := banned_imports(f.read_text()))}
    assert offenders == {}


def test_the_check_catches_a_clock() -> None:
    assert banned_imports("import time\nfrom random import Random\n") == ["time", "random"]
    assert banned_imports("from coordinator.service.api import x") == ["coordinator.service.api"]
