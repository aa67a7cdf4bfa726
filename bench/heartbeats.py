"""Heartbeats: how many worker heartbeats per second the leader answers, and at what p99.

`bench.load` (its own process) registers `workers` workers through the real API (each gets
its incarnation and signed token). Then their heartbeats go round-robin, each with the
worker's own token, 64 in flight for a fixed time, from `wrk` (Debian's package; the
script is bench/wrk/heartbeats.lua) when it is installed, else from `bench.load`'s aiohttp
client (the `client` column says which). The Python client costs about as much CPU per
request as the server, so with it the figure is the client's as much as the leader's; wrk
costs a fraction. A heartbeat is leader-only and not replicated: token
check (an HMAC the first time a token is seen, then its kept claims), incarnation check, the
worker's assignment (its JSON kept per generation) under the state lock, an in-memory
liveness update.

Baseline `raw_echo`: the same client against `bench.raw_node`'s `POST /echo`, which
parses the JSON body and answers JSON with nothing else: what aiohttp itself costs here.
`ripple_aiohttp`: the same cluster with `http_front_door = false`, every heartbeat through
aiohttp's request machinery (the A/B of coordinator/service/front.py, in the same run).

The cluster never reaches `min_cluster_size`, so no partition is assigned and host and
checkpoint calls (to workers that do not exist) do not compete; heartbeat timeouts are
long so no worker is declared dead mid-run. Figures are the heartbeat path alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bench.harness import raw_cluster, register_workers, run_json, scratch, wrk
from testkit.cluster import Cluster

CONCURRENCY = 64
SETTINGS: dict[str, Any] = {
    "total_partitions": 128,
    "min_cluster_size": 1_000_000,
    "heartbeat_interval_s": 5.0,
    "lease_s": 20.0,
    "suspect_after_s": 300.0,
    "heartbeat_timeout_s": 600.0,
    "checkpoint_interval_s": 3600.0,
}
SETTLE_TIMEOUT_S = 60.0


def _python_heartbeats(ripple_url: str, workers: int, duration_s: float) -> Any:
    return run_json(
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


def _python_echo(echo_url: str, rate_per_s: float, duration_s: float) -> Any:
    return run_json(
        [
            "-m",
            "bench.load",
            "ops",
            "--url",
            echo_url,
            "--count",
            str(int(max(rate_per_s, 500) * duration_s)),
            "--concurrency",
            str(CONCURRENCY),
        ]
    )


def _heartbeats(url: str, workers: int, duration_s: float, with_wrk: bool, root: Path) -> Any:
    if not with_wrk:
        return _python_heartbeats(url, workers, duration_s)
    tokens = root / f"tokens-{url.rsplit(':', 1)[1]}.txt"
    reg = register_workers(url, workers, tokens)
    hb = wrk(url, "heartbeats.lua", duration_s, CONCURRENCY, str(tokens))
    hb.update(reg)
    return hb


def _row(hb: Any, base: float, client: float) -> dict[str, float]:
    return {
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
    }


def run(quick: bool) -> dict[str, dict[str, float]]:
    workers = 1000 if quick else 10_000
    duration_s = 3.0 if quick else 20.0
    with_wrk = shutil.which("wrk") is not None
    with scratch("heartbeats") as root:
        (root / "ripple").mkdir()
        (root / "ripple_aiohttp").mkdir()
        ripple = Cluster(root / "ripple", **SETTINGS)
        # The same cluster with every request through aiohttp (no front door): the A/B of
        # coordinator/service/front.py in the same run.
        plain = Cluster(root / "ripple_aiohttp", **SETTINGS, http_front_door=False)
        raw = raw_cluster(root / "raw")
        try:
            for c in (ripple, plain, raw):
                c.start_all()
            leader = ripple.url(ripple.ready(SETTLE_TIMEOUT_S))
            plain_leader = plain.url(plain.ready(SETTLE_TIMEOUT_S))
            echo_url = raw.url(raw.leader(SETTLE_TIMEOUT_S)) + "/echo"
            hb = _heartbeats(leader, workers, duration_s, with_wrk, root)
            hb_plain = _heartbeats(plain_leader, workers, duration_s, with_wrk, root)
            if with_wrk:
                echo = wrk(echo_url, "echo.lua", duration_s, CONCURRENCY)
            else:
                echo = _python_echo(echo_url, hb["ops_per_s"], duration_s)
        finally:
            for c in (ripple, plain, raw):
                c.stop_all()
    base = echo["ops_per_s"]
    client = 1.0 if with_wrk else 0.0
    return {
        "ripple": _row(hb, base, client),
        "ripple_aiohttp": _row(hb_plain, base, client),
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
