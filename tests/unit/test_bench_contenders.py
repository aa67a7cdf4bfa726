"""The `structured_streaming` benchmark's accounting: CPU read from /proc, what a measure
spent (`Usage.since`, `Tally.spending`), and the rows made of it (`Tally.rates`,
`Tally.cost_rows`). The contenders are a fake with the two readings `Tally` takes."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from bench.contenders import GROUPS, STAGES, Usage, cpu_s
from bench.streaming_query import Batch
from bench.structured_streaming import Tally

BUSY_S = 0.05


def test_cpu_s_counts_this_process_working() -> None:
    before = cpu_s(os.getpid())
    t0 = time.process_time()
    while time.process_time() - t0 < BUSY_S:
        pass
    # /proc counts in clock ticks (10 ms here), so allow one tick either way.
    assert cpu_s(os.getpid()) - before >= BUSY_S - 0.011


def test_usage_since_is_the_difference_per_group() -> None:
    before = Usage(at_s=10.0, cpu_s={"spark": 1.0, "workers": 2.0})
    after = Usage(at_s=12.5, cpu_s={"spark": 3.0, "workers": 2.5})
    spent = after.since(before)
    assert spent.at_s == 2.5
    assert spent.cpu_s == {"spark": 2.0, "workers": 0.5}


class FakeContenders:
    """Each reading advances: the clock by 2 s, every group's CPU by 1 s, the workers'
    counters by one batch of 0.5 s in each stage."""

    def __init__(self) -> None:
        self.readings = 0
        self.work_readings = 0

    def usage(self) -> Usage:
        self.readings += 1
        n = float(self.readings)
        return Usage(at_s=2.0 * n, cpu_s=dict.fromkeys(GROUPS, n))

    def ripple_work(self) -> dict[str, float]:
        self.work_readings += 1
        n = float(self.work_readings)
        return {"batches": n, **dict.fromkeys(STAGES, 0.5 * n)}


def test_spending_counts_the_block_to_its_system() -> None:
    c: Any = FakeContenders()
    t = Tally()
    with t.spending(c, "ss"):
        pass
    assert t.wall_s == {"ripple": 0.0, "ss": 2.0}
    assert t.cpu_s["ss"] == dict.fromkeys(GROUPS, 1.0)
    assert c.work_readings == 0  # the peer's measure reads no worker counters
    with t.spending(c, "ripple"):
        pass
    assert t.wall_s["ripple"] == 2.0
    assert t.ripple_work == {"batches": 1.0, **dict.fromkeys(STAGES, 0.5)}


def test_spending_takes_the_workers_counters_read_before_a_pause() -> None:
    c: Any = FakeContenders()
    t = Tally()
    with t.spending(c, "ripple", {"batches": 0.0, **dict.fromkeys(STAGES, 0.0)}):
        pass
    assert t.ripple_work == {"batches": 1.0, **dict.fromkeys(STAGES, 0.5)}


def test_rates_are_medians_with_the_ratio_to_the_peers_median() -> None:
    t = Tally()
    t.figures["ripple"] = [300.0, 100.0, 200.0]
    t.figures["ss"] = [50.0, 100.0, 400.0]
    rates = t.rates("ripple")
    assert rates == {
        "rows_per_s": 200.0,
        "min_rows_per_s": 100.0,
        "max_rows_per_s": 300.0,
        "ratio": 2.0,
    }
    assert t.rates("ss")["ratio"] == 1.0


def test_cost_rows_are_per_batch_and_cores_over_the_measures_wall() -> None:
    t = Tally()
    t.ripple_work = {"batches": 4.0, "plan": 0.4, "spark": 2.0, "merge": 0.2}
    t.ss_batches = [
        Batch(
            rows=10,
            seconds={
                "trigger": 3.0,
                "latest_offset": 0.5,
                "get_batch": 0.5,
                "planning": 0.5,
                "add_batch": 1.5,
                "state_commit": 0.25,
                "wal_commit": 0.1,
                "commit_offsets": 0.2,
            },
        )
    ]
    t.wall_s = {"ripple": 4.0, "ss": 0.0}
    t.cpu_s["ripple"] = {"spark": 6.0, "workers": 1.0, "coordinators": 0.5, "bench": 0.0}
    rows = t.cost_rows("backlog")
    ripple, ss = rows["cost/backlog/ripple"], rows["cost/backlog/ss"]
    assert ripple["batches"] == 4.0
    assert ripple["input_s"] == pytest.approx(0.1)
    assert ripple["job_s"] == pytest.approx(0.5)
    assert ripple["state_s"] == pytest.approx(0.05)
    assert ripple["s_per_batch"] == pytest.approx(0.65)
    assert ripple["spark_cores"] == 1.5 and ripple["workers_cores"] == 0.25
    assert ss["batches"] == 1 and ss["s_per_batch"] == 3.0
    assert ss["input_s"] == 1.0 and ss["job_s"] == 2.0 and ss["state_s"] == 0.25
    assert ss["commit_s"] == pytest.approx(0.3)
    assert ss["spark_cores"] == 0.0  # no wall time counted: no division by zero
