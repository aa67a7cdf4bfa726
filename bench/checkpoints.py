"""Checkpoint acks: how many `POST /v1/checkpoints` the leader commits per second.

The write a cluster takes most of in steady state: 10,000 workers that checkpoint every
10 s send about 1,000 acks per second. Here `WORKERS` workers register
through the real API (each its own incarnation and signed token) at the address of
`bench.fake_workers`, which answers the leader's host calls, so all `PARTITIONS`
partitions are assigned and go ONLINE, `PARTITIONS / WORKERS` per worker. Then `wrk`
(bench/wrk/checkpoints.lua) sends their acks round-robin, `CONCURRENCY` in flight, each ack
every partition of its worker at an offset one past that worker's previous ack, with the
canonical reference the pipeline writes: token check, incarnation check, a reference check
per entry, one `RecordCheckpoints` command through group commit and Raft, its apply (the
checkpoint and its fallback chain), the per-entry answer.

`acks_per_s` counts answered acks; `checkpoints_per_s` the entries in them. `fenced` is the
leader's own count of refused entries over the run (`ripple_checkpoint_reports_total`):
a run with more than `FENCED_SHARE_MAX` of its entries fenced is an error, not a figure
(a few are fenced for real: an ack slower than one round of the workers is overtaken by
that worker's next one, and is then behind). `workers_at_10s` is how many workers
checkpointing every 10 s the acks per second would carry with the leader saturated.
Baseline `raw`: the bare per-entry pysyncobj node of `bench.writes`, in the same run, rounds
interleaved. Needs `wrk` (Debian's package).
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path
from typing import Any

from bench.harness import (
    rate_columns,
    raw_cluster,
    register_workers,
    scratch,
    wrk,
    wrk_duration_s,
)
from bench.writes import SETTINGS as WRITE_SETTINGS
from shared.checkpoint_ref import store_base
from shared.ports import free_ports
from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.process import Proc, python_argv
from testkit.prom import parse
from testkit.wait import wait_until

WORKERS = 256
PARTITIONS = 1024
CONCURRENCY = 64
REPEATS = 3
# Checkpoint rounds off (the acks are the load) and the liveness timeouts of bench.writes:
# the fake workers never heartbeat.
SETTINGS: dict[str, Any] = {
    **WRITE_SETTINGS,
    "total_partitions": PARTITIONS,
    "min_cluster_size": WORKERS,
}
SETTLE_TIMEOUT_S = 60.0
METRICS_TIMEOUT_S = 10.0
ONLINE_TIMEOUT_S = 120.0
# Offsets of one run start past every offset of the runs before it.
OFFSETS_PER_RUN = 10_000_000
# Of a run's entries. A reference the leader refuses fences them all; the overtaken acks of
# a loaded machine (whose p99 nears the time one round of the workers takes) a few percent.
FENCED_SHARE_MAX = 0.1


def _owned_file(cluster: Cluster, leader: str, tokens: Path, out: Path) -> None:
    """Once every partition is ONLINE: one "worker_id incarnation token partition:epoch
    ..." line per worker that owns one (checkpoints.lua reads it)."""

    def online() -> list[dict[str, Any]] | None:
        r = call("GET", cluster.url(leader) + "/v1/partitions", token=ADMIN, timeout_s=10.0)
        parts = r.body["partitions"] if r.status == 200 else []
        return parts if parts and all(p["status"] == "online" for p in parts) else None

    parts = wait_until(online, "every partition ONLINE", ONLINE_TIMEOUT_S, every_s=0.5)
    owned: dict[str, list[str]] = {}
    for p in parts:
        owned.setdefault(p["owner"], []).append(f"{p['partition']}:{p['epoch']}")
    with tokens.open(encoding="utf-8") as f, out.open("w", encoding="utf-8") as o:
        for line in f:
            wid, inc, token = line.split()
            if wid in owned:
                o.write(f"{wid} {inc} {token} {' '.join(owned[wid])}\n")


def _reports(cluster: Cluster, leader: str) -> dict[str, float]:
    """The leader's checkpoint entries so far, by status (accepted, fenced)."""
    r = cluster.get(leader, "/metrics", timeout_s=METRICS_TIMEOUT_S)
    if r.status != 200:
        raise RuntimeError(f"{leader}'s /metrics answered {r.status}")
    samples = parse(str(r.body))
    out = {"accepted": 0.0, "fenced": 0.0}
    for status in out:
        out[status] = sum(
            v
            for (name, labels), v in samples.items()
            if name == "ripple_checkpoint_reports_total" and ("status", status) in labels
        )
    return out


def run(quick: bool) -> dict[str, dict[str, float]]:
    if shutil.which("wrk") is None:
        raise RuntimeError("the checkpoints benchmark needs wrk (Debian's package)")
    runs: dict[str, list[dict[str, Any]]] = {"ripple": [], "raw": []}
    with scratch("checkpoints") as root:
        (root / "ripple").mkdir()
        ripple = Cluster(root / "ripple", **SETTINGS)
        raw = raw_cluster(root / "raw")
        port = free_ports(1)[0]
        fake = Proc(
            python_argv("-m", "bench.fake_workers", "--port", str(port)),
            root / "logs" / "fake_workers.log",
        )
        try:
            ripple.start_all()
            raw.start_all()
            leader = ripple.ready(SETTLE_TIMEOUT_S)
            raw.leader(SETTLE_TIMEOUT_S)
            tokens, owned = root / "tokens.txt", root / "owned.txt"
            reg = register_workers(ripple.url(leader), WORKERS, tokens, f"http://127.0.0.1:{port}")
            if reg["workers"] != WORKERS:
                raise RuntimeError(f"registered {reg['workers']} of {WORKERS} workers")
            _owned_file(ripple, leader, tokens, owned)
            base = store_base(ripple.config.store)
            for round_no in range(REPEATS):
                # The client does not follow redirects: re-resolve the leader (an election
                # between runs would otherwise read as errors).
                leader = ripple.leader()
                before = _reports(ripple, leader)
                first = str(round_no * OFFSETS_PER_RUN)
                out = wrk(
                    ripple.url(leader),
                    "checkpoints.lua",
                    wrk_duration_s(quick),
                    CONCURRENCY,
                    str(owned),
                    base,
                    first,
                )
                after = _reports(ripple, leader)
                out["fenced"] = after["fenced"] - before["fenced"]
                accepted = after["accepted"] - before["accepted"]
                # A reference the leader does not take (say checkpoints.lua's names drifting
                # from checkpoint_key) fences every entry: then there is no figure to show.
                # A few may be fenced for real: an ack slower than a round of the workers is
                # overtaken by its worker's next, and its offset is then behind.
                if out["fenced"] > FENCED_SHARE_MAX * (accepted + out["fenced"]):
                    raise RuntimeError(
                        f"{out['fenced']:.0f} entries fenced, {accepted:.0f} accepted: the "
                        "leader refuses this benchmark's checkpoints (see its log)"
                    )
                runs["ripple"].append(out)
                runs["raw"].append(
                    wrk(
                        raw.url(raw.leader()) + "/write",
                        "writes.lua",
                        wrk_duration_s(quick),
                        CONCURRENCY,
                        "raw-",
                    )
                )
        finally:
            ripple.stop_all()
            raw.stop_all()
            fake.stop()

    base_per_s = statistics.median(r["ops_per_s"] for r in runs["raw"])
    rows: dict[str, dict[str, float]] = {}
    for name in ("ripple", "raw"):
        cols = rate_columns(runs[name], "acks", base_per_s)
        ratio = cols.pop("ratio")
        row = {"concurrency": CONCURRENCY, **cols, "baseline_per_s": base_per_s, "ratio": ratio}
        if name == "ripple":
            row["checkpoints_per_s"] = row["acks_per_s"] * PARTITIONS / WORKERS
            row["fenced"] = sum(r["fenced"] for r in runs[name])
            row["workers_at_10s"] = row["acks_per_s"] * 10.0
        rows[name] = row
    return rows
