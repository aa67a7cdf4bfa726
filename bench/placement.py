"""Placement benchmark: sticky balanced planner vs the seed's consistent-hash ring.

For each scenario (a cluster, then one worker joins, then one original worker leaves) and
each strategy, reports partitions moved against the minimum any perfectly balanced plan
needs, the resulting spread, and the time to compute the plan.

`naive_ring` is the seed's ring verbatim (linear scan per lookup). On the large scenario a
full scan of every partition takes minutes, so it times a sample of lookups and
extrapolates `plan_s`; its moves and spread come from the bisect ring, whose lookups it is
checked to agree with on the sample.

The skewed case (Zipf keys: load-aware placement beside count-based) is
`bench/placement_skew.py`'s, run here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import mmh3

from bench import placement_skew
from coordinator.core.placement import (
    DEFAULT_VIRTUAL_NODES,
    NaiveRing,
    moves,
    moves_lower_bound,
    plan_balanced,
    plan_hash_ring,
    spread,
)

Assignment = list[str | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    name: str
    total_partitions: int
    workers: int
    naive_sample_lookups: int  # 0 = look every partition up


def _scenarios(quick: bool) -> list[Scenario]:
    return [
        Scenario(name="p128_w3", total_partitions=128, workers=3, naive_sample_lookups=0),
        Scenario(
            name="p100k_w1000",
            total_partitions=100_000,
            workers=1000,
            naive_sample_lookups=100 if quick else 1000,
        ),
    ]


def _timed(fn: Callable[[], Assignment], repeats: int) -> tuple[Assignment, float]:
    best_s = float("inf")
    result: Assignment = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best_s = min(best_s, time.perf_counter() - t0)
    return result, best_s


def _row(
    before: Assignment, after: Assignment, eligible: list[str], plan_s: float
) -> dict[str, float]:
    gap, peak = spread(after, eligible)
    return {
        "moves": float(moves(before, after)),
        "moves_lower_bound": float(moves_lower_bound(before, eligible)),
        "spread_max_min": float(gap),
        "max_over_mean": peak,
        "plan_s": plan_s,
    }


def _naive_plan_s(ring: NaiveRing, total: int, sample: int, reference: Assignment) -> float:
    """Time the seed's lookups; extrapolate from an evenly spaced sample if `sample` > 0."""
    ids = list(range(total)) if sample == 0 else list(range(0, total, max(1, total // sample)))
    t0 = time.perf_counter()
    got = [ring.owner(p) for p in ids]
    lookup_s = time.perf_counter() - t0
    if got != [reference[p] for p in ids]:
        raise AssertionError("naive ring disagrees with the bisect ring")
    return lookup_s * total / len(ids)


def _run_scenario(sc: Scenario, quick: bool) -> dict[str, dict[str, float]]:
    repeats = 1 if quick else 3
    base = [f"w{i:04d}" for i in range(sc.workers)]
    joined = [*base, f"w{sc.workers:04d}"]
    left = joined[1:]  # an original worker leaves (dies or drains)
    steps = [("join", base, joined), ("leave", joined, left)]
    out: dict[str, dict[str, float]] = {}

    owners = plan_balanced([None] * sc.total_partitions, base)
    for event, _, after_workers in steps:
        prev = owners
        owners, plan_s = _timed(partial(plan_balanced, prev, after_workers), repeats)
        out[f"{sc.name}/{event}/balanced"] = _row(prev, owners, after_workers, plan_s)

    ring_owners = plan_hash_ring(sc.total_partitions, base)
    ring_plans: dict[str, Assignment] = {}
    for event, _, after_workers in steps:
        prev = ring_owners
        ring_owners, plan_s = _timed(
            partial(plan_hash_ring, sc.total_partitions, after_workers), repeats
        )
        ring_plans[event] = ring_owners
        out[f"{sc.name}/{event}/hash_ring"] = _row(prev, ring_owners, after_workers, plan_s)

    # The seed's ring, built as the seed builds it on a membership change: one sorted merge
    # of the new vnodes, then a linear scan per partition.
    naive = NaiveRing(DEFAULT_VIRTUAL_NODES)
    naive.ring = sorted(
        (mmh3.hash(f"{w}-vnode-{i}", signed=False), w)
        for w in base
        for i in range(DEFAULT_VIRTUAL_NODES)
    )
    prev = plan_hash_ring(sc.total_partitions, base)
    for event, before_workers, after_workers in steps:
        t0 = time.perf_counter()
        for w in set(after_workers) - set(before_workers):
            naive.add(w)
        for w in set(before_workers) - set(after_workers):
            naive.remove(w)
        change_s = time.perf_counter() - t0
        lookup_s = _naive_plan_s(
            naive, sc.total_partitions, sc.naive_sample_lookups, ring_plans[event]
        )
        row = _row(prev, ring_plans[event], after_workers, change_s + lookup_s)
        row["lookups_sampled"] = float(sc.naive_sample_lookups or sc.total_partitions)
        out[f"{sc.name}/{event}/naive_ring"] = row
        prev = ring_plans[event]
    return out


def run(quick: bool) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    for sc in _scenarios(quick):
        results.update(_run_scenario(sc, quick))
        if sc.naive_sample_lookups:
            print(
                f"note: {sc.name}/naive_ring plan_s is extrapolated from "
                f"{sc.naive_sample_lookups} timed lookups (of {sc.total_partitions}); its "
                "moves/spread are the bisect ring's, checked equal on the sample"
            )
    print(
        "note: moves_lower_bound is the fewest moves that reach perfect balance from the "
        "previous plan; the rings move fewer only because they never reach balance "
        "(see spread_max_min)"
    )
    results.update(placement_skew.run(quick))
    return results
