"""The cluster config's rules: `validate` names the first bad setting and the rule it breaks.

Owns every constraint between keys of `coordinator/config.py` (its keys and defaults) and
every bound a key must stay within, so a node stops at start with a `ConfigError` naming
the key instead of failing later inside Raft, placement or a worker's token.
"""

from __future__ import annotations

from coordinator.addresses import check_bind, split_host_port
from coordinator.config import ClusterConfig
from coordinator.core.versions import COMMAND_SET_VERSION
from replication import settings as rs
from shared.checkpoint_ref import store_base
from shared.errors import ConfigError

__all__ = ["BALANCE_TOLERANCE_MAX", "RETIRE_AFTER_S_MAX", "validate"]

# The most a worker's load may exceed the mean (as a fraction of it) before partitions move:
# beyond ten times the mean, load-aware placement would never move anything.
BALANCE_TOLERANCE_MAX = 10.0
# pysyncobj asserts at start that its connection timeout (the Raft idle timeout, default
# replication/settings.py's) is at least the election timeout: the cap keeps them in order.
RAFT_MAX_TIMEOUT_S_MAX = rs.CONNECTION_TIMEOUT_S_DEFAULT

# The longest retention of departed workers: beyond it the state grows with every id as if
# they were never retired.
RETIRE_AFTER_S_MAX = 365 * 86400

# Settings that are a count, a size or a duration: zero or less is never meaningful.
# The timeout comes first: the timings derived from it would otherwise be blamed for it.
_POSITIVE_KEYS = (
    "liveness_in_flight_max",
    "writes_in_flight_max",
    "reads_in_flight_max",
    "reads_shed_lag_s",
    "writes_shed_lag_s",
    "overload_retry_after_s",
    "heartbeat_timeout_s",
    "min_cluster_size",
    "heartbeat_interval_s",
    "suspect_after_s",
    "lease_s",
    "rejoin_grace_s",
    "load_stale_s",
    "checkpoint_interval_s",
    "virtual_nodes",
    "max_concurrent_migrations",
    "warmup_timeout_s",
    "warmups_max",
    "warmups_per_worker_max",
    "max_keys_per_partition",
    "body_bytes_max",
    "heartbeat_partitions_max",
    "propose_timeout_s",
    "host_retry_base_ms",
    "host_retry_cap_ms",
    "fallback_after_failures",
    "worker_call_timeout_s",
    "raft_min_timeout_s",
    "raft_max_timeout_s",
    "append_entries_period_s",
    "leader_fallback_timeout_s",
    "log_compaction_min_time_s",
    "metrics_partition_series_max",
    "raft_handshake_timeout_s",
    "raft_idle_timeout_s",
    "raft_unauthenticated_connections_max",
    "group_commit_entries_max",
    "group_commit_bytes_max",
    "group_commit_in_flight_max",
    "proposals_queued_max",
    "proposals_queued_bytes_max",
    "membership_catch_up_timeout_s",
    "backup_bytes_max",
)


def validate(cfg: ClusterConfig) -> None:
    """Raise ConfigError naming the first bad setting and the rule it breaks."""
    if len(cfg.cluster_secret) < 16:
        raise ConfigError(
            "cluster_secret is required (at least 16 characters): it encrypts Raft "
            "traffic and signs worker tokens",
            field="cluster_secret",
        )
    if len(cfg.admin_token) < 16:
        raise ConfigError("admin_token is required (at least 16 characters)", field="admin_token")
    if cfg.join_token and len(cfg.join_token) < 16:
        raise ConfigError("join_token, when set, needs at least 16 characters", field="join_token")
    if not cfg.heartbeat_timeout_s < cfg.worker_token_lifetime_s <= 7 * 86400:
        raise ConfigError(
            f"worker_token_lifetime_s = {cfg.worker_token_lifetime_s}: must be > "
            f"heartbeat_timeout_s = {cfg.heartbeat_timeout_s} and <= 604800 (a week)",
            field="worker_token_lifetime_s",
        )
    if cfg.heartbeat_timeout_s + cfg.rejoin_grace_s > cfg.worker_token_lifetime_s / 2:
        # A heartbeat renews the token once half its lifetime is gone, so a stopped
        # worker's saved token has at least half left, less the silence before it
        # stopped (at most the timeout): it must still be good when the worker rejoins.
        raise ConfigError(
            f"rejoin_grace_s = {cfg.rejoin_grace_s}: heartbeat_timeout_s + rejoin_grace_s "
            f"must be <= worker_token_lifetime_s / 2 = {cfg.worker_token_lifetime_s / 2:g} "
            "(a restarted worker proves itself with the token it saved)",
            field="rejoin_grace_s",
        )
    try:
        cfg.worker_network_list()
    except ValueError as exc:
        raise ConfigError(f"worker_networks: {exc}", field="worker_networks") from None
    if bool(cfg.tls_cert) != bool(cfg.tls_key):
        raise ConfigError("tls_cert and tls_key go together", field="tls_cert")
    if cfg.store:
        try:
            store_base(cfg.store)
        except ValueError as exc:
            raise ConfigError(f"store: {exc}", field="store") from None
    if not 1 <= cfg.total_partitions <= 1_000_000:
        raise ConfigError(
            f"total_partitions = {cfg.total_partitions}: must be in 1..1000000",
            field="total_partitions",
        )
    for key in _POSITIVE_KEYS:
        if not getattr(cfg, key) > 0:
            raise ConfigError(f"{key} = {getattr(cfg, key)}: must be > 0", field=key)
    if not 0 <= cfg.command_set_version_max <= COMMAND_SET_VERSION:
        raise ConfigError(
            f"command_set_version_max = {cfg.command_set_version_max}: must be 0 (no "
            f"cap) or a version in 1..{COMMAND_SET_VERSION}",
            field="command_set_version_max",
        )
    if not 0 <= cfg.retire_after_s <= RETIRE_AFTER_S_MAX:
        raise ConfigError(
            f"retire_after_s = {cfg.retire_after_s}: must be 0 (never retire departed "
            f"workers) or a duration up to {RETIRE_AFTER_S_MAX:g} (a year)",
            field="retire_after_s",
        )
    if not 1 <= cfg.max_migrations_per_worker <= cfg.max_concurrent_migrations:
        raise ConfigError(
            f"max_migrations_per_worker = {cfg.max_migrations_per_worker}: must be in "
            f"1..max_concurrent_migrations = {cfg.max_concurrent_migrations} (0 or unset: "
            "half of max_concurrent_migrations)",
            field="max_migrations_per_worker",
        )
    if cfg.warmup_lag_records_max < 0:
        raise ConfigError(
            f"warmup_lag_records_max = {cfg.warmup_lag_records_max}: must be >= 0",
            field="warmup_lag_records_max",
        )
    if cfg.propose_retries_max < 0:
        raise ConfigError(
            f"propose_retries_max = {cfg.propose_retries_max}: must be >= 0",
            field="propose_retries_max",
        )
    if cfg.raft_transport_version_min not in (2, 3):
        raise ConfigError(
            f"raft_transport_version_min = {cfg.raft_transport_version_min}: must be 2 or 3",
            field="raft_transport_version_min",
        )
    if cfg.raft_transport_version_max not in (2, 3):
        raise ConfigError(
            f"raft_transport_version_max = {cfg.raft_transport_version_max}: must be 2 or 3",
            field="raft_transport_version_max",
        )
    if cfg.raft_transport_version_max < cfg.raft_transport_version_min:
        raise ConfigError(
            f"raft_transport_version_max = {cfg.raft_transport_version_max}: must be >= "
            f"raft_transport_version_min ({cfg.raft_transport_version_min})",
            field="raft_transport_version_max",
        )
    _validate_timings(cfg)
    _validate_raft(cfg)
    if cfg.host_retry_cap_ms < cfg.host_retry_base_ms:
        raise ConfigError(
            f"host_retry_cap_ms = {cfg.host_retry_cap_ms}: must be >= host_retry_base_ms "
            f"= {cfg.host_retry_base_ms}",
            field="host_retry_cap_ms",
        )
    if not 0 < cfg.balance_tolerance <= BALANCE_TOLERANCE_MAX:
        raise ConfigError(
            f"balance_tolerance = {cfg.balance_tolerance}: must be > 0 and <= "
            f"{BALANCE_TOLERANCE_MAX:g} (a fraction of the mean load)",
            field="balance_tolerance",
        )
    if cfg.placement_strategy not in ("balanced", "hash_ring"):
        raise ConfigError(
            f"placement_strategy = {cfg.placement_strategy!r}: must be balanced or hash_ring",
            field="placement_strategy",
        )
    _validate_nodes(cfg)


def _validate_timings(cfg: ClusterConfig) -> None:
    t = cfg.heartbeat_timeout_s
    if not cfg.suspect_after_s < t:
        raise ConfigError(
            f"suspect_after_s = {cfg.suspect_after_s}: must be < heartbeat_timeout_s = {t} "
            "(a worker is suspected before it is declared dead; unset, it is "
            "heartbeat_timeout_s / 2)",
            field="suspect_after_s",
        )
    if not cfg.lease_s < t:
        # The lease must expire before the coordinator declares the worker dead, or a
        # paused worker could still process a partition that was given to another.
        raise ConfigError(
            f"lease_s = {cfg.lease_s}: must be < heartbeat_timeout_s = {t} (a cut-off "
            "worker pauses before its partitions move; unset, it is "
            "heartbeat_timeout_s * 2 / 3)",
            field="lease_s",
        )
    if not cfg.heartbeat_interval_s < cfg.lease_s:
        raise ConfigError(
            f"heartbeat_interval_s = {cfg.heartbeat_interval_s}: must be < lease_s = "
            f"{cfg.lease_s} (a worker heartbeats before its lease runs out; unset, it "
            "is heartbeat_timeout_s / 6)",
            field="heartbeat_interval_s",
        )
    if not cfg.load_stale_s > cfg.heartbeat_interval_s:
        raise ConfigError(
            f"load_stale_s = {cfg.load_stale_s}: must be > heartbeat_interval_s = "
            f"{cfg.heartbeat_interval_s} (a load is reported every heartbeat; unset, it "
            "is heartbeat_timeout_s / 2)",
            field="load_stale_s",
        )


def _validate_raft(cfg: ClusterConfig) -> None:
    # pysyncobj asserts these itself with a bare AssertionError; say them here, with the key.
    period = cfg.append_entries_period_s
    if not cfg.raft_min_timeout_s > 3 * period:
        raise ConfigError(
            f"raft_min_timeout_s = {cfg.raft_min_timeout_s}: must be > 3 * "
            f"append_entries_period_s = {3 * period:g}",
            field="raft_min_timeout_s",
        )
    if not cfg.raft_min_timeout_s < cfg.raft_max_timeout_s <= RAFT_MAX_TIMEOUT_S_MAX:
        raise ConfigError(
            f"raft_max_timeout_s = {cfg.raft_max_timeout_s}: must be > "
            f"raft_min_timeout_s = {cfg.raft_min_timeout_s} and <= "
            f"{RAFT_MAX_TIMEOUT_S_MAX} (pysyncobj's connection timeout)",
            field="raft_max_timeout_s",
        )
    if not cfg.leader_fallback_timeout_s > period:
        raise ConfigError(
            f"leader_fallback_timeout_s = {cfg.leader_fallback_timeout_s}: must be > "
            f"append_entries_period_s = {period}",
            field="leader_fallback_timeout_s",
        )
    if cfg.raft_frame_bytes_max < 4 * cfg.body_bytes_max:
        # One entry is about one request body; a 64 KiB batch comes on top.
        raise ConfigError(
            f"raft_frame_bytes_max = {cfg.raft_frame_bytes_max}: must be >= 4 * "
            f"body_bytes_max = {4 * cfg.body_bytes_max}",
            field="raft_frame_bytes_max",
        )
    if 4 * cfg.group_commit_bytes_max > cfg.raft_frame_bytes_max:
        raise ConfigError(
            f"group_commit_bytes_max = {cfg.group_commit_bytes_max}: must be <= "
            f"raft_frame_bytes_max / 4 = {cfg.raft_frame_bytes_max // 4} (a batch "
            "travels in one Raft frame)",
            field="group_commit_bytes_max",
        )
    if cfg.log_compaction_min_entries < 2:
        raise ConfigError(
            f"log_compaction_min_entries = {cfg.log_compaction_min_entries}: must be >= 2",
            field="log_compaction_min_entries",
        )


def _validate_nodes(cfg: ClusterConfig) -> None:
    ids = [n.id for n in cfg.nodes]
    if len(set(ids)) != len(ids):
        raise ConfigError("node ids must be unique", field="nodes")
    for key in ("raft", "http", "raft_listen"):
        addrs = [getattr(n, key) for n in cfg.nodes]
        if len(set(addrs)) != len(addrs):
            raise ConfigError(f"node {key} addresses must be unique", field="nodes")
    for n in cfg.nodes:
        split_host_port(n.raft, "nodes")  # what the peers dial
        for addr in (n.raft_listen, n.http):  # what this node binds
            check_bind(addr, "nodes", allow_wildcard=cfg.allow_wildcard_bind)
