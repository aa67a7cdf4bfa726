"""The stall guard (`replication.ticker.Ticker`) judges a stall on the clock it is given: while
the event loop is blocked but the clock stands still, the guard never ticks; once the clock
says LOOP_STALL_S has passed since the loop's last turn, it ticks in the loop's place; when
the loop turns again, it stops. Against a fake node and poller (the ticker's two seams)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from replication.ticker import LOOP_STALL_S, Ticker
from shared.clock import FakeClock
from testkit.wait import wait_until_async

GUARD_WAIT_S = 2.0  # bound on waiting for the guard to tick
# Long enough for twenty of the guard's rounds: one that has not ticked by then would not.
STILL_S = 0.2


class FakeNode:
    """Records the thread of every tick."""

    def __init__(self) -> None:
        self.ticked_on: list[str] = []

    def doTick(self, _time_to_wait: float) -> None:
        self.ticked_on.append(threading.current_thread().name)

    def restore_loaded_snapshot(self) -> None:
        pass

    def destroy(self) -> None:
        pass


class FakePoller:
    def __init__(self) -> None:
        self.loop_thread = threading.current_thread()

    def attach(self, _loop: Any, _kick: Any, _turned: Any) -> None:
        pass

    def on_loop(self) -> bool:
        return threading.current_thread() is self.loop_thread

    def dispatch_ready(self) -> None:
        pass

    def close(self) -> None:
        pass


def block_loop_until(done: Any, for_s: float = GUARD_WAIT_S) -> bool:
    """Hold the event loop's thread (a stall) until `done()` or `for_s` have passed."""
    until = time.monotonic() + for_s
    while not done() and time.monotonic() < until:
        time.sleep(0.01)
    return bool(done())


async def test_the_guard_ticks_only_when_the_clock_says_the_loop_stalled() -> None:
    clock = FakeClock()
    node = FakeNode()
    ticker = Ticker(
        node,  # type: ignore[arg-type]
        FakePoller(),  # type: ignore[arg-type]
        threading.Lock(),
        threading.Lock(),
        after_tick=lambda: None,
        clock=clock,
    )
    ticker.start()
    try:
        await wait_until_async(lambda: node.ticked_on, "the loop's own ticks", 10.0)
        assert node.ticked_on and "raft-guard" not in node.ticked_on
        # The loop is held far longer than LOOP_STALL_S of real time; on the clock, no time.
        assert not block_loop_until(lambda: ticker.guard_ticks > 0, STILL_S)
        clock.advance(round(LOOP_STALL_S * 1000) - 1)
        assert not block_loop_until(lambda: ticker.guard_ticks > 0, STILL_S)
        clock.advance(1)
        assert block_loop_until(lambda: ticker.guard_ticks > 0)
        assert "raft-guard" in node.ticked_on
        await asyncio.sleep(0.05)  # the loop turns (and ticks) again
        rounds = ticker.guard_ticks
        assert not block_loop_until(lambda: ticker.guard_ticks > rounds, STILL_S)
    finally:
        ticker.close()
