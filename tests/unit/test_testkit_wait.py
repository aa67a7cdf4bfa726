"""testkit.wait: a wait ends at its bound with the last error, or at once on GiveUp; the async
wait lets the event loop run between its polls."""

from __future__ import annotations

import asyncio
import time

import pytest

from testkit.wait import GiveUp, wait_until, wait_until_async


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


async def test_the_async_wait_lets_the_loop_run_until_the_condition_holds() -> None:
    flag: list[int] = []
    asyncio.get_running_loop().call_later(0.02, flag.append, 1)
    assert await wait_until_async(lambda: flag, "the timer", 5.0) == [1]
    with pytest.raises(AssertionError, match="waiting for never"):
        await wait_until_async(lambda: None, "never", 0.05)
