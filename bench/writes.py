"""Write path: committed writes per second through HTTP at concurrency 1 and 64.

- ripple: worker registrations (`POST /v1/workers`, each a fresh worker id) to the leader
  of three `ripple coordinator` processes: pydantic parse, msgpack command, Raft commit on
  a majority, apply to the state machine, signed token in the reply.
- raw: `POST /write` to the leader of three `bench.raw_node` processes: the same
  ReplicatedLog and Raft settings with a counting machine and a bare handler.

The client is `bench.load` in its own process (aiohttp, keep-alive, C requests in flight,
no redirects: aimed at the leader). Rounds interleave ripple and raw; each case repeats
`REPEATS` times and the table shows the median run (min and max ops/s beside it).
"""

from __future__ import annotations

import statistics

from bench.harness import Cluster, RawCluster, run_json, scratch

REPEATS = 3
SETTINGS = {"total_partitions": 16, "min_cluster_size": 1_000_000}
SETTLE_TIMEOUT_S = 60.0


def _counts(quick: bool) -> dict[int, int]:
    return {1: 150, 64: 1000} if quick else {1: 1000, 64: 5000}


def run(quick: bool) -> dict[str, dict[str, float]]:
    runs: dict[str, list[dict[str, float]]] = {}
    with scratch("writes") as root:
        (root / "ripple").mkdir()
        ripple = Cluster(root / "ripple", **SETTINGS)
        raw = RawCluster(root / "raw")
        try:
            ripple.start_all()
            raw.start_all()
            ripple.ready(SETTLE_TIMEOUT_S)
            raw.leader(SETTLE_TIMEOUT_S)
            for _ in range(REPEATS):
                for conc, count in _counts(quick).items():
                    # Re-resolve the leader before each run: on a loaded machine an election
                    # can happen between runs, and the client does not follow redirects.
                    targets = {
                        "ripple": (ripple.url(ripple.leader()) + "/v1/workers", ["--register"]),
                        "raw": (raw.url(raw.leader()) + "/write", []),
                    }
                    for name, (url, extra) in targets.items():
                        result = run_json(
                            [
                                "-m",
                                "bench.load",
                                "ops",
                                "--url",
                                url,
                                "--count",
                                str(count),
                                "--concurrency",
                                str(conc),
                                *extra,
                            ]
                        )
                        runs.setdefault(f"{name}_c{conc}", []).append(result)
        finally:
            ripple.stop_all()
            raw.stop_all()

    def median_run(key: str) -> dict[str, float]:
        ordered = sorted(runs[key], key=lambda r: r["ops_per_s"])
        return ordered[len(ordered) // 2]

    rows: dict[str, dict[str, float]] = {}
    for conc in _counts(quick):
        base = median_run(f"raw_c{conc}")["ops_per_s"]
        for name in ("ripple", "raw"):
            key = f"{name}_c{conc}"
            med = median_run(key)
            per_s = [r["ops_per_s"] for r in runs[key]]
            rows[key] = {
                "concurrency": conc,
                "ops_per_s": statistics.median(per_s),
                "min_ops_per_s": min(per_s),
                "max_ops_per_s": max(per_s),
                "p50_ms": med["p50_ms"],
                "p99_ms": med["p99_ms"],
                "errors": sum(r["errors"] for r in runs[key]),
                "baseline_ops_per_s": base,
                "ratio": statistics.median(per_s) / base if base else 0.0,
            }
    return rows
