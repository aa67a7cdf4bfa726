"""The processes `ripple up` starts, tracked and stopped by PID only.

Each child's output goes to `<log_dir>/<name>.log`. Stopping sends every child still running
its own stop signal (newest first), waits a bounded time, then SIGKILLs exactly the ones
left; the Spark Connect server, started through its own class, is stopped after them.
Nothing is ever signalled by name.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from shared.clock import Clock, monotonic_s
from shared.system_clock import SYSTEM_CLOCK

log = logging.getLogger("ripple")

CHILD_STOP_TIMEOUT_S = 10.0
WATCH_EVERY_S = 0.2


class Stoppable(Protocol):
    def stop(self) -> None: ...


class Children:
    """Processes started by `ripple up`, tracked and stopped by PID only."""

    def __init__(self, log_dir: Path, clock: Clock = SYSTEM_CLOCK) -> None:
        self.log_dir = log_dir
        self.clock = clock  # the stop deadline is read on it
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.stop_signals: dict[int, int] = {}
        self.spark: Stoppable | None = None  # pipeline.spark_server.SparkConnectServer

    def start(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        out.close()
        self.procs.append((name, proc))
        self.stop_signals[proc.pid] = stop_signal

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs}

    def watch(self, stopping: Callable[[], bool]) -> None:
        """Until `stopping()`: log each child that exits, once (the others keep running)."""
        reported: set[str] = set()
        while not stopping():
            for name, proc in self.procs:
                if proc.poll() is not None and name not in reported and not stopping():
                    reported.add(name)
                    log.warning("%s exited with %s", name, proc.returncode)
            time.sleep(WATCH_EVERY_S)

    def stop_all(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(self.stop_signals.get(proc.pid, signal.SIGTERM))
        deadline = monotonic_s(self.clock) + CHILD_STOP_TIMEOUT_S
        for name, proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - monotonic_s(self.clock)))
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) did not stop; killing it", name, proc.pid)
                proc.kill()
                proc.wait(CHILD_STOP_TIMEOUT_S)
        if self.spark is not None:
            self.spark.stop()
