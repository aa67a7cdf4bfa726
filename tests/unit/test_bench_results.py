"""`python -m bench` writes a full run's rows to `<results-dir>/<name>.json` with the facts a
reader needs to compare runs (date, commit, cores), and a quick run writes nothing.

The benchmark run here is this module's own `run`: the runner imports whatever module its
registry names."""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

import pytest

import bench.__main__ as runner
from bench import results

ROWS = {"case_a": {"median_s": 0.5, "kills": 3.0}, "case_b": {"median_s": 0.25}}


def run(quick: bool) -> dict[str, dict[str, float]]:
    """The stand-in benchmark."""
    return {name: dict(row) for name, row in ROWS.items()}


def broken(quick: bool) -> dict[str, dict[str, float]]:
    raise RuntimeError("broken on purpose")


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "REGISTRY", {"standin": __name__})


def test_a_full_run_writes_its_rows_with_date_commit_and_cores(
    tmp_path: Path, registry: None
) -> None:
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    assert runner.main(["standin", "--results-dir", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "standin.json").read_text())
    assert record["rows"] == ROWS
    assert record["benchmark"] == "standin"
    assert record["quick"] is False
    assert record["cores"] == os.cpu_count()
    assert datetime.datetime.fromisoformat(record["date"]) >= before
    # Run from a git checkout: the commit is a full hash.
    assert len(record["commit"]) == 40 and int(record["commit"], 16) >= 0
    assert isinstance(record["dirty"], bool)
    assert record["seconds"] >= 0


def test_a_quick_run_writes_no_results(tmp_path: Path, registry: None) -> None:
    assert runner.main(["standin", "--quick", "--results-dir", str(tmp_path)]) == 0
    assert list(tmp_path.iterdir()) == []


def test_a_failed_benchmark_keeps_the_last_results(
    tmp_path: Path, registry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = tmp_path / "standin.json"
    last.write_text('{"rows": "the last good run"}\n')
    monkeypatch.setattr(sys.modules[__name__], "run", broken)
    assert runner.main(["standin", "--results-dir", str(tmp_path)]) == 1
    assert last.read_text() == '{"rows": "the last good run"}\n'


def test_results_refuse_a_quick_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quick"):
        results.write("x", ROWS, results.begin(quick=True), 1.0, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_file_is_sorted_so_a_diff_shows_figures(tmp_path: Path) -> None:
    path = results.write("x", ROWS, results.begin(quick=False), 1.0, tmp_path)
    text = path.read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
