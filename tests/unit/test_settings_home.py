"""Every default has one home: the cluster config (coordinator/config.py).

The planner's settings (coordinator/core/planner_settings.py) are derived from the config by
`planner_settings`; a field the config sets carries no default of its own in the core, so the
two cannot drift apart (as a retry cap once did: 5 s in the config, 10 s in the planner).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from coordinator.config import ClusterConfig
from coordinator.core.planner_settings import PlannerSettings
from coordinator.core.warmups import WarmPolicy
from coordinator.planner_config import planner_settings

# Each planner field the config sets, and the config key it comes from (seconds -> ms).
FROM_CONFIG = {
    "total_partitions": "total_partitions",
    "min_cluster_size": "min_cluster_size",
    "rebalance_on_join": "rebalance_on_join",
    "max_concurrent_migrations": "max_concurrent_migrations",
    "max_migrations_per_worker": "max_migrations_per_worker",
    "strategy": "placement_strategy",
    "virtual_nodes": "virtual_nodes",
    "suspect_after_ms": "suspect_after_s",
    "dead_after_ms": "heartbeat_timeout_s",
    "rejoin_grace_ms": "rejoin_grace_s",
    "host_retry_base_ms": "host_retry_base_ms",
    "host_retry_cap_ms": "host_retry_cap_ms",
    "checkpoint_interval_ms": "checkpoint_interval_s",
    "fallback_after_failures": "fallback_after_failures",
    "full_replay_fallback": "full_replay_fallback",
    "balance_tolerance": "balance_tolerance",
    "load_stale_ms": "load_stale_s",
    "retire_after_ms": "retire_after_s",
    "warm.enabled": "warm_moves",
    "warm.timeout_ms": "warmup_timeout_s",
    "warm.lag_records_max": "warmup_lag_records_max",
    "warm.in_flight_max": "warmups_max",
    "warm.per_worker_max": "warmups_per_worker_max",
}


def _leaves(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The fields of a settings class, nested settings flattened as `outer.inner`."""
    out: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(cls):
        if f.name == "warm":
            out |= {f"warm.{g.name}": g for g in dataclasses.fields(WarmPolicy)}
        out[f.name] = f
    return out


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _get(settings: PlannerSettings, name: str) -> object:
    value: object = settings
    for part in name.split("."):
        value = getattr(value, part)
    return value


def _changed(value: object) -> object:
    """A valid value other than `value`, of its type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, float):
        return value * 1.5 + 1.25 if value else 7.25
    assert value == "balanced", value
    return "hash_ring"


def _ms_or_same(key: str, value: object) -> object:
    return int(value * 1000) if key.endswith("_s") and isinstance(value, float) else value


def test_a_field_the_config_sets_has_no_default_in_the_core() -> None:
    leaves = _leaves(PlannerSettings)
    for name in FROM_CONFIG:
        assert not _has_default(leaves[name]), f"{name} keeps a default the config also has"
    # And every field without a default is one the config sets (nothing left unmapped).
    unmapped = {n for n, f in leaves.items() if not _has_default(f) and n != "warm"}
    assert unmapped == set(FROM_CONFIG)


def test_the_cores_own_defaults_name_no_config_key() -> None:
    config_keys = {f.name for f in dataclasses.fields(ClusterConfig)}
    own = [n for n, f in _leaves(PlannerSettings).items() if _has_default(f)]
    assert own  # tick_ms, calls_max, retire_batch_max, warm.poll_ms
    for name in own:
        leaf = name.rsplit(".", 1)[-1]
        assert leaf not in config_keys, f"{name} has a default here and a config key"
        assert leaf.removesuffix("_ms") + "_s" not in config_keys, name


@pytest.mark.parametrize("planner_field", sorted(FROM_CONFIG))
def test_planner_settings_carries_every_config_value(planner_field: str) -> None:
    """Changing one config key changes its planner field to that value (in ms where the key
    is in seconds) and no other field but the derived timings that follow it."""
    key = FROM_CONFIG[planner_field]
    base = ClusterConfig()
    new = _changed(getattr(base, key))
    # Derived timings stay put, so only the one key moves (the timeout moves them otherwise).
    pinned = {k: getattr(base, k) for k in ("suspect_after_s", "rejoin_grace_s", "load_stale_s")}
    before = planner_settings(dataclasses.replace(base, **pinned))
    after = planner_settings(dataclasses.replace(base, **{**pinned, key: new}))
    value = _get(after, planner_field)
    expected = _ms_or_same(key, new)
    assert value == expected or getattr(value, "value", None) == expected
    moved = {
        n for n in _leaves(PlannerSettings) if n != "warm" and _get(before, n) != _get(after, n)
    }
    assert moved == {planner_field}


def test_defaults_reach_the_planner_unchanged() -> None:
    """The config's defaults are the leader's: the host retry cap documented as 5 s included."""
    cfg = ClusterConfig()
    settings = planner_settings(cfg)
    for planner_field, key in FROM_CONFIG.items():
        value = _get(settings, planner_field)
        expected = _ms_or_same(key, getattr(cfg, key))
        assert value == expected or getattr(value, "value", None) == expected, planner_field
    assert settings.host_retry_cap_ms == 5_000
    assert math.isclose(settings.dead_after_ms / 1000, cfg.heartbeat_timeout_s)
