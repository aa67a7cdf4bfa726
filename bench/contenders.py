"""The two systems of the `structured_streaming` benchmark on one rig, taking turns: Ripple's
workers and the Structured Streaming query (bench/streaming_query.py), with what each has
done and what the machine's processes have spent.

Invariant: while one system is measured the other does nothing: the workers are stopped
(SIGSTOP) whenever the query runs a measured phase, the query is stopped whenever the
workers do; `resume_ripple` undoes a pause (and `Proc.stop` continues a stopped worker
before ending it). Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from bench.harness import CATCH_UP_TIMEOUT_S
from bench.streaming_query import Batch, StreamingAggregation
from testkit.http import call
from testkit.pipeline_rig import PARTITIONS, PipelineRig
from testkit.prom import parse, value
from testkit.wait import wait_until

__all__ = ["GROUPS", "STAGES", "Contenders", "Usage", "cpu_s"]

REACHED_POLL_S = 0.05
# The workers' micro-batch stages (`ripple_worker_batch_seconds_total{stage=...}`).
STAGES = ("plan", "spark", "merge")
# The processes whose CPU is counted: the Spark Connect JVM (both systems' jobs), the
# workers, the coordinators, and this process (the producer, the load, the probes and
# the query's Connect client).
GROUPS = ("spark", "workers", "coordinators", "bench")
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) process `pid` has used (Linux)."""
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    fields = stat.rsplit(")", 1)[1].split()  # fields from the third (state) on
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """The clock and each group's CPU seconds at one moment."""

    at_s: float  # monotonic
    cpu_s: dict[str, float]

    def since(self, before: Usage) -> Usage:
        """What was spent from `before` to this moment."""
        spent = {g: self.cpu_s[g] - before.cpu_s[g] for g in self.cpu_s}
        return Usage(at_s=self.at_s - before.at_s, cpu_s=spent)


class Contenders:
    """Ripple's workers and the query on one rig; `spark_pid` is the Spark Connect JVM's."""

    def __init__(self, rig: PipelineRig, ss: StreamingAggregation, spark_pid: int) -> None:
        self.rig = rig
        self.ss = ss
        self.spark_pid = spark_pid
        self.paused = False

    def pause_ripple(self) -> None:
        if not self.paused:
            for proc in self.rig.workers.values():
                proc.signal(signal.SIGSTOP)
            self.paused = True

    def resume_ripple(self) -> None:
        if self.paused:
            for proc in self.rig.workers.values():
                proc.signal(signal.SIGCONT)
            self.paused = False

    def ends(self) -> dict[int, int]:
        return {p: self.rig.source.end_offset(p) for p in range(PARTITIONS)}

    def total_rows(self) -> int:
        return sum(self.ends().values())

    def ripple_reached(self, ends: dict[int, int]) -> None:
        """Until every partition's owner has processed at least to `ends` (bounded): caught
        up with what was there, while a producer keeps appending."""

        def reached() -> bool:
            parts = self.rig.table()
            healths = {w: self.rig.health(w) for w in self.rig.workers}
            for p in parts:
                held = (healths.get(p["owner"]) or {}).get("partitions", {})
                mine = held.get(str(p["partition"]))
                if p["status"] != "online" or mine is None or mine["epoch"] != p["epoch"]:
                    return False
                if mine["offset"] < ends[p["partition"]]:
                    return False
            return True

        wait_until(reached, "Ripple caught up", CATCH_UP_TIMEOUT_S, REACHED_POLL_S)

    def usage(self) -> Usage:
        """Now, and every group's CPU seconds so far (readable while the workers are
        stopped)."""
        times = os.times()
        return Usage(
            at_s=time.monotonic(),
            cpu_s={
                "spark": cpu_s(self.spark_pid),
                "workers": sum(cpu_s(p.pid) for p in self.rig.workers.values()),
                "coordinators": sum(cpu_s(p.pid) for p in self.rig.cluster.procs.values()),
                "bench": times.user + times.system,
            },
        )

    def ripple_work(self) -> dict[str, float]:
        """The workers' micro-batches so far and their seconds by stage, summed."""
        out = dict.fromkeys(("batches", *STAGES), 0.0)
        for wid in self.rig.workers:
            samples = parse(str(call("GET", self.rig.worker_url(wid) + "/metrics").body))
            out["batches"] += value(samples, "ripple_worker_batches_total") or 0.0
            for stage in STAGES:
                found = value(samples, "ripple_worker_batch_seconds_total", stage=stage)
                out[stage] += found or 0.0
        return out

    def ss_caught_up(self) -> list[Batch]:
        """The peer's availableNow run over what it has not seen (none when it has seen every
        row); checks it took every row."""
        if self.ss.rows_processed == self.total_rows():
            return []
        batches = self.ss.run_available_now()
        self.check_ss_rows()
        return batches

    def check_ss_rows(self) -> None:
        total = self.total_rows()
        if self.ss.rows_processed != total:
            raise RuntimeError(f"the query took {self.ss.rows_processed} rows; the log has {total}")
