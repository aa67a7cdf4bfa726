"""`ripple partitions` and `ripple workers` show input rates and lag, and a worker's load as
its summed rate when the leader has it, else its count, labelled as which."""

from __future__ import annotations

from typing import Any

from ripple.tables import render_partitions, render_workers


def cell(table: str, row: int, column: str) -> str:
    lines = table.splitlines()
    return lines[row].split()[lines[0].split().index(column)]


def worker(wid: str, partitions: int, **leader_only: Any) -> dict[str, Any]:
    return {
        "worker_id": wid,
        "state": "active",
        "incarnation": 1,
        "partitions": partitions,
        "address": f"http://{wid}:9",
        **leader_only,
    }


def test_partitions_table_shows_rate_and_lag() -> None:
    base = {"owner": "w1", "epoch": 1, "status": "online", "checkpoint": None}
    table = render_partitions(
        {
            "partitions": [
                {"partition": 0, **base, "lag_records": 1200, "rate_per_s": 33.333},
                {"partition": 1, **base},
            ]
        }
    )
    assert cell(table, 1, "RATE") == "33.3/s" and cell(table, 1, "LAG") == "1200"
    assert cell(table, 2, "RATE") == "-" and cell(table, 2, "LAG") == "-"


def test_workers_load_is_the_summed_rate_else_the_labelled_count() -> None:
    table = render_workers(
        {
            "workers": [
                worker("w1", 3, rate_per_s=1500.25, lag_records=40, load=3.0),
                worker("w2", 2, load=2.0),  # some partition's rate is stale: no rate
                worker("w3", 0),  # a follower's answer: nothing leader-only
            ]
        }
    )
    assert cell(table, 1, "LOAD") == "1500.2/s" and cell(table, 1, "LAG") == "40"
    assert cell(table, 2, "LOAD") == "count=2"
    assert cell(table, 3, "LOAD") == "count=0" and cell(table, 3, "LAG") == "-"
