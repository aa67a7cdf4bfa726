"""Planner settings for the pure tests, derived from the cluster config as the leader's are.

The planner's settings have no defaults of their own (coordinator/core/planner_settings.py):
a test starts from the config's defaults with the quicker worker timings these tests are
written against (a worker suspected after 2 s, dead after 5 s, held 10 s when it restarts),
moves cold and nothing retired, and overrides what it is about.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coordinator.config import ClusterConfig
from coordinator.core.planner_settings import PlannerSettings
from coordinator.planner_config import planner_settings

TEST_CONFIG = ClusterConfig(
    heartbeat_timeout_s=5.0,
    suspect_after_s=2.0,
    rejoin_grace_s=10.0,
    load_stale_s=15.0,
    warm_moves=False,
    retire_after_s=0.0,
)


def quick_settings(**overrides: Any) -> PlannerSettings:
    """TEST_CONFIG's planner settings with `overrides` (PlannerSettings' own field names)."""
    return dataclasses.replace(planner_settings(TEST_CONFIG), **overrides)
