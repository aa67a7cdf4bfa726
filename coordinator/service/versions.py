"""Keeping the replicated version records true: this node's own, and on the leader the
cluster's finalized command-set version (docs/design.md §10).

Owns `VersionDuty`, a task every node runs beside its HTTP server. Every CHECK_INTERVAL_S it
reads the applied state: when this node's record is missing or says other than what the node
speaks and runs (at its first start, after an upgrade, in a restored cluster) it proposes
ReportVersions (a follower's proposal travels to the leader through Raft); on the ready
leader, once every voter speaks a version above the finalized one
(`coordinator/core/versions.finalizable`), it proposes FinalizeVersion. A proposal that fails
is tried again on the next round. What may be proposed is decided elsewhere, by the gate in
`CoordinatorNode.submit`; a halted node proposes nothing.
"""

from __future__ import annotations

import logging

from coordinator.core.commands import FinalizeVersion, ReportVersions
from coordinator.core.model import NodeVersions
from coordinator.core.versions import finalizable
from coordinator.service.node_parts import VersionNode
from coordinator.service.periodic import PeriodicDuty
from coordinator.service.stamps import now_ms
from shared.version import PACKAGE_VERSION

__all__ = ["CHECK_INTERVAL_S", "VersionDuty"]

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0


class VersionDuty(PeriodicDuty):
    # A failed round (no leader yet, an election, a write that timed out) is logged at debug
    # (`PeriodicDuty.quiet_level`) and the next one retries.
    interval_s = CHECK_INTERVAL_S

    def __init__(self, node: VersionNode) -> None:
        super().__init__()
        self.node = node

    def _mine_is_true(self, record: NodeVersions | None) -> bool:
        speaks = self.node.speaks
        return (
            record is not None
            and record.min_version == speaks.min_version
            and record.max_version == speaks.max_version
            and record.package_version == PACKAGE_VERSION
        )

    async def step(self) -> None:
        """One round: report this node's versions if its record is not true, then, on the
        ready leader, finalize what every voter speaks."""
        node = self.node
        if node.halted is not None:
            return
        with node.read() as state:
            mine = state.node_versions.get(node.node_id)
        if not self._mine_is_true(mine):
            result = await node.submit(
                ReportVersions(
                    node_id=node.node_id,
                    min_version=node.speaks.min_version,
                    max_version=node.speaks.max_version,
                    package_version=PACKAGE_VERSION,
                    now_ms=now_ms(),
                )
            )
            log.info(
                "node %s reported command-set versions %s (ripple %s); the cluster is "
                "finalized at %d",
                node.node_id,
                node.speaks,
                PACKAGE_VERSION,
                result.finalized_version,
            )
        if not node.is_ready_leader:
            return
        voters = node.voters()
        with node.read() as state:
            target = finalizable(state, voters, node.speaks)
            before = state.finalized_version
        if target is not None:
            done = await node.submit(
                FinalizeVersion(version=target, voters=voters, now_ms=now_ms())
            )
            if done.changed:
                log.warning(
                    "command-set version %d finalized (was %d): every voter speaks it; a node "
                    "of an older release can no longer rejoin",
                    done.finalized_version,
                    before,
                )
