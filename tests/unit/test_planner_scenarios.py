"""Scenario files for the planner (tests/unit/testdata/planner/*.txt), etcd raft style.

Each file drives the real planner through events and shows every batch it returns; the
expected output is checked block by block. `pytest --rewrite-testdata` regenerates the
expectations from what the planner does now (review the diff before committing it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.planner_script import header_of, render, run_file

TESTDATA = Path(__file__).parent / "testdata" / "planner"
FILES = sorted(TESTDATA.glob("*.txt"))


def test_there_are_enough_scenarios() -> None:
    assert len(FILES) >= 20


def test_each_scenario_has_a_number_of_its_own() -> None:
    # The number is the order they run and read in; two files under one number hide which
    # came first and invite a third.
    numbers = [f.name.split("_", 1)[0] for f in FILES]
    assert all(n.isdigit() for n in numbers), numbers
    assert len(set(numbers)) == len(numbers), sorted(n for n in numbers if numbers.count(n) > 1)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_scenario(path: Path, request: pytest.FixtureRequest) -> None:
    blocks, outputs = run_file(path)
    if request.config.getoption("--rewrite-testdata"):
        path.write_text(render(blocks, outputs, header_of(path.read_text())))
        return
    for b, out in zip(blocks, outputs, strict=True):
        assert out == b.expected, f"{path.name}:{b.line}: {b.directive}\n--- got:\n{out}"
