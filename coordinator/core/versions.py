"""Command-set versions: the version each command belongs to, what a node speaks, and what a
cluster may propose (docs/design.md §2, §10).

Owns the version table and the gate. A command tag belongs to the command-set version that
introduced it, for ever. A node speaks a range of versions (`VersionRange`) and records it in
the replicated state (`ReportVersions`); the leader raises the state's finalized version
(`FinalizeVersion`) to the highest version every voter speaks, and nothing lowers it.
Invariant: a command is proposed only when its version is at most the finalized one
(`refusal`), and `apply` rejects one above it alike, so in a correct cluster no replica meets
a command it does not speak; one that does stops applying (`coordinator/core/machine.py`).

Version 1 is the first numbered set: the fifteen commands of release 0.1.0 (which numbered
none and advertised nothing) and the two through which nodes advertise and finalize
versions. Version 2 adds RecordBackup; version 3 MaintenanceOn, MaintenanceOff,
RetireWorkers and StartWarm (warm hand-offs); version 4 StartRescale, RecordCut,
StatesBuilt and FinishRescale (rescaling); version 5 CreatePipeline, ActivatePipeline,
PausePipeline, ResumePipeline, DropPipeline, ForgetPipeline (pipeline records) and
ProfileWorker (workers that run them); version 6 IssueToken and RevokeToken (tokens
scoped to one pipeline); version 7 StartPipelineRescale, RecordPipelineCut,
PipelineStatesBuilt and FinishPipelineRescale (a recorded pipeline's rescale and spec
update) and the produce role of IssueToken (`ROLE_INTRODUCED_IN`: a value inside a command
is versioned like a tag, so no node meets a role it cannot decode). A cluster finalized
below 5 holds no pipeline record and runs its
one implicit pipeline, `default`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    COMMAND_BY_TAG,
    ActivatePipeline,
    CreatePipeline,
    DropPipeline,
    FinalizeVersion,
    FinishPipelineRescale,
    FinishRescale,
    ForgetPipeline,
    IssueToken,
    MaintenanceOff,
    MaintenanceOn,
    PausePipeline,
    PipelineStatesBuilt,
    ProfileWorker,
    RecordBackup,
    RecordCut,
    RecordPipelineCut,
    Rejected,
    ReportVersions,
    ResumePipeline,
    RetireWorkers,
    Returns,
    RevokeToken,
    StartPipelineRescale,
    StartRescale,
    StartWarm,
    StatesBuilt,
    rejected,
)
from coordinator.core.model import FIRST_COMMAND_SET_VERSION, NodeVersions, TokenRole

__all__ = [
    "COMMAND_SET_VERSION",
    "INTRODUCED_IN",
    "ROLE_INTRODUCED_IN",
    "SPOKEN",
    "VersionRange",
    "finalizable",
    "refusal",
    "spoken",
    "version_of",
]

COMMAND_SET_VERSION = 7  # the newest version this code speaks

# Tag -> the command-set version that introduced it. Append only: a tag never moves.
INTRODUCED_IN: dict[int, int] = {
    **dict.fromkeys(range(1, 16), 1),  # Bootstrap .. ResetPartition (release 0.1.0's set)
    ReportVersions.TAG: 1,
    FinalizeVersion.TAG: 1,
    RecordBackup.TAG: 2,
    MaintenanceOn.TAG: 3,
    MaintenanceOff.TAG: 3,
    RetireWorkers.TAG: 3,
    StartWarm.TAG: 3,
    StartRescale.TAG: 4,
    RecordCut.TAG: 4,
    StatesBuilt.TAG: 4,
    FinishRescale.TAG: 4,
    CreatePipeline.TAG: 5,
    ActivatePipeline.TAG: 5,
    PausePipeline.TAG: 5,
    ResumePipeline.TAG: 5,
    DropPipeline.TAG: 5,
    ForgetPipeline.TAG: 5,
    ProfileWorker.TAG: 5,
    IssueToken.TAG: 6,
    RevokeToken.TAG: 6,
    StartPipelineRescale.TAG: 7,
    RecordPipelineCut.TAG: 7,
    PipelineStatesBuilt.TAG: 7,
    FinishPipelineRescale.TAG: 7,
}
assert INTRODUCED_IN.keys() == COMMAND_BY_TAG.keys(), "every command tag has a version"

# Token role -> the command-set version that introduced it inside IssueToken. Append only.
ROLE_INTRODUCED_IN: dict[TokenRole, int] = {TokenRole.OPERATE: 6, TokenRole.PRODUCE: 7}
assert ROLE_INTRODUCED_IN.keys() == set(TokenRole), "every token role has a version"
assert max(*INTRODUCED_IN.values(), *ROLE_INTRODUCED_IN.values()) == COMMAND_SET_VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionRange:
    """The command-set versions a node speaks: it applies every command of each of them."""

    min_version: int
    max_version: int

    def __str__(self) -> str:
        return f"{self.min_version}..{self.max_version}"


SPOKEN = VersionRange(min_version=FIRST_COMMAND_SET_VERSION, max_version=COMMAND_SET_VERSION)


def spoken(cap: int) -> VersionRange:
    """What a node held at `cap` speaks (0: no cap, every version this code knows). A node
    held below the newest version speaks and advertises only up to `cap`, and refuses newer
    commands as a node of an older release would (a drill, and the mixed-version tests)."""
    if cap == 0:
        return SPOKEN
    if not FIRST_COMMAND_SET_VERSION <= cap <= COMMAND_SET_VERSION:
        raise ValueError(f"command-set version cap {cap} is outside {SPOKEN} (0 for no cap)")
    return VersionRange(min_version=FIRST_COMMAND_SET_VERSION, max_version=cap)


def version_of(command: Returns[Any]) -> int:
    """The command-set version `command` needs: the one that introduced its tag, or a later
    one that introduced a value it carries (an IssueToken's role)."""
    version = INTRODUCED_IN[command.TAG]
    if isinstance(command, IssueToken):
        version = max(version, ROLE_INTRODUCED_IN[command.role])
    return version


def describe(node_id: str, record: NodeVersions | None) -> str:
    if record is None:
        return f"{node_id} has not reported its versions"
    return (
        f"{node_id} speaks {record.min_version}..{record.max_version} "
        f"(ripple {record.package_version})"
    )


def speaks(record: NodeVersions | None, version: int) -> bool:
    return record is not None and record.min_version <= version <= record.max_version


def refusal(state: ClusterState, name: str, version: int, voters: Sequence[str]) -> Rejected | None:
    """Why a command called `name` of command-set `version` may not be proposed now, or None.
    A voter that does not speak the version is named (409: upgrade it first); when every
    voter speaks it, the leader finalizes it within a moment (503: retry)."""
    finalized = state.finalized_version
    if version <= finalized:
        return None
    behind = [v for v in voters if not speaks(state.node_versions.get(v), version)]
    if behind:
        return rejected(
            "version_unsupported",
            f"{name} needs command-set version {version} and the cluster is finalized at "
            f"{finalized}: "
            + "; ".join(describe(v, state.node_versions.get(v)) for v in behind)
            + ". Upgrade it and retry",
            "command_set_version",
        )
    return rejected(
        "version_not_finalized",
        f"{name} needs command-set version {version}: every voter speaks it, and the leader "
        f"finalizes it shortly (the cluster is at {finalized})",
        "command_set_version",
    )


def finalizable(state: ClusterState, voters: Sequence[str], leader: VersionRange) -> int | None:
    """The version the leader should finalize now: the highest that every voter (itself
    among them) speaks, when that is above the finalized one; None otherwise (a voter has not
    reported, or nothing newer is spoken by all)."""
    records = [state.node_versions.get(v) for v in voters]
    if not records:
        return None
    top = leader.max_version
    for record in records:
        if record is None:
            return None
        top = min(top, record.max_version)
    if top <= state.finalized_version:
        return None
    if not all(speaks(r, top) for r in records):
        return None
    return top
