"""The leader's membership waits (`replication.reconfig.Reconfiguration`) end on the clock they
are given: a learner that never catches up is given up on when the clock passes the bound,
not when the event loop's time does. Against a fake node that leads and never sees the
learner answer."""

from __future__ import annotations

import asyncio
import threading

import pytest

from replication.errors import OutcomeUnknownError
from replication.members import Member
from replication.reconfig import POLL_S, Reconfiguration
from shared.clock import FakeClock

NEW = Member(id="n4", raft="127.0.0.1:1", http="")


class LaggingLeader:
    """Leads, has compacted, and hears nothing from the learner."""

    def __init__(self) -> None:
        self.learners: list[Member] = []

    def first_index(self) -> int:
        return 2

    def learn(self, member: Member) -> None:
        self.learners.append(member)

    def _isLeader(self) -> bool:
        return True

    def progress(self) -> dict[str, tuple[int, float]]:
        return {}

    def last_index(self) -> int:
        return 1_000


async def test_catch_up_gives_up_when_the_clock_passes_its_bound() -> None:
    clock = FakeClock()
    node = LaggingLeader()
    reconfig = Reconfiguration(node, threading.Lock(), clock)  # type: ignore[arg-type]
    task = asyncio.create_task(reconfig.catch_up(NEW, timeout_s=0.1))
    # Several polls of real time, twice the bound: the clock has not moved, so it waits on.
    await asyncio.sleep(4 * POLL_S)
    assert not task.done() and node.learners == [NEW]
    clock.advance(100)
    with pytest.raises(OutcomeUnknownError, match=r"did not catch up within 0\.1 s"):
        await asyncio.wait_for(task, 1.0)
