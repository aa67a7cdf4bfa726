"""Child processes tracked by PID, their output captured to a log file.

Every process a test or a benchmark starts goes through `Proc`, which records its PID and
ends exactly that PID (SIGTERM, then SIGKILL after a bound); nothing is ever killed by name.
A child that runs a module of the checkout rather than of the product (`python -m
testkit.scripted_worker`) takes `checkout_env()`: the installed wheel holds only the product.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["CHECKOUT_ROOT", "STOP_WAIT_S", "Proc", "checkout_env", "python_argv"]

STOP_WAIT_S = 10.0
# The checkout this test kit is in: where testkit, tests and bench are found.
CHECKOUT_ROOT = Path(__file__).resolve().parents[1]


class Proc:
    """A child process tracked by PID, its output captured to a log file."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ):
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        full_env = {**os.environ, **(env or {})}
        self.popen = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(STOP_WAIT_S)

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)  # a SIGSTOPped child cannot handle SIGTERM
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(STOP_WAIT_S)
        self._log.close()

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def checkout_env() -> dict[str, str]:
    """What a child needs to import testkit, tests or bench from any working directory: the
    checkout's root first on its PYTHONPATH (the caller's entries kept after it)."""
    path = os.environ.get("PYTHONPATH")
    root = str(CHECKOUT_ROOT)
    return {"PYTHONPATH": root if not path else os.pathsep.join((root, path))}


def python_argv(*args: str) -> list[str]:
    """This interpreter running `args`: a child runs the same install as its parent."""
    return [sys.executable, *args]
