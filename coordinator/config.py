"""Cluster configuration: every key of the cluster file and its default (the one home of
each default: the planner's settings derive from these, coordinator/planner_config.py).

The file is read by coordinator/config_file.py, the keys are checked by
coordinator/config_rules.py, and addresses are parsed by coordinator/addresses.py.

Precedence, lowest to highest: built-in default < TOML file < `RIPPLE_<KEY>` environment
variable < command-line flag. The node list (`[[nodes]]`) comes from the file only. Every
bound the coordinator enforces is a named key here, so an operator can see and change it.

The worker timings follow `heartbeat_timeout_s` unless set: `heartbeat_interval_s` =
timeout / 6, `suspect_after_s` = timeout / 2, `lease_s` = timeout * 2 / 3,
`rejoin_grace_s` = timeout * 2 and `load_stale_s` = timeout / 2 (5, 15, 20, 60 and 15 s at
the default 30 s). So changing the one
timeout alone gives a valid set (up to a sixth of `worker_token_lifetime_s`, 600 s at its
default: a rejoining worker's saved token must outlast timeout + grace), and the order the
validation demands (interval < lease < timeout, suspect < timeout) holds.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.addresses import Network
from coordinator.core.placement import DEFAULT_VIRTUAL_NODES
from coordinator.core.weighted import BALANCE_TOLERANCE_DEFAULT
from replication import settings as rs
from shared.errors import ConfigError

__all__ = ["DERIVED_TIMINGS", "ClusterConfig", "NodeSpec", "per_worker_migrations"]


def per_worker_migrations(max_concurrent_migrations: int) -> int:
    """max_migrations_per_worker when it is not set: half the cluster's cap, rounded up."""
    return max(1, math.ceil(max_concurrent_migrations / 2))


# Unset worker timings are these fractions of `heartbeat_timeout_s` (see the module doc).
DERIVED_TIMINGS = {
    "heartbeat_interval_s": 1 / 6,
    "suspect_after_s": 1 / 2,
    "lease_s": 2 / 3,
    # How long the leader holds the partitions of a worker that said it is restarting. Twice
    # the timeout: a restart that never comes back costs one timeout more than a crash, and
    # one that does (a process restart, a pod rescheduled with its volume) fits with room.
    "rejoin_grace_s": 2.0,
    # How old a partition's reported load may be before placement balances counts instead:
    # three heartbeat intervals, so one or two late heartbeats do not flip the placement.
    "load_stale_s": 1 / 2,
}
# "Not set": NaN cannot come from a file, the environment or a flag (`_coerce` refuses
# non-finite numbers), so it cannot be mistaken for a value an operator chose.
_UNSET = math.nan


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    id: str  # the node's name: --node-id, and how the CLI and the logs call it
    raft: str  # host:port the other nodes dial for Raft; also this node's Raft identity
    http: str  # host:port of the HTTP API (bound exactly here)
    # Where the Raft port listens when it differs from `raft` (a port mapping, a proxy in
    # front of the node). Unset: `raft` itself is bound.
    raft_bind: str | None = None
    # https when the cluster file gives tls_cert (ClusterConfig sets it; not a file key).
    scheme: str = "http"

    @property
    def raft_listen(self) -> str:
        return self.raft_bind or self.raft

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.http}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    # Required, at least 16 characters, the same on every node: the root of every key (the Raft
    # password and the worker and call token keys are derived from it with HKDF under separate
    # labels, docs/security.md). Changing it invalidates every token.
    cluster_secret: str = ""
    # Required, at least 16 characters: the bearer token of the admin endpoints (POST /v1/admin/*, a
    # drain).
    admin_token: str = ""
    # POST /v1/workers needs `Authorization: Bearer <join_token>` (or the admin token): only
    # holders can register a worker. A node refuses to start without one unless
    # open_registration says that anyone who reaches the HTTP port may register.
    join_token: str = ""
    # true: no join token, anyone who reaches the HTTP port may register a new worker id (live ids
    # still need their own token or the admin token).
    open_registration: bool = False
    # How long a worker token is good for; every heartbeat renews it. Longer than
    # heartbeat_timeout_s, so a token never runs out under a worker the cluster deems alive.
    worker_token_lifetime_s: float = 3600.0
    # Binding the Raft or HTTP port to every interface (0.0.0.0, ::, 0) is refused unless
    # this says so: the ports are meant for the cluster's own network only.
    allow_wildcard_bind: bool = False
    # The pipeline's object store, exactly the URI the workers get as --store
    # (file:///dir or s3://bucket/prefix). The coordinator records a checkpoint reference
    # only when it is the canonical object for its (partition, epoch, offset) under it;
    # empty: every checkpoint reference is fenced (nothing can be checked).
    store: str = ""
    # Comma-separated networks (CIDR) a worker's registered address must be in, e.g.
    # "10.0.0.0/8, fd00::/8"; the host must then be an IP literal. Empty: any host.
    worker_networks: str = ""
    # TLS for HTTP (off when tls_cert is empty): this node's certificate chain and key
    # (PEM), and the CA bundle that the leader's calls to workers and the CLI verify servers
    # against (empty: the system's roots). With a certificate every node URL is https://.
    tls_cert: str = ""
    # The PEM private key of tls_cert (both or neither).
    tls_key: str = ""
    # The CA bundle the leader verifies https:// workers against, and the CLI the coordinators
    # (empty: the system's roots).
    tls_ca: str = ""
    # Partitions the first leader's Bootstrap creates (1..1,000,000). Fixed afterwards except by
    # `ripple rescale`: a different value in the file later is logged and ignored.
    total_partitions: int = 128
    # No partition is assigned until this many workers are ACTIVE.
    min_cluster_size: int = 1
    # The `_UNSET` timings are derived from heartbeat_timeout_s in __post_init__.

    # How often a worker heartbeats (told to workers at registration).
    heartbeat_interval_s: float = _UNSET
    # A worker silent this long is SUSPECTED: calls to it pause and placement gives it nothing new.
    suspect_after_s: float = _UNSET
    # A worker silent this long is declared DEAD and its partitions are reassigned; the other worker
    # timings follow it unless set.
    heartbeat_timeout_s: float = 30.0
    # Told to workers at registration: a worker without a successful heartbeat for this long pauses
    # its gates, before its partitions can move (heartbeat_interval_s < lease_s <
    # heartbeat_timeout_s).
    lease_s: float = _UNSET
    # A worker that announced a restart (POST /v1/workers/{id}/restarting) keeps its
    # partitions this long: no death verdict, no reassignment, no balance move of them; back
    # within it (re-registered with its own token) it gets them again under new epochs.
    rejoin_grace_s: float = _UNSET
    # How often the leader asks each worker to checkpoint.
    checkpoint_interval_s: float = 10.0
    # Load-aware placement (docs/design.md §4): how far from the mean, as a fraction of it,
    # a worker's load (the summed input rates of its partitions) may be before partitions
    # move; and how old a partition's reported load may be before placement balances counts.
    balance_tolerance: float = BALANCE_TOLERANCE_DEFAULT
    # How old a partition's reported load may be before placement balances counts instead (>
    # heartbeat_interval_s).
    load_stale_s: float = _UNSET
    # DEAD and LEFT workers leave the replicated state this long after they departed, so
    # the state, its snapshots and a node's catch-up hold the live workers plus those
    # departed within it, however many ids come and go (0: kept for ever). A retired id may
    # register again, as a new incarnation (coordinator/core/retirement.py).
    retire_after_s: float = 3600.0
    # Node state lives in <data_dir>/<node id>/.
    data_dir: str = "./ripple-data"
    # balanced (sticky: by load when every partition's load is fresh, else counts differ by at most
    # one) or hash_ring.
    placement_strategy: str = "balanced"
    # Virtual nodes per worker for the hash_ring strategy.
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    # true: when everything is ONLINE and idle, the leader plans balancing moves by itself.
    rebalance_on_join: bool = False
    # Migrations releasing or handed off at once in the cluster (a move throttle; a warm-up holds no
    # slot): a fixed number, because the store's reads and the leader's calls it bounds do not grow
    # with the workers.
    max_concurrent_migrations: int = 8
    # Migrations releasing or handed off with any one worker as source or target (the move
    # throttle, coordinator/core/throttle.py). 0 (unset): half of max_concurrent_migrations,
    # rounded up, so one worker's drain or a new worker's fill leaves room for moves elsewhere
    # and no worker loads or checkpoints more partitions at once than half the cluster's
    # budget. Failure recovery is not a migration and is never held back by either cap.
    max_migrations_per_worker: int = 0
    # Warm hand-offs (docs/design.md §4): a move's target loads the checkpoint and follows
    # the source log while the source still serves; the source releases once the target is
    # within warmup_lag_records_max records of the log's end, or cold after
    # warmup_timeout_s. At most warmups_max warm-ups in the cluster, warmups_per_worker_max
    # into one worker. false: every move is cold.
    warm_moves: bool = True
    # How long the source keeps serving while its target warms up before the move goes on cold.
    warmup_timeout_s: float = 60.0
    # Warm: the target's copy is at most this many records behind the source log's end.
    warmup_lag_records_max: int = 10_000
    # Warm-ups in flight in the cluster.
    warmups_max: int = 8
    # Warm-ups in flight into one worker.
    warmups_per_worker_max: int = 2
    # Not read by the coordinator nor the workers (workers take --max-keys-per-partition).
    max_keys_per_partition: int = 2000
    # The HTTP request body limit (413 above it).
    body_bytes_max: int = 1_048_576
    # The HTTP front door (coordinator/service/front.py): workers' heartbeats, registrations
    # and checkpoint acks read and answered on a lean HTTP/1.1 path, every other request
    # through aiohttp. false: every request through aiohttp (the same answers, more CPU each).
    http_front_door: bool = True
    # Workers' registrations, heartbeats and restart notices in flight at once; its own
    # bound, never shared with reads or writes (503 overloaded above it).
    liveness_in_flight_max: int = 4096
    # Checkpoint acks and other writes in flight at once (503 overloaded above it).
    writes_in_flight_max: int = 1024
    # GET views, /metrics and dashboard reads in flight at once (503 overloaded above it).
    reads_in_flight_max: int = 64
    # Reads are answered 503 overloaded while the event loop runs later than this.
    reads_shed_lag_s: float = 0.1
    # Writes other than liveness are answered 503 overloaded while the loop is this late.
    writes_shed_lag_s: float = 1.0
    # The Retry-After of a 503 overloaded answer.
    overload_retry_after_s: int = 1
    # Partitions one heartbeat may report (400 above it).
    heartbeat_partitions_max: int = 100_000
    # The wait for one proposal to commit, and for a consistent read's barrier.
    propose_timeout_s: float = 5.0
    # Extra attempts, under the same request id, after an unknown outcome.
    propose_retries_max: int = 3
    # First retry delay of host and release calls to workers (jittered, doubling).
    host_retry_base_ms: int = 200
    # The cap of that delay; also how often a stuck partition is offered again.
    host_retry_cap_ms: int = 5_000
    # The fallback chain (docs/architecture.md): host failures in a row with
    # checkpoint_unavailable before the leader falls back to an older checkpoint, and whether
    # it may end in a full replay from offset 0 (true: ripple's source log never truncates;
    # set false for a source with retention, then the chain ends in a `stuck` partition).
    fallback_after_failures: int = 3
    # Whether the fallback chain (fallback_after_failures) may end in a full replay from 0.
    full_replay_fallback: bool = True
    # Total timeout of one call from the leader to a worker; a warm call asks the target to hold its
    # answer for up to half of it (at most 10 s).
    worker_call_timeout_s: float = 5.0
    # Raft's timing and log compaction: replication/settings.py's defaults, in one place.

    # pysyncobj's raftMinTimeout: the election timeout's lower bound.
    raft_min_timeout_s: float = rs.RAFT_MIN_TIMEOUT_S_DEFAULT
    # pysyncobj's raftMaxTimeout: the election timeout's upper bound.
    raft_max_timeout_s: float = rs.RAFT_MAX_TIMEOUT_S_DEFAULT
    # pysyncobj's appendEntriesPeriod: the leader's heartbeat to followers.
    append_entries_period_s: float = rs.APPEND_ENTRIES_PERIOD_S_DEFAULT
    # pysyncobj's leaderFallbackTimeout: a leader cut off from the majority steps down after this.
    leader_fallback_timeout_s: float = rs.LEADER_FALLBACK_TIMEOUT_S_DEFAULT
    # A leader whose median journal sync of the last three exceeds this hands its leadership to
    # an up-to-date follower (every write and heartbeat waits on its syncs); 0 turns it off.
    leader_sync_slow_ms: int = rs.LEADER_SYNC_SLOW_MS_DEFAULT
    # After such a step-down the node stands for no election until its syncs have been under
    # leader_sync_slow_ms for this long.
    leader_sync_cooldown_s: float = rs.LEADER_SYNC_COOLDOWN_S_DEFAULT
    # pysyncobj's log compaction trigger, in entries.
    log_compaction_min_entries: int = rs.LOG_COMPACTION_MIN_ENTRIES_DEFAULT
    # pysyncobj's log compaction trigger, in seconds.
    log_compaction_min_time_s: float = rs.LOG_COMPACTION_MIN_TIME_S_DEFAULT
    # /metrics exports per-partition series (checkpoint age, lag) only up to this many
    # partitions; past it, only cluster-wide aggregates (bounded scrape size).
    metrics_partition_series_max: int = 1024
    # The Raft port (replication/transport.py, docs/operations.md): the largest frame a peer
    # may send, how long a new connection has to prove the cluster secret, the silence after
    # which a link is dropped, and how many connections may be mid-handshake at once.
    raft_frame_bytes_max: int = rs.FRAME_BYTES_MAX_DEFAULT
    # A new Raft connection must prove the cluster secret within this, or it is closed.
    raft_handshake_timeout_s: float = rs.HANDSHAKE_TIMEOUT_S_DEFAULT
    # A Raft link that received nothing for this long is closed and redialled (keep-alives go every
    # third of it); also pysyncobj's connectionTimeout.
    raft_idle_timeout_s: float = rs.CONNECTION_TIMEOUT_S_DEFAULT
    # Raft connections in the handshake at once; one more evicts the oldest.
    raft_unauthenticated_connections_max: int = rs.UNAUTHENTICATED_MAX_DEFAULT
    # The lowest Raft transport version this node talks at (2 or 3). 2 lets a node of the
    # previous release in during a rolling upgrade; raise it to 3 once every node runs this
    # one (docs/runbooks/rolling-upgrade.md).
    raft_transport_version_min: int = 2
    # The highest (2 or 3): 2 makes this node speak exactly as a node of the previous release
    # (a plain version-2 handshake), for upgrade drills and tests; set for one node
    # (RIPPLE_RAFT_TRANSPORT_VERSION_MAX, --raft-transport-version-max).
    raft_transport_version_max: int = 3
    # Online membership changes (docs/runbooks/replace-a-node.md): how long a new node may
    # take to catch up with the leader's log before its addition is given up.
    membership_catch_up_timeout_s: float = 120.0
    # Group commit (replication/group_commit.py, docs/operations.md): how many commands and
    # bytes one log entry may carry (entries_max = 1 turns group commit off), how many such
    # entries may be in flight at once, and how many proposals and bytes may wait for a slot
    # (past either bound a write answers 503 with Retry-After).
    group_commit_entries_max: int = rs.GROUP_COMMIT_ENTRIES_MAX_DEFAULT
    # Bytes of commands one batch may carry (a larger single command goes alone); at most
    # raft_frame_bytes_max / 4.
    group_commit_bytes_max: int = rs.GROUP_COMMIT_BYTES_MAX_DEFAULT
    # Batches proposed and not yet committed at once.
    group_commit_in_flight_max: int = rs.GROUP_COMMIT_IN_FLIGHT_MAX_DEFAULT
    # Commands waiting for a batch; one more answers 503 with Retry-After.
    proposals_queued_max: int = rs.PROPOSALS_QUEUED_MAX_DEFAULT
    # Bytes of commands waiting for a batch; past it, 503 likewise.
    proposals_queued_bytes_max: int = rs.PROPOSALS_QUEUED_BYTES_MAX_DEFAULT
    # Durable acknowledgements (docs/operations.md#data-directory-and-durability): a write is
    # acknowledged only once a majority has synced it to disk. false, for throwaway clusters
    # only: nothing is synced, and a power cut of a majority can lose acknowledged writes.
    fsync: bool = True
    # Caps the command-set versions this node speaks and advertises (0: every version this
    # release speaks, coordinator/core/versions.py). A node held below the newest refuses
    # newer commands as a node of an older release would: for upgrade drills and tests, set
    # for one node (RIPPLE_COMMAND_SET_VERSION_MAX, --command-set-version-max).
    command_set_version_max: int = 0
    # The largest backup a node serves (GET /v1/admin/backup): its state's snapshot is held
    # in memory while it is sent, so this bounds the memory one backup takes.
    backup_bytes_max: int = 1024 * 1024 * 1024
    nodes: tuple[NodeSpec, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for key, fraction in DERIVED_TIMINGS.items():
            if math.isnan(getattr(self, key)):
                # Frozen: __post_init__ is the one place a derived value may be filled in.
                object.__setattr__(self, key, self.heartbeat_timeout_s * fraction)
        if self.max_migrations_per_worker == 0:
            derived = per_worker_migrations(self.max_concurrent_migrations)
            object.__setattr__(self, "max_migrations_per_worker", derived)
        # With a certificate every node URL (redirects, CLI, workers) is https://.
        scheme = "https" if self.tls_cert else "http"
        if any(n.scheme != scheme for n in self.nodes):
            nodes = tuple(dataclasses.replace(n, scheme=scheme) for n in self.nodes)
            object.__setattr__(self, "nodes", nodes)

    def check_can_serve(self) -> None:
        """What a coordinator node needs beyond `validate` (clients reading the same file do
        not): a registration credential, or an explicit statement that there is none."""
        if not self.join_token and not self.open_registration:
            raise ConfigError(
                "join_token is required (at least 16 characters): registering a worker needs "
                "it; set open_registration = true to let anyone who reaches the HTTP port "
                "register",
                field="join_token",
            )

    def worker_network_list(self) -> tuple[Network, ...]:
        """`worker_networks` parsed; ValueError on anything that is not a network."""
        return tuple(
            ipaddress.ip_network(part.strip(), strict=False)
            for part in self.worker_networks.split(",")
            if part.strip()
        )

    def node(self, node_id: str) -> NodeSpec:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise ConfigError(f"node {node_id!r} is not in the cluster config", field="node_id")

    def node_by_raft(self, raft_addr: str) -> NodeSpec | None:
        for n in self.nodes:
            if n.raft == raft_addr:
                return n
        return None

    def node_dir(self, node_id: str) -> Path:
        return Path(self.data_dir) / node_id
