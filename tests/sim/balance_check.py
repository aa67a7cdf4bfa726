"""The simulation's checker of balance rounds: what a round planned by load or by counts may do.

Owns the checker's own record of the load the leader was told (`ShadowLoads`, kept apart from
the planner's `LoadBook` so a planner that misreads its book is caught, not trusted) and the
rule a balance round's moves are held to (`round_violations`):

- every partition's load fresh: the round is weighted, and no worker ends busier than the
  busiest was before it (a round that moves partitions off an owner the leader no longer
  hears from may place them anywhere, but no higher than the greedy bound: the mean load
  after the round plus the heaviest partition);
- any partition's load stale or missing: the round balances counts, so the eligible
  workers' partition counts end at most one apart.

A held (restarting) worker's partitions are checked where every proposal is, in the
simulation's `check_holds`. Pure: it reads no clock, `now_ms` comes in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.core.commands import Move

__all__ = ["RoundKind", "ShadowLoads", "round_violations"]

# Float sums in another order differ in the last bits; a load this much above the bound
# is not a rise.
LOAD_SLACK = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundKind:
    weighted: bool
    problems: tuple[str, ...]


class ShadowLoads:
    """The rate the leader accepted last for each partition (the owner's, at its epoch), when,
    and in which routing generation: one per leader term, as the planner's book is. A report
    from another generation's table weighs nothing (its partition is another key range)."""

    __slots__ = ("_seen", "stale_after_ms")

    def __init__(self, stale_after_ms: int) -> None:
        self.stale_after_ms = stale_after_ms
        self._seen: dict[int, tuple[float, int, int]] = {}

    def accept(self, partition: int, rate_per_s: float, now_ms: int, generation: int) -> None:
        self._seen[partition] = (rate_per_s, now_ms, generation)

    def weights(self, total_partitions: int, now_ms: int, generation: int) -> list[float] | None:
        out = []
        for p in range(total_partitions):
            seen = self._seen.get(p)
            if seen is None or now_ms - seen[1] > self.stale_after_ms or seen[2] != generation:
                return None
            out.append(seen[0])
        return out


def _loads(owners: Sequence[str | None], weights: Sequence[float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p, owner in enumerate(owners):
        if owner is not None:
            out[owner] = out.get(owner, 0.0) + weights[p]
    return out


def round_violations(
    owners: Sequence[str | None],
    moves: Sequence[Move],
    eligible: Sequence[str],
    weights: Sequence[float] | None,
) -> RoundKind:
    """Check one balance round: `owners` before it, its `moves`, the workers the leader
    could place on, and every partition's fresh load (None when any is stale)."""
    after = list(owners)
    for mv in moves:
        after[mv.partition] = mv.target
    if weights is None:
        counts = dict.fromkeys(eligible, 0)
        for owner in after:
            if owner in counts:
                counts[owner] += 1
        if counts and max(counts.values()) - min(counts.values()) > 1:
            return RoundKind(
                weighted=False,
                problems=(f"a round with stale load left counts unbalanced: {counts}",),
            )
        return RoundKind(weighted=False, problems=())
    before_loads, after_loads = _loads(owners, weights), _loads(after, weights)
    busiest_before = max(before_loads.values(), default=0.0)
    busiest_after = max(after_loads.values(), default=0.0)
    bound = busiest_before
    member = set(eligible)
    if any(mv.source not in member for mv in moves) and member:
        mean_after = sum(after_loads.get(w, 0.0) for w in member) / len(member)
        bound = max(bound, mean_after + max(weights))
    if busiest_after > bound * (1 + LOAD_SLACK):
        return RoundKind(
            weighted=True,
            problems=(
                f"a weighted round raised the busiest worker's load "
                f"{busiest_before:.3f} -> {busiest_after:.3f} (bound {bound:.3f})",
            ),
        )
    return RoundKind(weighted=True, problems=())
