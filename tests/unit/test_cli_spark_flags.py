"""`ripple worker`'s Spark timeout and reconnect flags reach the worker's settings, default to
them when unset, and bad values are refused (exit 2, the field named) before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.settings import (
    SPARK_JOB_TIMEOUT_S_DEFAULT,
    SPARK_RECONNECT_BACKOFF_S_MAX_DEFAULT,
    SPARK_RECONNECT_BACKOFF_S_MIN_DEFAULT,
    WorkerSettings,
)
from ripple.cli import main
from tests.unit.test_cli_worker_flags import argv, started

__all__ = ["started"]  # the fixture, used here by name


def spark_bounds(s: WorkerSettings) -> tuple[float, float, float]:
    return (s.spark_job_timeout_s, s.spark_reconnect_backoff_s_min, s.spark_reconnect_backoff_s_max)


def test_the_flags_reach_the_settings_and_default_to_them(
    tmp_path: Path, started: list[WorkerSettings]
) -> None:
    assert main(argv(tmp_path)) == 0
    flags = (
        "--spark-job-timeout-s",
        "30",
        "--spark-reconnect-backoff-s-min",
        "0.25",
        "--spark-reconnect-backoff-s-max",
        "4",
    )
    assert main(argv(tmp_path, *flags)) == 0
    assert [spark_bounds(s) for s in started] == [
        (
            SPARK_JOB_TIMEOUT_S_DEFAULT,
            SPARK_RECONNECT_BACKOFF_S_MIN_DEFAULT,
            SPARK_RECONNECT_BACKOFF_S_MAX_DEFAULT,
        ),
        (30.0, 0.25, 4.0),
    ]


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (("--spark-job-timeout-s", "0"), "spark_job_timeout_s"),
        (("--spark-job-timeout-s", "nan"), "spark_job_timeout_s"),
        (("--spark-reconnect-backoff-s-min", "-1"), "spark_reconnect_backoff_s_min"),
        (("--spark-reconnect-backoff-s-max", "inf"), "spark_reconnect_backoff_s_max"),
        # A minimum above the (default, 10 s) maximum.
        (("--spark-reconnect-backoff-s-min", "30"), "spark_reconnect_backoff_s_min"),
    ],
)
def test_bad_values_are_refused_before_anything_starts(
    tmp_path: Path,
    started: list[WorkerSettings],
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, str],
    field: str,
) -> None:
    assert main(argv(tmp_path, *flags)) == 2
    assert f"({field})" in capsys.readouterr().err
    assert started == []
