"""The wall clock shim on a running child: its wall clock steps an hour forward and back when
the test says so, its monotonic clock goes on as before, its sleeps still sleep, and a process
without the shim keeps the real time."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.faults.clock import OFFSET_S_MAX, WallClock
from testkit.faults.line_child import LineChild

HOUR_S = 3600.0
# Between this process's reading and the child's: a pipe round trip on a loaded machine.
SKEW_S_MAX = 1.0
SLEEP_S = 0.05

PROBE = f"""
import datetime, sys, time
for line in sys.stdin:
    if line.strip() == "sleep":
        began = time.monotonic()
        time.sleep({SLEEP_S!r})
        print(time.monotonic() - began, flush=True)
    else:
        print(time.time(), time.monotonic(), datetime.datetime.now().timestamp(), flush=True)
"""


@pytest.fixture
def clock(tmp_path: Path) -> WallClock:
    return WallClock(tmp_path / "clock")


@pytest.fixture
def child(clock: WallClock) -> Iterator[LineChild]:
    c = LineChild([sys.executable, "-c", PROBE], env=clock.env())
    try:
        yield c
    finally:
        c.stop()


def offset_and_monotonic(child: LineChild) -> tuple[float, float]:
    """(the child's wall clock minus this process's, the child's monotonic clock)."""
    wall, mono, now = (float(w) for w in child.ask("read").split())
    ours = time.time()
    assert abs(now - wall) < SKEW_S_MAX  # datetime.now() reads the same stepped clock
    return wall - ours, mono


def test_steps_move_the_wall_clock_and_not_the_monotonic_one(
    clock: WallClock, child: LineChild
) -> None:
    readings = [offset_and_monotonic(child)]
    for step_s in (HOUR_S, -2 * HOUR_S, HOUR_S):
        clock.step(step_s)
        readings.append(offset_and_monotonic(child))
    offsets = [round(off / HOUR_S) for off, _ in readings]
    assert offsets == [0, 1, -1, 0], readings
    for (off, _), want in zip(readings, offsets, strict=True):
        assert abs(off - want * HOUR_S) < SKEW_S_MAX
    monotonic = [mono for _, mono in readings]
    gaps = [b - a for a, b in itertools.pairwise(monotonic)]
    assert all(0 <= g < SKEW_S_MAX for g in gaps), monotonic
    assert clock.offset_s == 0.0


def test_sleeps_still_sleep_on_a_stepped_clock(clock: WallClock, child: LineChild) -> None:
    # The libfaketime failure this shim avoids: time.sleep raising EINVAL.
    with clock.stepped(-HOUR_S):
        slept = float(child.ask("sleep"))
        assert SLEEP_S <= slept < SLEEP_S + SKEW_S_MAX
        assert round(offset_and_monotonic(child)[0] / HOUR_S) == -1
    assert round(offset_and_monotonic(child)[0] / HOUR_S) == 0


def test_a_process_without_the_shim_keeps_the_real_clock(tmp_path: Path) -> None:
    clock = WallClock(tmp_path / "clock")
    clock.step(HOUR_S)
    plain = LineChild([sys.executable, "-c", PROBE])
    try:
        assert abs(offset_and_monotonic(plain)[0]) < SKEW_S_MAX
    finally:
        plain.stop()


def test_offset_is_bounded(clock: WallClock) -> None:
    with pytest.raises(ValueError):
        clock.step(OFFSET_S_MAX + 1)
    assert clock.offset_s == 0.0
