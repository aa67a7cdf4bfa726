"""The tests' background threads (load generators, watchers): one that dies of an exception
fails the test that ran it, instead of leaving it checking less than it says."""

from __future__ import annotations

import pytest

from testkit.background import Background
from tests.chaos.harness import Background as ChaosBackground


class Failing(Background):
    every_s = 0.01

    def step(self) -> None:
        if self.steps == 2:
            raise RuntimeError("dictionary changed size during iteration")


class Steady(Background):
    every_s = 0.01
    steps_max = 3

    def step(self) -> None:
        pass


def test_a_step_that_raises_fails_the_block() -> None:
    with pytest.raises(AssertionError, match="Failing failed: RuntimeError"), Failing() as failing:
        failing._thread.join(5.0)
    with Steady() as steady:
        steady._thread.join(5.0)
    assert steady.steps == 3 and steady.error is None


class ChaosFailing(ChaosBackground):
    def _run(self) -> None:
        raise RuntimeError("boom")


class ChaosSteady(ChaosBackground):
    def _run(self) -> None:
        self._stop.wait(5.0)


def test_a_chaos_thread_that_raises_fails_at_stop() -> None:
    failing = ChaosFailing("writer")
    failing.start()
    with pytest.raises(AssertionError, match="the writer thread failed: RuntimeError"):
        failing.stop()
    steady = ChaosSteady("reader")
    steady.start()
    steady.stop()
