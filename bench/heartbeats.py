"""Heartbeats: how many worker heartbeats per second the leader answers, and at what p99.

`bench.load` (its own process) registers `workers` workers through the real API (each gets
its incarnation and signed token). Then their heartbeats go round-robin, each with the
worker's own token, 64 in flight for a fixed time, from `wrk` (Debian's package; the
script is bench/wrk/heartbeats.lua) when it is installed, else from `bench.load`'s aiohttp
client (the `client` column says which). The Python client costs about as much CPU per
request as the server on this 2-core machine, so with it the figure is the client's as much
as the leader's; wrk costs a fraction. A heartbeat is leader-only and not replicated: token
check (an HMAC the first time a token is seen, then its kept claims), incarnation check, the
worker's assignment (its JSON kept per generation) under the state lock, an in-memory
liveness update.

Baseline `raw_echo`: the same client against `bench.raw_node`'s `POST /echo`, which
parses the JSON body and answers JSON with nothing else: what aiohttp itself costs here.

The cluster never reaches `min_cluster_size`, so no partition is assigned and host and
checkpoint calls (to workers that do not exist) do not compete; heartbeat timeouts are
long so no worker is declared dead mid-run. Figures are the heartbeat path alone.
"""

from __future__ import annotations

import shutil
from typing import Any

from bench.harness import Cluster, RawCluster, register_workers, run_json, scratch, wrk

CONCURRENCY = 64
SETTINGS = {
    "total_partitions": 128,
    "min_cluster_size": 1_000_000,
    "heartbeat_interval_s": 5.0,
    "lease_s": 20.0,
    "suspect_after_s": 300.0,
    "heartbeat_timeout_s": 600.0,
    "checkpoint_interval_s": 3600.0,
}
SETTLE_TIMEOUT_S = 60.0


def _python_client(ripple_url: str, echo_url: str, workers: int, duration_s: float) -> Any:
    hb = run_json(
        [
            "-m",
            "bench.load",
            "heartbeats",
            "--url",
            ripple_url,
            "--workers",
            str(workers),
            "--duration-s",
            str(duration_s),
            "--concurrency",
            str(CONCURRENCY),
        ]
    )
    echo = run_json(
        [
            "-m",
            "bench.load",
            "ops",
            "--url",
            echo_url,
            "--count",
            str(int(max(hb["ops_per_s"], 500) * duration_s)),
            "--concurrency",
            str(CONCURRENCY),
        ]
    )
    return hb, echo


def run(quick: bool) -> dict[str, dict[str, float]]:
    workers = 2000 if quick else 10_000
    duration_s = 5.0 if quick else 20.0
    with_wrk = shutil.which("wrk") is not None
    with scratch("heartbeats") as root:
        (root / "ripple").mkdir()
        ripple = Cluster(root / "ripple", **SETTINGS)
        raw = RawCluster(root / "raw")
        try:
            ripple.start_all()
            raw.start_all()
            leader = ripple.ready(SETTLE_TIMEOUT_S)
            raw_leader = raw.leader(SETTLE_TIMEOUT_S)
            echo_url = raw.url(raw_leader) + "/echo"
            if with_wrk:
                tokens = root / "tokens.txt"
                reg = register_workers(ripple.url(leader), workers, tokens)
                hb = wrk(ripple.url(leader), "heartbeats.lua", duration_s, CONCURRENCY, str(tokens))
                hb.update(reg)
                echo = wrk(echo_url, "echo.lua", duration_s, CONCURRENCY)
            else:
                hb, echo = _python_client(ripple.url(leader), echo_url, workers, duration_s)
        finally:
            ripple.stop_all()
            raw.stop_all()
    base = echo["ops_per_s"]
    client = 1.0 if with_wrk else 0.0
    return {
        "ripple": {
            "workers": hb["workers"],
            "per_s": hb["ops_per_s"],
            "p50_ms": hb["p50_ms"],
            "p99_ms": hb["p99_ms"],
            "errors": hb["errors"],
            "register_per_s": hb["register_per_s"],
            "baseline_per_s": base,
            "ratio": hb["ops_per_s"] / base if base else 0.0,
            # At 5 s between heartbeats with the leader saturated; plan for half of it.
            "workers_at_5s_max": hb["ops_per_s"] * 5.0,
            "client_wrk": client,
        },
        "raw_echo": {
            "per_s": base,
            "p50_ms": echo["p50_ms"],
            "p99_ms": echo["p99_ms"],
            "errors": echo["errors"],
            "baseline_per_s": base,
            "ratio": 1.0,
            "client_wrk": client,
        },
    }
