"""testkit.wait: a wait ends at its bound with the last error, or at once on GiveUp."""

from __future__ import annotations

import time

import pytest

from testkit.wait import GiveUp, wait_until


def test_a_condition_that_comes_true_returns_its_value() -> None:
    calls = iter([None, 0, "leader"])
    assert wait_until(lambda: next(calls), "a leader", timeout_s=5.0, every_s=0.0) == "leader"


def test_a_timeout_names_what_was_awaited_and_the_last_error() -> None:
    def flaky() -> None:
        raise ValueError("connection refused")

    with pytest.raises(AssertionError, match=r"a leader .*connection refused"):
        wait_until(flaky, "a leader", timeout_s=0.2, every_s=0.01)


def test_give_up_ends_the_wait_at_once() -> None:
    def hopeless() -> None:
        raise GiveUp("every node exited")

    started = time.monotonic()
    with pytest.raises(GiveUp, match="every node exited"):
        wait_until(hopeless, "a leader", timeout_s=60.0, every_s=0.01)
    assert time.monotonic() - started < 30.0  # far below the 60 s bound it would wait out
