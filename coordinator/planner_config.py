"""The planner's settings as the cluster config gives them.

Owns the one mapping from `ClusterConfig` (the operator's keys, seconds, every default) to
the pure core's `PlannerSettings` (milliseconds): the planner's settings carry no default
for a field mapped here, so each default has its one home in `coordinator/config.py`
(tests/unit/test_settings_home.py holds both sides to it).
"""

from __future__ import annotations

from coordinator.config import ClusterConfig
from coordinator.core.placement import PlacementStrategy
from coordinator.core.planner_settings import PlannerSettings
from coordinator.core.warmups import WarmPolicy

__all__ = ["planner_settings"]


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def planner_settings(cfg: ClusterConfig) -> PlannerSettings:
    return PlannerSettings(
        total_partitions=cfg.total_partitions,
        min_cluster_size=cfg.min_cluster_size,
        rebalance_on_join=cfg.rebalance_on_join,
        max_concurrent_migrations=cfg.max_concurrent_migrations,
        max_migrations_per_worker=cfg.max_migrations_per_worker,
        strategy=PlacementStrategy(cfg.placement_strategy),
        virtual_nodes=cfg.virtual_nodes,
        suspect_after_ms=_ms(cfg.suspect_after_s),
        dead_after_ms=_ms(cfg.heartbeat_timeout_s),
        rejoin_grace_ms=_ms(cfg.rejoin_grace_s),
        host_retry_base_ms=cfg.host_retry_base_ms,
        host_retry_cap_ms=cfg.host_retry_cap_ms,
        checkpoint_interval_ms=_ms(cfg.checkpoint_interval_s),
        fallback_after_failures=cfg.fallback_after_failures,
        full_replay_fallback=cfg.full_replay_fallback,
        warm=WarmPolicy(
            enabled=cfg.warm_moves,
            timeout_ms=_ms(cfg.warmup_timeout_s),
            lag_records_max=cfg.warmup_lag_records_max,
            in_flight_max=cfg.warmups_max,
            per_worker_max=cfg.warmups_per_worker_max,
        ),
        balance_tolerance=cfg.balance_tolerance,
        load_stale_ms=_ms(cfg.load_stale_s),
        retire_after_ms=_ms(cfg.retire_after_s),
    )
