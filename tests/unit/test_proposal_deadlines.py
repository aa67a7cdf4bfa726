"""The proposals' deadlines (`replication.group_commit.Deadlines`): one timer for the
earliest, each waiting proposal given up on at its own deadline, settled ones never touched,
the heap bounded however many proposals settle in time, and every deadline read on the clock
the deadlines are given (the loop's timer only wakes them)."""

from __future__ import annotations

import asyncio

import pytest

from replication.group_commit import DEADLINES_PRUNE_MIN, Deadlines
from shared.clock import FakeClock


async def test_each_waiting_proposal_gives_up_at_its_own_deadline() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    late, early, settled = loop.create_future(), loop.create_future(), loop.create_future()
    deadlines.add(loop, 0.4, late)
    deadlines.add(loop, 0.1, early)  # added after a later one: the timer moves up
    deadlines.add(loop, 0.05, settled)
    settled.set_result("committed")
    started = loop.time()
    with pytest.raises(TimeoutError):
        await early
    assert 0.09 <= loop.time() - started < 0.3 and not late.done()
    with pytest.raises(TimeoutError):
        await late
    assert loop.time() - started >= 0.39
    assert settled.result() == "committed" and len(deadlines) == 0


async def test_a_cancelled_caller_is_left_alone() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    fut = loop.create_future()
    deadlines.add(loop, 0.01, fut)
    fut.cancel()
    await asyncio.sleep(0.05)
    assert fut.cancelled() and len(deadlines) == 0


async def test_the_heap_stays_bounded_when_proposals_settle_in_time() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    waiting = []
    for i in range(20 * DEADLINES_PRUNE_MIN):
        fut = loop.create_future()
        deadlines.add(loop, 60.0, fut)
        if i % 100 == 0:
            waiting.append(fut)  # one in a hundred still waits
        else:
            fut.set_result(None)
        assert len(deadlines) <= 2 * max(DEADLINES_PRUNE_MIN, 2 * len(waiting)) + 1
    assert not any(f.done() for f in waiting)
    for fut in waiting:
        fut.cancel()


async def test_a_deadline_is_due_by_the_given_clock_not_by_the_loops_timer() -> None:
    loop = asyncio.get_running_loop()
    clock = FakeClock()
    deadlines = Deadlines(clock)
    fut = loop.create_future()
    deadlines.add(loop, 0.02, fut)
    # The loop's timer fires (and rearms) every 20 ms of real time; the clock stands still.
    await asyncio.sleep(0.1)
    assert not fut.done() and len(deadlines) == 1
    clock.advance(18)  # within DEADLINE_SLACK_MS of it: not yet
    await asyncio.sleep(0.05)
    assert not fut.done()
    clock.advance(1)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(fut, 1.0)
    assert len(deadlines) == 0
