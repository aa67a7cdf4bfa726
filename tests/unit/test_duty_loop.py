"""The supervised duty loop: a step that raises is logged, counted, and the loop goes on.

The node here is a stand-in for what the duties take of a node (`node_parts.DutyNode`: read,
submit, metrics, config, leader_info); Raft itself is exercised by tests/integration/test_duties.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.config import ClusterConfig
from coordinator.core.commands import Command, CommandResult, Ok
from coordinator.core.effects import Batch
from coordinator.core.planner import Planner
from coordinator.core.state import ClusterState, apply
from coordinator.planner_config import planner_settings
from coordinator.service.duties import LeaderDuties
from coordinator.service.metrics import Metrics
from coordinator.service.node_parts import LeaderInfo
from replication.log import RaftRole, RaftStatus
from shared.clock import FakeClock
from shared.errors import UnavailableError
from testkit.wait import wait_until_async


def ready_leader_info(applied_index: int) -> LeaderInfo:
    """A stand-in node's view of itself: the ready leader of term 1, applied so far."""
    status = RaftStatus(
        role=RaftRole.LEADER,
        term=1,
        commit_index=applied_index,
        applied_index=applied_index,
        leader_addr=None,
        ready=True,
    )
    return LeaderInfo(role=RaftRole.LEADER, ready=True, leader=None, status=status)


class StandInNode:
    def __init__(self) -> None:
        self.config = ClusterConfig(total_partitions=4)
        self.node_id = "n1"
        self.metrics = Metrics()
        self.state = ClusterState()
        self.is_ready_leader = True
        self.submitted: list[Command] = []

    @contextlib.contextmanager
    def read(self) -> Iterator[ClusterState]:
        yield self.state

    def leader_info(self) -> LeaderInfo:
        return ready_leader_info(applied_index=0)

    async def submit(self, command: Command, request_id: str | None = None) -> CommandResult:
        self.submitted.append(command)
        result = apply(self.state, f"r{len(self.submitted)}", command)
        assert isinstance(result, Ok), result
        return result.value


def errors(node: StandInNode, step: str) -> float:
    value = node.metrics.registry.get_sample_value("ripple_duty_errors_total", {"step": step})
    return 0.0 if value is None else value


def test_a_raising_step_is_logged_counted_and_the_loop_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = StandInNode()
    duties = LeaderDuties(node, random.Random(1), FakeClock())  # type: ignore[arg-type]
    real_plan = Planner.plan
    raised: list[int] = []

    def flaky(self: Planner, state: ClusterState, now_ms: int, wall_ms: int) -> Batch:
        if len(raised) < 2:
            raised.append(now_ms)
            raise KeyError("boom in a planner step")
        return real_plan(self, state, now_ms, wall_ms)

    async def main() -> None:
        duties.on_role(None)  # type: ignore[arg-type]
        assert duties.running
        await wait_until_async(
            lambda: node.state.total_partitions == 4, "bootstrap after two failed steps"
        )
        assert duties.running
        await duties.close()
        assert not duties.running

    caplog.set_level(logging.INFO, logger="coordinator.service.duties")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Planner, "plan", flaky)
        asyncio.run(main())
    assert len(raised) == 2
    assert errors(node, "plan") == 2
    tracebacks = [r for r in caplog.records if r.exc_info and "boom" in str(r.exc_info[1])]
    assert len(tracebacks) == 2
    assert "Traceback" in caplog.text


def test_a_dead_loop_task_is_reported_by_running_and_counted() -> None:
    node = StandInNode()
    duties = LeaderDuties(node, random.Random(1), FakeClock())  # type: ignore[arg-type]

    async def broken() -> None:
        raise RuntimeError("the loop itself died")

    async def main() -> None:
        duties._run = broken  # type: ignore[method-assign]
        duties.on_role(None)  # type: ignore[arg-type]
        await wait_until_async(lambda: not duties.running, "the task to end")
        await asyncio.sleep(0)  # let the done-callback run

    asyncio.run(main())
    assert errors(node, "loop") == 1


def test_commits_lost_while_stepping_down_are_not_counted_as_errors() -> None:
    """A failover makes commits fail by design; the alert on duty errors must not fire."""
    node = StandInNode()
    duties = LeaderDuties(node, random.Random(1), FakeClock())  # type: ignore[arg-type]
    attempts: list[bool] = []

    async def unavailable(command: Command, request_id: str | None = None) -> dict[str, Any]:
        attempts.append(node.is_ready_leader)
        raise UnavailableError("leadership lost while committing")

    async def main() -> None:
        node.submit = unavailable  # type: ignore[method-assign]
        duties.on_role(None)  # type: ignore[arg-type]
        node.is_ready_leader = False  # stepping down: the role callback has not run yet
        await wait_until_async(lambda: len(attempts) >= 1, "a failed commit while stepping down")
        assert errors(node, "commit") == 0
        node.is_ready_leader = True
        await wait_until_async(
            lambda: errors(node, "commit") >= 1, "a failed commit as the ready leader"
        )
        await duties.close()

    asyncio.run(main())
    assert attempts[0] is False and True in attempts


def test_a_death_storm_logs_a_bounded_line() -> None:
    from coordinator.service.command_log import DEAD_IDS_LOGGED_MAX, ids_text

    assert ids_text(["w1", "w2"]) == "w1, w2"
    many = [f"w{i}" for i in range(DEAD_IDS_LOGGED_MAX + 480)]
    text = ids_text(many)
    assert text.endswith(f"w{DEAD_IDS_LOGGED_MAX - 1} and 480 more")
    assert text.count(", ") == DEAD_IDS_LOGGED_MAX - 1


@pytest.mark.parametrize(("call_timeout_s", "hold_s"), [(5.0, 2.5), (3.0, 1.5), (60.0, 10.0)])
def test_a_warm_call_asks_the_target_to_hold_its_answer_within_the_call_timeout(
    call_timeout_s: float, hold_s: float
) -> None:
    """The leader's warm call asks for the answer at the copy's next step (docs/design.md
    §5), for half the call's timeout at most and never past what a worker accepts."""
    from coordinator.core.effects import WarmCall
    from shared.messages.common import Answer, Outcome
    from shared.messages.warm import WarmRequest

    node = StandInNode()
    node.config = ClusterConfig(total_partitions=4, worker_call_timeout_s=call_timeout_s)
    duties = LeaderDuties(node, random.Random(1), FakeClock())  # type: ignore[arg-type]
    sent: list[Any] = []

    class Client:
        async def post(self, call: Any, request: Any) -> Answer:
            sent.append(request)
            body: dict[str, object] = {"partition": 2, "loaded": True, "offset": 7, "head": 9}
            return Answer(outcome=Outcome.OK, body=body)

    duties._client = Client()  # type: ignore[assignment]
    call = WarmCall(
        migration_id="m-1",
        partition=2,
        worker_id="w2",
        address="http://x",
        incarnation=1,
        checkpoint=None,
    )
    planner = Planner(planner_settings(node.config), random.Random(1), node.state, 0)
    results: list[Any] = []
    planner.on_result = lambda result, *_: results.append(result)  # type: ignore[method-assign]
    duties.planner = planner
    asyncio.run(duties._call(planner, call))
    (done,) = results
    assert done.ok and (done.offset, done.head) == (7, 9)
    (request,) = sent
    assert isinstance(request, WarmRequest) and request.hold_s == hold_s
