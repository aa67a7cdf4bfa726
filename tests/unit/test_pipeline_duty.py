"""The leader's pipeline steps (coordinator/service/pipeline_duty.py) against the real state
machine: CREATING becomes ACTIVE and DROPPING goes, each step naming the incarnation; a
follower proposes nothing; a round is bounded and takes the oldest change first; a step that
lost a race to another leader changes nothing."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

from coordinator.core.commands import (
    ActivatePipeline,
    Command,
    DropPipeline,
    ForgetPipeline,
    Ok,
    PausePipeline,
    Rejected,
)
from coordinator.core.model import PipelineName, PipelineState
from coordinator.core.state import ClusterState, apply
from coordinator.service.pipeline_duty import STEPS_PER_ROUND_MAX, PipelineDuty, leader_steps
from shared.errors import RequestError
from tests.unit.test_core_pipelines import cluster, create


class FakeNode:
    """The node as the duty sees it: the state, leadership, and commit through apply."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.is_ready_leader = True
        self.halted: str | None = None
        self.node_id = "n1"
        self.proposed: list[Command] = []
        self._ids = itertools.count()

    @contextlib.contextmanager
    def read(self) -> Iterator[ClusterState]:
        yield self.state

    async def submit(self, command: Any, request_id: str | None = None) -> Any:
        self.proposed.append(command)
        result = apply(self.state, request_id or f"d-{next(self._ids)}", command)
        if isinstance(result, Rejected):
            raise RequestError(result.message, code=result.code, field=result.field)
        assert isinstance(result, Ok)
        return result.value

    def leader_info(self) -> Any:
        raise AssertionError("not used")


_creates = itertools.count()


def created(s: ClusterState, name: str, now_ms: int = 100) -> int:
    result = apply(s, f"c-{next(_creates)}", create(name, now_ms=now_ms))
    assert isinstance(result, Ok)
    return s.pipelines[PipelineName(name)].incarnation


async def test_creating_becomes_active_and_dropping_goes() -> None:
    s = cluster()
    first = created(s, "a")
    created(s, "b")
    node = FakeNode(s)
    duty = PipelineDuty(node)  # type: ignore[arg-type]
    assert await duty.step() == 2
    assert {p.state for p in s.pipelines.values()} == {PipelineState.ACTIVE}
    assert node.proposed[0] == ActivatePipeline(
        name=PipelineName("a"), incarnation=first, now_ms=node.proposed[0].now_ms
    )
    assert await duty.step() == 0  # nothing left: no command proposed
    assert len(node.proposed) == 2

    apply(s, "drop-a", DropPipeline(name=PipelineName("a"), purge=True, by="x", now_ms=200))
    apply(s, "pause-b", PausePipeline(name=PipelineName("b"), by="x", now_ms=200))
    assert await duty.step() == 1
    assert isinstance(node.proposed[-1], ForgetPipeline)
    assert set(s.pipelines) == {"b"} and s.pipelines[PipelineName("b")].state.value == "paused"


async def test_a_follower_or_a_halted_node_proposes_nothing() -> None:
    s = cluster()
    created(s, "a")
    node = FakeNode(s)
    duty = PipelineDuty(node)  # type: ignore[arg-type]
    node.is_ready_leader = False
    assert await duty.step() == 0
    node.is_ready_leader, node.halted = True, "met command-set version 9"
    assert await duty.step() == 0
    assert node.proposed == []


async def test_a_step_a_previous_leader_already_made_changes_nothing() -> None:
    s = cluster()
    incarnation = created(s, "a")
    step = ActivatePipeline(name=PipelineName("a"), incarnation=incarnation, now_ms=5)
    assert isinstance(apply(s, "old-leader", step), Ok)
    again = apply(s, "new-leader", step)
    assert isinstance(again, Ok) and again.value.changed is False  # type: ignore[union-attr]


async def test_a_step_of_a_dropped_incarnation_never_lands_on_a_namesake() -> None:
    s = cluster()
    old = created(s, "a")
    late = ActivatePipeline(name=PipelineName("a"), incarnation=old, now_ms=5)
    apply(s, "drop", DropPipeline(name=PipelineName("a"), purge=False, by="x", now_ms=6))
    apply(s, "forget", ForgetPipeline(name=PipelineName("a"), incarnation=old, now_ms=7))
    assert created(s, "a", now_ms=8) != old
    refused = apply(s, "late", late)
    assert isinstance(refused, Rejected) and refused.field == "incarnation"
    assert s.pipelines[PipelineName("a")].state is PipelineState.CREATING


def test_a_round_is_bounded_and_takes_the_oldest_change_first() -> None:
    s = cluster()
    for i in range(STEPS_PER_ROUND_MAX + 5):
        created(s, f"p{i:03d}", now_ms=10_000 - i)  # the last made is the oldest change
    steps = leader_steps(s, 1, STEPS_PER_ROUND_MAX)
    assert len(steps) == STEPS_PER_ROUND_MAX
    assert steps[0].name == f"p{STEPS_PER_ROUND_MAX + 4:03d}"
    assert PipelineName("p000") not in {step.name for step in steps}  # the youngest waits
