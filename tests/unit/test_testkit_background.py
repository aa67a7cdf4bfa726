"""The tests' background threads (load generators, watchers): one that dies of an exception
fails the test that ran it, instead of leaving it checking less than it says."""

from __future__ import annotations

import pytest

from testkit.background import Background


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


class Looping(Background):
    """A loop of its own instead of a step."""

    def __init__(self, fail: bool) -> None:
        super().__init__("writer")
        self.fail = fail

    def _run(self) -> None:
        if self.fail:
            raise RuntimeError("boom")
        self._stop.wait(5.0)


def test_a_step_that_raises_fails_the_block() -> None:
    failed = pytest.raises(AssertionError, match="the Failing thread failed: RuntimeError")
    with failed, Failing() as failing:
        failing._thread.join(5.0)
    with Steady() as steady:
        steady._thread.join(5.0)
    assert steady.steps == 3 and steady.error is None


def test_a_loop_that_raises_fails_at_stop() -> None:
    failing = Looping(fail=True)
    failing.start()
    with pytest.raises(AssertionError, match="the writer thread failed: RuntimeError"):
        failing.stop()
    steady = Looping(fail=False)
    steady.start()
    assert steady.alive()
    steady.stop()
    assert not steady.alive()


def test_a_failing_test_is_not_hidden_by_its_thread() -> None:
    with pytest.raises(KeyError), Failing() as failing:
        failing._thread.join(5.0)
        raise KeyError("the test's own failure")
