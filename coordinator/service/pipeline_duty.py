"""The leader's two steps of a pipeline's create and drop (docs/design.md §3, "Pipelines").

Owns finishing what a commit point started: a pipeline recorded CREATING is set up and
activated (`ActivatePipeline`), one recorded DROPPING is torn down and forgotten
(`ForgetPipeline`). Each is one command: `ActivatePipeline` adds the pipeline's partitions
to the table and `ForgetPipeline` removes them (the store holds no objects of a pipeline
yet). The work is read from the applied state on every
round, never from memory, so any new leader resumes it: a leader that dies after the commit
point leaves the record as it was, and the next one finds it. Each step names the record's
incarnation, so a deposed leader's late step never lands on a namesake created since, and a
step repeated (two leaders, a retry) is an Ok that changes nothing. Invariant: only the
ready leader proposes, at most `STEPS_PER_ROUND_MAX` commands a round, oldest change first.
"""

from __future__ import annotations

import logging
from typing import Protocol

from coordinator.core.commands import ActivatePipeline, ForgetPipeline
from coordinator.core.model import PipelineState
from coordinator.core.state import ClusterState
from coordinator.service.node_parts import Leadership, Proposer
from coordinator.service.periodic import PeriodicDuty
from coordinator.service.stamps import now_ms

__all__ = ["CHECK_INTERVAL_S", "STEPS_PER_ROUND_MAX", "PipelineDuty", "leader_steps"]

log = logging.getLogger(__name__)

# How often the leader looks for a pipeline to finish: a create answers 202 at its commit
# point, and the pipeline is ACTIVE within about this long.
CHECK_INTERVAL_S = 0.25
# Commands a round proposes at most: a thousand drops at once finish over a few seconds
# instead of holding the log for one round.
STEPS_PER_ROUND_MAX = 64

PipelineStep = ActivatePipeline | ForgetPipeline


class PipelineDutyNode(Leadership, Proposer, Protocol):
    """What the duty takes of the node: who leads, the applied state, and commit."""


def leader_steps(state: ClusterState, now_ms: int, limit: int) -> tuple[PipelineStep, ...]:
    """The steps that finish every create and drop the state records, the oldest change first
    (a steady stream of new creates cannot starve an old drop), at most `limit`."""
    pending = sorted(
        (p for p in state.pipelines.values() if p.state in _STEP_OF),
        key=lambda p: (p.updated_at_ms, p.name),
    )
    return tuple(
        _STEP_OF[p.state](name=p.name, incarnation=p.incarnation, now_ms=now_ms)
        for p in pending[:limit]
    )


_STEP_OF: dict[PipelineState, type[PipelineStep]] = {
    PipelineState.CREATING: ActivatePipeline,
    PipelineState.DROPPING: ForgetPipeline,
}


class PipelineDuty(PeriodicDuty):
    """A task every node runs beside its HTTP server; it acts only while the node is the
    ready leader."""

    # A lost leadership, no quorum, a refusal (the record changed under the step): worth a
    # line, and the next round reads the state again.
    quiet_level = logging.INFO

    def __init__(self, node: PipelineDutyNode, *, interval_s: float = CHECK_INTERVAL_S) -> None:
        super().__init__()
        self.node = node
        self.interval_s = interval_s

    async def step(self) -> int:
        """One round; returns how many steps changed a record."""
        node = self.node
        if node.halted is not None or not node.is_ready_leader:
            return 0
        with node.read() as state:
            steps = leader_steps(state, now_ms(), STEPS_PER_ROUND_MAX)
        changed = 0
        for cmd in steps:
            done = await node.submit(cmd)
            if done.changed:
                changed += 1
                log.info(
                    "pipeline %s incarnation %d: %s",
                    done.name,
                    done.incarnation,
                    "gone" if done.state is None else done.state.value.upper(),
                )
        return changed
