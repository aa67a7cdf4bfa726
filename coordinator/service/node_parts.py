"""The parts of a coordinator node a service takes, as small protocols.

A service names what it needs (read the applied state, propose a command, know who leads)
instead of taking the whole `CoordinatorNode`: the node satisfies each protocol here
structurally, a test passes a small stand-in, and no service module but the composition
root (`coordinator/service/server.py`) imports `coordinator/service/node.py` (an
import-linter contract in pyproject.toml holds it). Each protocol is the union of the small
ones its one user needs; members are read-only properties so a plain attribute fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from coordinator.addresses import Network
from coordinator.config import ClusterConfig, NodeSpec
from coordinator.core.commands import CommandResult, Returns
from coordinator.core.state import ClusterState
from coordinator.core.versions import VersionRange
from coordinator.service.metrics import Metrics
from replication.log import MachineRead, Member, RaftRole, RaftStatus, ReplicatedLog

__all__ = [
    "ApiNode",
    "DutyNode",
    "LeaderInfo",
    "Leadership",
    "Members",
    "MembershipNode",
    "Proposer",
    "Reads",
    "VersionNode",
    "Writes",
]

R = TypeVar("R", bound=CommandResult)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderInfo:
    role: RaftRole
    ready: bool
    leader: NodeSpec | None
    status: RaftStatus


class Reads(Protocol):
    """The applied state, and whether this node is the ready leader (whose reads are
    current; a follower's are stale and say so)."""

    def read(self) -> MachineRead[ClusterState]: ...

    @property
    def is_ready_leader(self) -> bool: ...


class Proposer(Protocol):
    """Commit a command and learn its result (`CoordinatorNode.submit`)."""

    async def submit(self, command: Returns[R], request_id: str | None = None) -> R: ...


class Writes(Reads, Proposer, Protocol):
    """Read the applied state and commit commands against it."""


class Leadership(Reads, Protocol):
    """Who this node is and who leads."""

    @property
    def node_id(self) -> str: ...

    @property
    def halted(self) -> str | None: ...

    def leader_info(self) -> LeaderInfo: ...


class DutyNode(Writes, Protocol):
    """What the leader duties take: read, commit, count, and the settings they plan with."""

    @property
    def node_id(self) -> str: ...

    @property
    def config(self) -> ClusterConfig: ...

    @property
    def metrics(self) -> Metrics: ...

    def leader_info(self) -> LeaderInfo: ...


class VersionNode(Leadership, Proposer, Protocol):
    """What the command-set version records take: this node's versions and the voters."""

    @property
    def speaks(self) -> VersionRange: ...

    def voters(self) -> tuple[str, ...]: ...


class Members(Protocol):
    """The cluster's nodes as this node's log and cluster file name them."""

    @property
    def config(self) -> ClusterConfig: ...

    @property
    def log(self) -> ReplicatedLog: ...

    def spec_of(self, member: Member) -> NodeSpec: ...


class MembershipNode(Members, Protocol):
    """What the leader's membership changes take: the log's reconfiguration and this node."""

    @property
    def spec(self) -> NodeSpec: ...

    @property
    def is_ready_leader(self) -> bool: ...


class ApiNode(VersionNode, Members, Protocol):
    """What the HTTP handlers take (they serve every view and write of the node)."""

    @property
    def spec(self) -> NodeSpec: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def worker_networks(self) -> tuple[Network, ...]: ...

    @property
    def is_voter(self) -> bool: ...

    def voter_nodes(self) -> tuple[NodeSpec, ...]: ...

    def snapshot_at(self) -> tuple[ClusterState, int, int]: ...

    async def barrier(self) -> None: ...
