"""The committed results of full benchmark runs: `bench/results/<name>.json`, one file per
benchmark, rewritten by each full run of it, so a reader can diff a run against the last.

A file holds the rows the runner prints (case -> field -> value) and what the figures
depend on: when the run started (UTC), the commit it ran (and whether tracked files had
changes), the machine's cores and its load when the run began, how long it took. Quick runs
never write here: their sample sizes are for checking that a benchmark still runs, not for
comparing figures.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["RESULTS_DIR", "Run", "begin", "write"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
GIT_TIMEOUT_S = 10.0
REPO = Path(__file__).resolve().parent.parent

Rows = dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """What a benchmark's figures depend on, besides the code."""

    date: str  # ISO 8601, UTC, when the benchmark started
    commit: str  # the checked-out commit; "unknown" outside a git checkout
    dirty: bool  # tracked files differed from that commit
    cores: int
    load_1m: float  # the machine's 1-minute load average when the benchmark started
    quick: bool


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def begin(quick: bool) -> Run:
    """The facts of a run that starts now."""
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return Run(
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        commit=commit or "unknown",
        dirty=bool(changes),
        cores=os.cpu_count() or 0,
        load_1m=round(os.getloadavg()[0], 2),
        quick=quick,
    )


def write(name: str, rows: Rows, run: Run, seconds: float, directory: Path = RESULTS_DIR) -> Path:
    """`directory/<name>.json` with `rows` and `run`; keys sorted, so a diff shows figures."""
    if run.quick:
        raise ValueError("quick runs are not results: their sizes are too small to compare")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    record = {"benchmark": name, **asdict(run), "seconds": round(seconds, 1), "rows": rows}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)  # a run cut short leaves the last complete file, not half of one
    return path
