"""`bench.harness.paused`: the other clusters of a benchmark are stopped while one is measured
and continued afterwards, even when the measurement fails."""

from __future__ import annotations

from pathlib import Path

import pytest

import bench.harness
from bench.harness import paused
from testkit.process import Proc, python_argv
from testkit.wait import wait_until

WAIT_S = 10.0


class Procs:
    """Stands in for a NodeCluster: `paused` reads only `procs`."""

    def __init__(self, tmp: Path, n: int) -> None:
        argv = python_argv("-c", "import signal; signal.pause()")
        self.procs = {i: Proc(argv, tmp / f"p{i}.log") for i in range(n)}

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()


def state(proc: Proc) -> str:
    """The process's state letter from /proc: T when stopped."""
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def stopped(procs: list[Proc], want: bool) -> None:
    """Signals are delivered asynchronously: wait (bounded) for every state to follow."""
    wait_until(lambda: all((state(p) == "T") is want for p in procs), f"stopped={want}", WAIT_S)


def test_paused_stops_every_process_for_the_block_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench.harness, "RESUME_SETTLE_S", 0.0)
    a, b = Procs(tmp_path / "a", 2), Procs(tmp_path / "b", 1)
    try:
        procs = [*a.procs.values(), *b.procs.values()]
        stopped(procs, False)
        with paused([a, b]):  # type: ignore[list-item]
            stopped(procs, True)
        stopped(procs, False)
        with pytest.raises(RuntimeError), paused([a]):  # type: ignore[list-item]
            stopped(list(a.procs.values()), True)
            raise RuntimeError("the run failed")
        stopped(list(a.procs.values()), False)
    finally:
        a.stop()
        b.stop()
