"""The simulation's soak on several cores: the seeds of `test_soak_many_seeds` (or of
`test_churn_soak_many_seeds` with --churn) split across worker processes.

    python -m tests.sim.soak [--churn] [--jobs N] [--seeds FIRST:END]

Each seed runs exactly as in the pytest soak (`run_seed`, the same settings); the totals
and every violation, with its seed, are printed at the end, and the exit status is 1 when
there is one. The pool's processes are its own children, joined before it returns.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from tests.sim.simulation import SafetyViolation, run_seed
from tests.sim.test_simulation import CHURN, SOAK_SEEDS


def _run(seeds: range, churn: bool) -> tuple[Counter[str], list[str]]:
    totals: Counter[str] = Counter()
    failures: list[str] = []
    for seed in seeds:
        try:
            totals.update(run_seed(seed, CHURN) if churn else run_seed(seed))
        except SafetyViolation as exc:
            failures.append(str(exc))
    return totals, failures


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tests.sim.soak")
    p.add_argument("--churn", action="store_true", help="the churning soak (CHURN settings)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seeds", default=f"{SOAK_SEEDS.start}:{SOAK_SEEDS.stop}")
    args = p.parse_args()
    first, end = (int(x) for x in args.seeds.split(":"))
    jobs = max(1, min(args.jobs, end - first))
    shards = [range(first + i, end, jobs) for i in range(jobs)]
    started = time.monotonic()
    totals: Counter[str] = Counter()
    failures: list[str] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for shard_totals, shard_failures in pool.map(_run, shards, [args.churn] * jobs):
            totals.update(shard_totals)
            failures += shard_failures
    name = "sim churn" if args.churn else "sim"
    took = time.monotonic() - started
    seeds = end - first
    print(f"[{name}] {seeds} seeds, {len(failures)} violations in {took:.0f} s: {dict(totals)}")
    for failure in failures[:10]:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
