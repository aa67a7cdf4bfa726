"""Everything one Raft node is configured with, and the checks that refuse an unsafe setting.

Owns `RaftSettings` and its defaults (the tuned timeouts of docs/design.md §2, the group
commit bounds, the Raft port's limits, durable acknowledgements on). Invariant: a node is
never built from settings that fail `validate()`: no cluster secret shorter than
SECRET_BYTES_MIN (Raft traffic and dumps are pickle, and the secret is what keeps strangers
from running code in the node), no wildcard bind address, no missing journal or dump path (a
journal alone loses all state at the first log compaction), no bound below one.
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.group_commit import (
    GROUP_COMMIT_BYTES_MAX_DEFAULT,
    GROUP_COMMIT_ENTRIES_MAX_DEFAULT,
    GROUP_COMMIT_IN_FLIGHT_MAX_DEFAULT,
    PROPOSALS_QUEUED_BYTES_MAX_DEFAULT,
    PROPOSALS_QUEUED_MAX_DEFAULT,
    GroupCommitLimits,
)
from replication.hub import (
    FRAME_BYTES_MAX_DEFAULT,
    HANDSHAKE_TIMEOUT_S_DEFAULT,
    UNAUTHENTICATED_MAX_DEFAULT,
    TransportLimits,
)
from replication.members import Member
from replication.wire import TRANSPORT_VERSION, TRANSPORT_VERSION_MIN

__all__ = [
    "APPEND_ENTRIES_PERIOD_S_DEFAULT",
    "CONNECTION_TIMEOUT_S_DEFAULT",
    "FRAME_BYTES_MAX_DEFAULT",
    "GROUP_COMMIT_BYTES_MAX_DEFAULT",
    "GROUP_COMMIT_ENTRIES_MAX_DEFAULT",
    "GROUP_COMMIT_IN_FLIGHT_MAX_DEFAULT",
    "HANDSHAKE_TIMEOUT_S_DEFAULT",
    "LEADER_FALLBACK_TIMEOUT_S_DEFAULT",
    "LEADER_SYNC_COOLDOWN_S_DEFAULT",
    "LEADER_SYNC_SLOW_MS_DEFAULT",
    "LOG_COMPACTION_MIN_ENTRIES_DEFAULT",
    "LOG_COMPACTION_MIN_TIME_S_DEFAULT",
    "PROPOSALS_QUEUED_BYTES_MAX_DEFAULT",
    "PROPOSALS_QUEUED_MAX_DEFAULT",
    "RAFT_MAX_TIMEOUT_S_DEFAULT",
    "RAFT_MIN_TIMEOUT_S_DEFAULT",
    "SECRET_BYTES_MIN",
    "UNAUTHENTICATED_MAX_DEFAULT",
    "RaftSettings",
]

SECRET_BYTES_MIN = 16
# The tuned timeouts (docs/design.md §2): an election after 0.3-0.6 s of silence, heartbeats
# every 50 ms (pysyncobj requires raft_min_timeout_s > 3 x the period), a leader that hears
# no majority for 2 s steps down. The coordinator's config keys default to these.
RAFT_MIN_TIMEOUT_S_DEFAULT = 0.3
RAFT_MAX_TIMEOUT_S_DEFAULT = 0.6
APPEND_ENTRIES_PERIOD_S_DEFAULT = 0.05
LEADER_FALLBACK_TIMEOUT_S_DEFAULT = 2.0
CONNECTION_TIMEOUT_S_DEFAULT = 1.5  # also the transport's idle timeout
LOG_COMPACTION_MIN_ENTRIES_DEFAULT = 5000
LOG_COMPACTION_MIN_TIME_S_DEFAULT = 300.0
# etcd's "slow fdatasync" warning bound; a sync that slow already stretches a tick past the
# election timeout.
LEADER_SYNC_SLOW_MS_DEFAULT = 1000
LEADER_SYNC_COOLDOWN_S_DEFAULT = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftSettings:
    """Everything one Raft node needs. Timeouts are the tuned values of docs/design.md §2."""

    self_addr: str  # "host:port" this node is known by in `partners` of the others
    # The voters this node starts from (itself left out): the configured nodes, or for a
    # node that joined online the voters it joined. The log's membership entries (and the
    # dump's voter set) take over from there.
    partners: tuple[str, ...]
    bind_addr: str  # explicit "host:port" to bind; never a wildcard by default
    secret: str
    journal_path: str
    dump_path: str
    raft_min_timeout_s: float = RAFT_MIN_TIMEOUT_S_DEFAULT
    raft_max_timeout_s: float = RAFT_MAX_TIMEOUT_S_DEFAULT
    append_entries_period_s: float = APPEND_ENTRIES_PERIOD_S_DEFAULT
    leader_fallback_timeout_s: float = LEADER_FALLBACK_TIMEOUT_S_DEFAULT
    connection_timeout_s: float = CONNECTION_TIMEOUT_S_DEFAULT
    connection_retry_s: float = 0.5
    log_compaction_min_entries: int = LOG_COMPACTION_MIN_ENTRIES_DEFAULT
    log_compaction_min_time_s: float = LOG_COMPACTION_MIN_TIME_S_DEFAULT
    commands_queue_max: int = 10_000
    frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S_DEFAULT
    unauthenticated_connections_max: int = UNAUTHENTICATED_MAX_DEFAULT
    # Group commit. entries_max = 1 turns it off (one log entry per proposal).
    group_commit_entries_max: int = GROUP_COMMIT_ENTRIES_MAX_DEFAULT
    group_commit_bytes_max: int = GROUP_COMMIT_BYTES_MAX_DEFAULT
    group_commit_in_flight_max: int = GROUP_COMMIT_IN_FLIGHT_MAX_DEFAULT
    proposals_queued_max: int = PROPOSALS_QUEUED_MAX_DEFAULT
    proposals_queued_bytes_max: int = PROPOSALS_QUEUED_BYTES_MAX_DEFAULT
    # The name and HTTP address of this node and its partners, by Raft address (a node not
    # listed is known by its address alone until a membership entry names it).
    members: tuple[Member, ...] = ()
    # Not a voter yet (added online, until the entry that adds it reaches its log): it
    # neither starts an election nor votes, so it cannot disrupt the cluster it joins.
    joining: bool = False
    # The cluster this node belongs to: a peer of another cluster is refused at the handshake
    # (a node of an old cluster cannot join one restored from its backup).
    cluster_id: str = ""
    # The Raft transport versions this node talks at (replication.wire): raise the lowest
    # once every node speaks the newer one, so none falls back to the older.
    transport_version_min: int = TRANSPORT_VERSION_MIN
    transport_version_max: int = TRANSPORT_VERSION
    # Durable acknowledgements: an entry counts towards a commit only once synced to disk,
    # and the term/vote record and dump are synced with their directory. False (throwaway
    # clusters only): nothing is synced, and a power cut of a majority can lose acknowledged
    # writes.
    fsync: bool = True
    # A leader whose median journal sync of the last few exceeds this hands its leadership
    # to an up-to-date follower (replication.slow_disk); 0 turns it off.
    leader_sync_slow_ms: int = LEADER_SYNC_SLOW_MS_DEFAULT
    # After that, the node does not stand for leader until its syncs have been under the
    # bound for this long.
    leader_sync_cooldown_s: float = LEADER_SYNC_COOLDOWN_S_DEFAULT

    def transport_limits(self) -> TransportLimits:
        return TransportLimits(
            frame_bytes_max=self.frame_bytes_max,
            handshake_timeout_s=self.handshake_timeout_s,
            idle_timeout_s=self.connection_timeout_s,
            unauthenticated_max=self.unauthenticated_connections_max,
        )

    def group_commit_limits(self) -> GroupCommitLimits:
        return GroupCommitLimits(
            entries_max=self.group_commit_entries_max,
            # A batch travels in one Raft frame with its framing and the message around it
            # (coordinator config refuses a larger setting; this guards other callers).
            bytes_max=min(self.group_commit_bytes_max, self.frame_bytes_max // 4),
            in_flight_max=self.group_commit_in_flight_max,
            queued_max=self.proposals_queued_max,
            queued_bytes_max=self.proposals_queued_bytes_max,
        )

    def validate(self) -> None:
        if len(self.secret.encode()) < SECRET_BYTES_MIN:
            raise ValueError(
                f"cluster secret must be at least {SECRET_BYTES_MIN} bytes: Raft traffic is "
                "pickle, and the secret is what keeps strangers from running code in the node"
            )
        host = self.bind_addr.rsplit(":", 1)[0]
        if host in ("", "0.0.0.0", "::"):
            raise ValueError("bind_addr must name an explicit address, not a wildcard")
        if not self.journal_path or not self.dump_path:
            raise ValueError("both journal_path and dump_path are required")
        self.transport_limits().validate()
        low, high = self.transport_version_min, self.transport_version_max
        if not TRANSPORT_VERSION_MIN <= low <= high <= TRANSPORT_VERSION:
            raise ValueError(
                f"transport versions {low}..{high}: this node speaks "
                f"{TRANSPORT_VERSION_MIN}..{TRANSPORT_VERSION}"
            )
        for name in (
            "group_commit_entries_max",
            "group_commit_bytes_max",
            "group_commit_in_flight_max",
            "proposals_queued_max",
            "proposals_queued_bytes_max",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.leader_sync_slow_ms < 0 or self.leader_sync_cooldown_s < 0:
            raise ValueError("leader_sync_slow_ms and leader_sync_cooldown_s must be >= 0")
