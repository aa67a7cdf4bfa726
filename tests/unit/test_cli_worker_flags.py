"""`ripple worker`'s warm-copy flags reach the worker's settings, and bad values are refused
with the error line and exit status 2 before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

import pipeline.worker
from pipeline.settings import WARM_COPIES_MAX_DEFAULT, WARM_COPY_IDLE_S_DEFAULT, WorkerSettings
from pipeline.store import ObjectStore
from ripple.cli import main


def argv(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "worker",
        "--coordinator",
        "http://127.0.0.1:9",
        "--worker-id",
        "w1",
        "--listen",
        "127.0.0.1:9",
        "--spark-remote",
        "sc://127.0.0.1:9",
        "--store",
        f"file://{tmp_path / 'store'}",
        *extra,
    ]


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[WorkerSettings]:
    """The settings each `run_worker` call was given (it starts nothing)."""
    seen: list[WorkerSettings] = []

    def run_worker(settings: WorkerSettings, store: ObjectStore, transform: object) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(pipeline.worker, "run_worker", run_worker)
    return seen


def test_the_flags_reach_the_settings_and_default_to_them(
    tmp_path: Path, started: list[WorkerSettings]
) -> None:
    assert main(argv(tmp_path)) == 0
    assert main(argv(tmp_path, "--warm-copies-max", "0", "--warm-copy-idle-s", "2.5")) == 0
    assert [(s.warm_copies_max, s.warm_copy_idle_s) for s in started] == [
        (WARM_COPIES_MAX_DEFAULT, WARM_COPY_IDLE_S_DEFAULT),
        (0, 2.5),
    ]


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--warm-copies-max", "-1", "warm_copies_max"),
        ("--warm-copy-idle-s", "0", "warm_copy_idle_s"),
        ("--warm-copy-idle-s", "nan", "warm_copy_idle_s"),
    ],
)
def test_bad_values_are_refused_before_anything_starts(
    tmp_path: Path,
    started: list[WorkerSettings],
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    field: str,
) -> None:
    assert main(argv(tmp_path, flag, value)) == 2
    assert f"({field})" in capsys.readouterr().err
    assert started == []
