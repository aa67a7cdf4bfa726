"""The pure parts of the `state` benchmark (bench/state.py): its input's keys, the bytes a
checkpoint added, and the goals of issue 38 its figures are read against.

Invariant: nothing here starts a process or touches the network, so tests/unit checks every
rule of the table (which way a goal points, what a missing figure shows) on its own.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "GOALS",
    "NOT_MEASURED",
    "ZIPF_S",
    "Goal",
    "added_bytes",
    "draw_keys",
    "goal_rows",
    "key_name",
    "load_keys",
    "touch_keys",
]

ZIPF_S = 1.1  # the skew of the `zipf` case: the k-th most frequent key ~ 1 / k**ZIPF_S
TOUCHED_SHARE = 0.01  # keys an interval touches, of all keys, for the checkpoint figure


@dataclass(frozen=True, slots=True, kw_only=True)
class Goal:
    """One line of the issue's "Done when": `figure` against `goal`, at most or at least."""

    figure: str  # the name the benchmark gives its value (goal_rows' `figures`)
    goal: float
    at_most: bool  # the goal is an upper bound (latency, bytes, memory), else a lower one
    unit: str  # what `value` and `goal` are in: "x" (a ratio), "ms", "mib", "share"


GOALS: tuple[Goal, ...] = (
    Goal(figure="backlog_rate_ratio", goal=1.5, at_most=False, unit="x"),
    Goal(figure="live_rate_ratio", goal=1.5, at_most=False, unit="x"),
    Goal(figure="freshness_p50_ratio", goal=1.0, at_most=True, unit="x"),
    Goal(figure="worker_rss_mib", goal=1024.0, at_most=True, unit="mib"),
    Goal(figure="checkpoint_share", goal=0.03, at_most=True, unit="share"),
    Goal(figure="get_p99_ms", goal=10.0, at_most=True, unit="ms"),
)
# Goals of the issue this harness does not measure yet (a later step's rows): shown as rows
# with no figure, never a made-up one.
NOT_MEASURED = ("warm_move_gap_p99", "rescale_8_to_12_online")


def key_name(index: int) -> str:
    return f"k{index:09d}"


def load_keys(keys: int, extra: int, zipf: bool, seed: int) -> list[int]:
    """The key indices of a backlog: every key of 0..keys-1 once (so the state holds exactly
    `keys` keys), then `extra` more drawn uniformly or by Zipf, all shuffled."""
    rng = random.Random(seed)
    drawn = zipf_keys(keys, extra, rng) if zipf else [rng.randrange(keys) for _ in range(extra)]
    out = [*range(keys), *drawn]
    rng.shuffle(out)
    return out


def draw_keys(keys: int, n: int, zipf: bool, seed: int) -> list[int]:
    """`n` key indices of 0..keys-1 drawn uniformly or by Zipf (live input)."""
    rng = random.Random(seed)
    return zipf_keys(keys, n, rng) if zipf else [rng.randrange(keys) for _ in range(n)]


def zipf_keys(keys: int, n: int, rng: random.Random) -> list[int]:
    """`n` draws of 0..keys-1, key k with weight 1 / (k + 1)**ZIPF_S (a bounded Zipf)."""
    return rng.choices(range(keys), cum_weights=_cumulative(keys), k=n)


@functools.lru_cache(maxsize=2)  # the run's key count: drawn again every live tick
def _cumulative(keys: int) -> list[float]:
    return list(itertools.accumulate(1.0 / (k + 1) ** ZIPF_S for k in range(keys)))


def touch_keys(keys: int, seed: int) -> list[int]:
    """TOUCHED_SHARE of the keys (at least one), distinct: one interval's updates."""
    return random.Random(seed).sample(range(keys), max(1, math.ceil(keys * TOUCHED_SHARE)))


def added_bytes(before: Mapping[str, int], after: Mapping[str, int]) -> int:
    """Bytes of the files in `after` that are not in `before` or whose size changed: what was
    written between the two listings (a file removed meanwhile counts nothing)."""
    return sum(size for name, size in after.items() if before.get(name) != size)


def goal_rows(figures: Mapping[str, float], prefix: str) -> dict[str, dict[str, float]]:
    """One row per goal: `value` (absent when not measured), `goal`, `value_over_goal` and
    `meets` (1 or 0); then a figure-less row per goal not measured yet."""
    rows: dict[str, dict[str, float]] = {}
    for g in GOALS:
        row = {"goal": g.goal}
        value = figures.get(g.figure)
        if value is not None:
            met = value <= g.goal if g.at_most else value >= g.goal
            row.update(value=value, value_over_goal=value / g.goal, meets=float(met))
        rows[f"{prefix}/{g.figure}"] = row
    for name in NOT_MEASURED:
        rows[f"{prefix}/{name}/not_measured_yet"] = {}
    return rows
