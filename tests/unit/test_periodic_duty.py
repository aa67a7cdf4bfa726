"""coordinator/service/periodic.py: a failed step, whatever it raised, never ends the loop;
close ends it and can be called again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from coordinator.service.periodic import PeriodicDuty
from shared.errors import RippleError


class Flaky(PeriodicDuty):
    interval_s = 0.0  # rounds back to back: the test waits on the rounds, not on time
    quiet_level = logging.WARNING

    def __init__(self) -> None:
        super().__init__()
        self.rounds = 0
        self.third = asyncio.Event()

    async def step(self) -> None:
        self.rounds += 1
        if self.rounds == 1:
            raise RippleError("no leader yet", code="unavailable")
        if self.rounds == 2:
            raise ValueError("a bug")
        self.third.set()


async def test_failed_steps_are_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    duty = Flaky()
    with caplog.at_level(logging.WARNING, logger=__name__):
        duty.start()
        await asyncio.wait_for(duty.third.wait(), 10.0)
        await duty.close()
    messages = [r.getMessage() for r in caplog.records]
    assert "Flaky: not done this round: no leader yet" in messages
    assert any(r.exc_info and "Flaky step raised" in r.getMessage() for r in caplog.records)
    rounds = duty.rounds
    await asyncio.sleep(0)
    assert duty.rounds == rounds  # closed: no round after
    await duty.close()  # a second close is harmless
