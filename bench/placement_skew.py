"""Skewed placement benchmark: load-aware against count-based placement on Zipf keys.

Keys drawn from a Zipf distribution (a few keys carry most records) are routed to partitions
as the pipeline routes them (`shared/routing.py`); a partition's weight is the records its
keys carry, the input rate the workers would report. For each scenario both placements start
from the same count-balanced plan; the load-aware one first balances by weight, then one
worker joins and one original worker leaves. Each row reports the workers' max / mean load
(`load_max_over_mean`), the partitions moved and the count lower bound for the same change
(`moves_lower_bound`, what count balancing must move). Goal: load-aware at most 1.15 times the
mean, with a join or leave moving no more than the count lower bound.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from coordinator.core.placement import moves, moves_lower_bound, plan_balanced
from coordinator.core.weighted import BALANCE_TOLERANCE_DEFAULT, plan_weighted, weighted_spread
from shared.routing import partition_for_key

__all__ = ["run"]

Assignment = list[str | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class SkewScenario:
    name: str
    total_partitions: int
    workers: int
    keys: int
    exponent: float


def _scenarios(quick: bool) -> list[SkewScenario]:
    keys = 20_000 if quick else 200_000
    return [
        SkewScenario(name="zipf_p256_w8", total_partitions=256, workers=8, keys=keys, exponent=1.0),
        SkewScenario(
            name="zipf_p1024_w16", total_partitions=1024, workers=16, keys=keys, exponent=0.9
        ),
    ]


def zipf_weights(sc: SkewScenario, seed: int = 1) -> list[float]:
    """Each partition's share of the records: key rank r carries 1 / r**exponent of them."""
    rng = random.Random(seed)
    weights = [0.0] * sc.total_partitions
    for rank in range(1, sc.keys + 1):
        # A random key name per rank: which keys are hot has nothing to do with their names.
        key = f"k{rng.getrandbits(64):016x}"
        weights[partition_for_key(key, sc.total_partitions)] += rank**-sc.exponent
    total = sum(weights)
    return [w / total for w in weights]


def _row(
    before: Assignment, after: Assignment, eligible: list[str], weights: list[float], s: float
) -> dict[str, float]:
    return {
        "load_max_over_mean": weighted_spread(after, eligible, weights),
        "moves": float(moves(before, after)),
        "moves_lower_bound": float(moves_lower_bound(before, eligible)),
        "plan_s": s,
    }


def _run_scenario(sc: SkewScenario) -> dict[str, dict[str, float]]:
    weights = zipf_weights(sc)
    base = [f"w{i:04d}" for i in range(sc.workers)]
    joined = [*base, f"w{sc.workers:04d}"]
    left = joined[1:]
    start = plan_balanced([None] * sc.total_partitions, base)
    out: dict[str, dict[str, float]] = {}
    hottest = max(weights) * sc.workers
    out[f"{sc.name}/start/counts"] = _row(start, start, base, weights, 0.0)
    out[f"{sc.name}/start/counts"]["hottest_partition_over_mean"] = hottest

    def weighted(before: Assignment, eligible: list[str]) -> tuple[Assignment, float]:
        t0 = time.perf_counter()
        after = plan_weighted(before, eligible, weights, tolerance=BALANCE_TOLERANCE_DEFAULT)
        return after, time.perf_counter() - t0

    def counted(before: Assignment, eligible: list[str]) -> tuple[Assignment, float]:
        t0 = time.perf_counter()
        after = plan_balanced(before, eligible)
        return after, time.perf_counter() - t0

    for strategy, planner in (("load_aware", weighted), ("count_based", counted)):
        owners = start
        for event, eligible in (("balance", base), ("join", joined), ("leave", left)):
            prev = owners
            owners, plan_s = planner(prev, eligible)
            out[f"{sc.name}/{event}/{strategy}"] = _row(prev, owners, eligible, weights, plan_s)
    return out


def run(quick: bool) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    for sc in _scenarios(quick):
        results.update(_run_scenario(sc))
    print(
        "note: skewed rows weigh each partition by its Zipf keys' share of the records; "
        "load_max_over_mean is the busiest worker's load over the mean, goal <= 1.15 for "
        "load_aware, whose join and leave moves must not exceed moves_lower_bound"
    )
    return results
