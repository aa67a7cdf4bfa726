"""Write path: committed writes per second through HTTP at concurrency 1, 16, 64 and 256.

- ripple: group commit on (the default): worker registrations (`POST /v1/workers`, each a
  fresh worker id) to the leader of three `ripple coordinator` processes: pydantic parse,
  msgpack command, Raft commit on a majority, apply to the state machine, signed token in
  the reply.
- ripple_aiohttp: the same with `http_front_door = false`, every request through aiohttp's
  request machinery (the A/B of coordinator/service/front.py).
- ripple_nofsync: the same with `fsync = false`: a write is acknowledged once a majority
  holds it in the page cache, not on disk (the throwaway-cluster setting); beside `ripple`
  it shows what durable acknowledgements cost.
- ripple_1: the same with `group_commit_entries_max = 1`, one pysyncobj entry per write
  (Ripple without group commit).
- raw: `POST /write` to the leader of three `bench.raw_node` processes: pysyncobj as it
  comes (a plain `SyncObj` on its own tick thread, its journal never synced) behind a bare
  handler, one entry per write: the baseline every ratio is against.
- floor_off, floor_shared_disk, floor_disk_each (one client only): `bench.disk_floor`, a
  leader and two follower processes that only write, sync and answer each record, with no
  Raft, HTTP or state around it. `floor_shared_disk` minus `floor_off` is the least that
  durable acknowledgements cost one client when the three nodes share this machine's disk,
  as every cluster here does; `floor_disk_each` minus `floor_off` the least with a disk per
  node.

The client is `wrk` (Debian's package, `bench/wrk/writes.lua`: C connections, keep-alive,
each request a new worker id, no redirects: aimed at the leader) for `wrk_duration_s` per
run when it is installed, else `bench.load` in its own process (aiohttp, C requests in
flight) for a fixed count; the `client_wrk` column says which. The Python client costs
about as much CPU per write as the leader, so with it the figure is the client's as much as
Ripple's (wrk reports non-2xx answers as `errors`, not by kind). Rounds interleave ripple
and raw; each case repeats `REPEATS` times (once in quick mode) and the table shows the
median run (min and max ops/s beside it). The one-client runs come first, each case alone
on the machine: the other three clusters are stopped (`harness.paused`, SIGSTOP) while it
runs, since idle clusters still share the cores with it and cost Ripple's one-client
latency more than raw's (docs/benchmarks.md). Only there: a stopped cluster elects again
when continued, and once the 16- to 256-client runs have registered a few hundred thousand
workers that election can take a minute.
"""

from __future__ import annotations

import shutil
import statistics
from typing import Any

from bench import disk_floor
from bench.harness import (
    paused,
    rate_columns,
    raw_cluster,
    run_json,
    scratch,
    wrk,
    wrk_duration_s,
)
from testkit.cluster import Cluster
from testkit.nodes import NodeCluster

REPEATS = 3
QUICK_REPEATS = 1
# No assignment and no checkpoint rounds: the registered workers are fake (no address
# answers), and the leader calling them would be measured instead of the write path. Long
# liveness timeouts: the fake workers never heartbeat, and with the defaults tens of
# thousands of them would be declared dead mid-run, a storm of DeclareDead entries competing
# with the registrations measured beside it.
SETTINGS: dict[str, Any] = {
    "total_partitions": 16,
    "min_cluster_size": 1_000_000,
    "checkpoint_interval_s": 3600,
    "heartbeat_interval_s": 5.0,
    "lease_s": 20.0,
    "suspect_after_s": 1500.0,
    "heartbeat_timeout_s": 3000.0,
    # A restarting worker's saved token must outlast the timeout and the rejoin grace
    # (twice the timeout): config validation holds the lifetime to at least twice both.
    "worker_token_lifetime_s": 21600.0,
}
SETTLE_TIMEOUT_S = 60.0


def _counts(quick: bool) -> dict[int, int]:
    if quick:
        return {1: 150, 16: 500, 64: 1000, 256: 2000}
    return {1: 1000, 16: 4000, 64: 8000, 256: 16000}


CASES = ("ripple", "ripple_nofsync", "ripple_aiohttp", "ripple_1", "raw")
FLOOR_CASES = tuple(f"floor_{mode}" for mode in disk_floor.MODES)


def _one(
    url: str, conc: int, count: int, register: bool, tag: str, quick: bool, with_wrk: bool
) -> Any:
    if with_wrk:
        return wrk(url, "writes.lua", wrk_duration_s(quick), conc, tag)
    extra = ["--register"] if register else []
    argv = ["-m", "bench.load", "ops", "--url", url, "--count", str(count)]
    return run_json([*argv, "--concurrency", str(conc), *extra])


def _by_kind(results: list[dict[str, float]]) -> dict[str, float]:
    kinds = ("redirects", "unavailable", "no_answer")
    if any(kind not in r for r in results for kind in kinds):
        return {}
    return {kind: float(sum(r[kind] for r in results)) for kind in kinds}


def _target(name: str, cluster: NodeCluster) -> tuple[str, bool]:
    """The URL a run of `name` writes to (its leader's), and whether it registers workers. A
    cluster without an agreed ready leader fails the benchmark with what each node says."""
    try:
        if isinstance(cluster, Cluster):
            return cluster.url(cluster.leader(SETTLE_TIMEOUT_S)) + "/v1/workers", True
        return cluster.url(cluster.leader(SETTLE_TIMEOUT_S)) + "/write", False
    except AssertionError as exc:
        nodes = list(cluster.procs)
        said = {n: cluster.health(n) for n in nodes}
        alive = {n: cluster.procs[n].alive() for n in nodes}
        raise RuntimeError(f"{name}: {exc}; alive {alive}; health {said}") from exc


def run(quick: bool) -> dict[str, dict[str, float]]:
    with_wrk = shutil.which("wrk") is not None
    runs: dict[str, list[dict[str, float]]] = {}
    with scratch("writes") as root:
        (root / "ripple").mkdir()
        (root / "ripple_1").mkdir()
        (root / "ripple_aiohttp").mkdir()
        (root / "ripple_nofsync").mkdir()
        ripple = Cluster(root / "ripple", **SETTINGS)
        nofsync = Cluster(root / "ripple_nofsync", **SETTINGS, fsync=False)
        plain = Cluster(root / "ripple_aiohttp", **SETTINGS, http_front_door=False)
        per_entry = Cluster(root / "ripple_1", **SETTINGS, group_commit_entries_max=1)
        raw = raw_cluster(root / "raw")
        try:
            for c in (ripple, nofsync, plain, per_entry, raw):
                c.start_all()
            ripple.ready(SETTLE_TIMEOUT_S)
            nofsync.ready(SETTLE_TIMEOUT_S)
            plain.ready(SETTLE_TIMEOUT_S)
            per_entry.ready(SETTLE_TIMEOUT_S)
            raw.leader(SETTLE_TIMEOUT_S)
            clusters: dict[str, NodeCluster] = {
                "ripple": ripple,
                "ripple_nofsync": nofsync,
                "ripple_aiohttp": plain,
                "ripple_1": per_entry,
                "raw": raw,
            }
            # One client first, each case alone on the machine (the other clusters stopped),
            # while the states are small; then the rest, every cluster running.
            for alone in (True, False):
                for round_no in range(QUICK_REPEATS if quick else REPEATS):
                    for conc, count in _counts(quick).items():
                        if (conc == 1) is not alone:
                            continue
                        for name, cluster in clusters.items():
                            # Re-resolve the leader before each run: on a loaded machine (or
                            # after a pause) an election can happen between runs, and the
                            # client does not follow redirects.
                            url, register = _target(name, cluster)
                            tag = f"wr{round_no}c{conc}-"  # worker ids unique per cluster
                            others = [c for n, c in clusters.items() if n != name] if alone else []
                            with paused(others):
                                result = _one(url, conc, count, register, tag, quick, with_wrk)
                            runs.setdefault(f"{name}_c{conc}", []).append(result)
                        if conc == 1:
                            # The disk's floor, in the same rounds and as alone on the machine.
                            for mode in disk_floor.MODES:
                                with paused(list(clusters.values())):
                                    result = disk_floor.measure(root / "floor", mode, count)
                                runs.setdefault(f"floor_{mode}_c1", []).append(result)
        finally:
            for c in (ripple, nofsync, plain, per_entry, raw):
                c.stop_all()

    rows: dict[str, dict[str, float]] = {}
    for conc in _counts(quick):
        base = statistics.median(r["ops_per_s"] for r in runs[f"raw_c{conc}"])
        for name in CASES + (FLOOR_CASES if conc == 1 else ()):
            key = f"{name}_c{conc}"
            cols = rate_columns(runs[key], "ops", base)
            ratio = cols.pop("ratio")
            rows[key] = {
                "concurrency": conc,
                **cols,
                # By kind from the Python client only (wrk counts them all as errors): the
                # columns are left out rather than shown as a zero that was never counted.
                **_by_kind(runs[key]),
                "baseline_ops_per_s": base,
                "ratio": ratio,
            }
            if name not in FLOOR_CASES:  # the floor is its own client
                rows[key]["client_wrk"] = int(with_wrk)
    return rows
