"""A wall clock that steps for chosen processes, as an NTP step or a VM resume does.

`WallClock` owns one offset, in a control file that an ``LD_PRELOAD`` shim (wallclock.c, built
by testkit/faults/shim.py) reads in every process started with `env()`: their
``CLOCK_REALTIME`` readings (``time.time()``, ``datetime.now()``, gettimeofday, time) are moved
by the offset; ``CLOCK_MONOTONIC``, sleeps and timed waits are not. `step` moves the offset in
a running process from its next reading on.

Why not Debian's ``faketime`` (libfaketime): without ``FAKETIME_DONT_FAKE_MONOTONIC=1`` it
moves the monotonic clock with the wall clock, which no NTP step does; with it, libfaketime
0.9.10 (Debian bookworm's) hands a negative deadline to ``clock_nanosleep(CLOCK_MONOTONIC,
TIMER_ABSTIME)``, so every ``time.sleep`` of Python 3.11 fails with ``EINVAL``
(wolfcw/libfaketime#426). It also rewrites sleeps, polls and timed waits; this shim touches the
three wall-clock readings and nothing else.

Invariants: the offset is bounded by ``OFFSET_S_MAX``; the control file is replaced by rename,
so a reader sees the old offset or the new one, never a torn one; `reset` (or the end of
`stepped`) puts every process back on the real wall clock.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from testkit.faults.shim import build as shim_build
from testkit.faults.shim import preloaded

__all__ = ["WallClock"]

SOURCE = Path(__file__).with_name("wallclock.c")
CONTROL_ENV = "RIPPLE_WALLCLOCK_CONTROL"
OFFSET_S_MAX = 30 * 86_400.0  # a month: past any step an NTP daemon or a VM resume makes
NS_PER_S = 1_000_000_000


class WallClock:
    """The wall-clock offset of the processes started with `env()`."""

    def __init__(self, control: Path, *, shim: Path | None = None) -> None:
        self.control = control
        self.shim = shim_build(SOURCE) if shim is None else shim
        self._offset_ns = 0
        self._write()

    def env(self) -> dict[str, str]:
        """Environment for a child: the shim preloaded, reading `control`."""
        return {"LD_PRELOAD": preloaded(self.shim), CONTROL_ENV: str(self.control)}

    @property
    def offset_s(self) -> float:
        return self._offset_ns / NS_PER_S

    def step(self, delta_s: float) -> None:
        """Step the wall clock by `delta_s` (back if negative), from the next reading on."""
        offset_ns = self._offset_ns + round(delta_s * NS_PER_S)
        if abs(offset_ns) > OFFSET_S_MAX * NS_PER_S:
            raise ValueError(f"a wall clock more than {OFFSET_S_MAX} s off: {offset_ns} ns")
        self._offset_ns = offset_ns
        self._write()

    def reset(self) -> None:
        """Back on the real wall clock (itself a step, by minus the offset)."""
        self._offset_ns = 0
        self._write()

    @contextlib.contextmanager
    def stepped(self, delta_s: float) -> Iterator[None]:
        """The clock stepped by `delta_s` for the block, stepped back after it."""
        self.step(delta_s)
        try:
            yield
        finally:
            self.step(-delta_s)

    def _write(self) -> None:
        tmp = self.control.with_name(f"{self.control.name}.{os.getpid()}.tmp")
        tmp.write_text(f"offset_ns={self._offset_ns}\n")
        os.replace(tmp, self.control)
