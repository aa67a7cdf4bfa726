"""Benchmark runner: `python -m bench [NAME ...] [--quick] [--json FILE]`.

Each registered module exposes `run(quick: bool) -> dict[str, dict[str, float]]` (row name
-> field -> value, units last in field names); the runner prints one table per benchmark.
A full run of a benchmark also rewrites its committed results file, `bench/results/<name>
.json` (bench/results.py: the rows, the date, the commit, the machine's cores); a quick run
writes none. `--json FILE` writes every result of this run to FILE as well. Benchmarks are
comparisons to read, not timed tests: nothing here passes or fails on speed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import results as committed

REGISTRY: dict[str, str] = {
    "failover": "bench.failover",
    "writes": "bench.writes",
    "heartbeats": "bench.heartbeats",
    "checkpoints": "bench.checkpoints",
    "placement": "bench.placement",
    "recovery": "bench.recovery",
    "pipeline": "bench.pipeline",
    "pipeline_cluster": "bench.pipeline_cluster",
    "freshness": "bench.freshness",
    "driver_heap": "bench.driver_heap",
    "memory": "bench.memory",
    "structured_streaming": "bench.structured_streaming",
    "moves": "bench.moves",
    "rescale": "bench.rescale",
    "messages": "bench.messages",
    "pipelines": "bench.pipelines",
    "state_engines": "bench.state_engines",
    "state": "bench.state",
}


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) < 1e12:
        return str(int(value))
    return f"{value:.4g}"


def render(name: str, rows: dict[str, dict[str, float]]) -> str:
    fields: list[str] = []
    for row in rows.values():
        fields.extend(f for f in row if f not in fields)
    header = ["case", *fields]
    body = [
        [case, *(_fmt(row[f]) if f in row else "-" for f in fields)] for case, row in rows.items()
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    rule = "-" * len(line(header))
    return "\n".join([f"== {name}", line(header), rule, *(line(r) for r in body)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"one of {sorted(REGISTRY)}")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sample sizes: checks that each benchmark runs (CI runs them all so)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write results as JSON")
    parser.add_argument(
        "--results-dir",
        metavar="DIR",
        default=str(committed.RESULTS_DIR),
        help="where a full run writes <name>.json (default: bench/results, committed)",
    )
    args = parser.parse_args(argv)

    names = args.names or sorted(REGISTRY)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {sorted(REGISTRY)}")

    results: dict[str, dict[str, dict[str, float]]] = {}
    failed: list[str] = []
    for name in names:
        module = importlib.import_module(REGISTRY[name])
        run = committed.begin(args.quick)
        t0 = time.perf_counter()
        try:
            rows = module.run(args.quick)
        except Exception as exc:
            # One broken benchmark (e.g. a pipeline component failing) must not cost the
            # tables of the others; the exit status still says something failed.
            failed.append(name)
            print(f"== {name}\nFAILED: {type(exc).__name__}: {exc}\n", flush=True)
            continue
        seconds = time.perf_counter() - t0
        results[name] = rows
        print(render(name, rows))
        print(f"({name}: {seconds:.1f} s{', quick' if args.quick else ''})")
        if not args.quick:
            path = committed.write(name, rows, run, seconds, Path(args.results_dir))
            print(f"(results: {path})")
        print(flush=True)

    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"quick": args.quick, "results": results, "failed": failed},
                fh,
                indent=2,
                sort_keys=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
