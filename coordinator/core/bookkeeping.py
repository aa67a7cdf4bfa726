"""The apply handlers of the cluster's records about itself: which command-set versions each
coordinator node speaks, the finalized version, and the newest stored backup.

`coordinator/core/state.py`'s `apply` dispatches ReportVersions, FinalizeVersion and
RecordBackup here; like every handler, each validates completely before its one change, and
none touches a worker, partition or migration. Invariants: the finalized version never
decreases, and it rises only to a version every voter named in the command speaks by the
records applied before it; the last backup's applied index never decreases.
"""

from __future__ import annotations

import re

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    BackupResult,
    FinalizeResult,
    FinalizeVersion,
    Ok,
    RecordBackup,
    ReportResult,
    ReportVersions,
    Result,
    rejected,
)
from coordinator.core.model import (
    FIRST_COMMAND_SET_VERSION,
    NODE_VERSIONS_MAX,
    PACKAGE_VERSION_LEN_MAX,
    BackupRecord,
    NodeVersions,
    valid_id,
)
from coordinator.core.versions import describe, speaks

__all__ = ["finalize_version", "record_backup", "report_versions"]

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def report_versions(state: ClusterState, cmd: ReportVersions) -> Result:
    if not valid_id(cmd.node_id):
        return rejected("invalid", "node_id must match [A-Za-z0-9._-]{1,64}", "node_id")
    if not FIRST_COMMAND_SET_VERSION <= cmd.min_version <= cmd.max_version:
        return rejected(
            "invalid",
            f"versions {cmd.min_version}..{cmd.max_version}: need "
            f"{FIRST_COMMAND_SET_VERSION} <= min <= max",
            "min_version",
        )
    if not 1 <= len(cmd.package_version) <= PACKAGE_VERSION_LEN_MAX:
        return rejected(
            "invalid",
            f"package_version must be 1..{PACKAGE_VERSION_LEN_MAX} chars",
            "package_version",
        )
    if cmd.node_id not in state.node_versions and len(state.node_versions) >= NODE_VERSIONS_MAX:
        return rejected("conflict", f"versions of {NODE_VERSIONS_MAX} nodes recorded already")
    state.node_versions[cmd.node_id] = NodeVersions(
        node_id=cmd.node_id,
        min_version=cmd.min_version,
        max_version=cmd.max_version,
        package_version=cmd.package_version,
        reported_at_ms=cmd.now_ms,
    )
    return Ok(value=ReportResult(node_id=cmd.node_id, finalized_version=state.finalized_version))


def finalize_version(state: ClusterState, cmd: FinalizeVersion) -> Result:
    if cmd.version < FIRST_COMMAND_SET_VERSION:
        return rejected("invalid", f"version must be >= {FIRST_COMMAND_SET_VERSION}", "version")
    if not 1 <= len(cmd.voters) <= NODE_VERSIONS_MAX or not all(map(valid_id, cmd.voters)):
        return rejected("invalid", f"voters must be 1..{NODE_VERSIONS_MAX} node ids", "voters")
    if cmd.version <= state.finalized_version:
        return Ok(value=FinalizeResult(finalized_version=state.finalized_version, changed=False))
    behind = [v for v in cmd.voters if not speaks(state.node_versions.get(v), cmd.version)]
    if behind:
        # A voter reported an older range since the leader looked (it was downgraded).
        return rejected(
            "version_unsupported",
            f"cannot finalize command-set version {cmd.version}: "
            + "; ".join(describe(v, state.node_versions.get(v)) for v in behind),
            "voters",
        )
    state.finalized_version = cmd.version
    return Ok(value=FinalizeResult(finalized_version=cmd.version, changed=True))


def record_backup(state: ClusterState, cmd: RecordBackup) -> Result:
    if not valid_id(cmd.cluster_id):
        return rejected("invalid", "cluster_id must match [A-Za-z0-9._-]{1,64}", "cluster_id")
    if _SHA256_HEX.fullmatch(cmd.sha256) is None:
        return rejected("invalid", "sha256 must be 64 lowercase hex digits", "sha256")
    last = state.last_backup
    latest = last is None or cmd.applied_index >= last.applied_index
    if latest:
        state.last_backup = BackupRecord(
            cluster_id=cmd.cluster_id,
            applied_index=cmd.applied_index,
            term=cmd.term,
            sha256=cmd.sha256,
            size_bytes=cmd.size_bytes,
            created_at_ms=cmd.created_at_ms,
            recorded_at_ms=cmd.now_ms,
        )
    return Ok(value=BackupResult(applied_index=cmd.applied_index, latest=latest))
