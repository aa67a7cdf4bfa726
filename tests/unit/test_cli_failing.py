"""`ripple partitions` and `ripple workers` show partitions whose micro-batches keep failing."""

from __future__ import annotations

from ripple.tables import render_partitions, render_workers


def test_partitions_table_shows_failing_batches() -> None:
    error = "FAILED_READ_FILE.FILE_NOT_EXIST /stage/w1/source/p00003/" + "x" * 200
    table = render_partitions(
        {
            "partitions": [
                {"partition": 2, "owner": "w1", "epoch": 1, "status": "online", "checkpoint": None},
                {
                    "partition": 3,
                    "owner": "w1",
                    "epoch": 1,
                    "status": "online",
                    "checkpoint": None,
                    "failing": {"failures": 4, "error": error},
                },
            ]
        }
    )
    header, row2, row3 = table.splitlines()[:3]
    assert "FAILING" in header
    assert "4x: FAILED_READ_FILE.FILE_NOT_EXIST" in row3 and "x" * 100 not in row3
    assert "FAILED" not in row2


def test_workers_table_shows_failing_partition_counts() -> None:
    table = render_workers(
        {
            "workers": [
                {
                    "worker_id": "w1",
                    "state": "active",
                    "incarnation": 1,
                    "partitions": 5,
                    "liveness": "alive",
                    "load": 5.0,
                    "failing_partitions": 2,
                    "address": "http://127.0.0.1:9",
                }
            ]
        }
    )
    header, row = table.splitlines()[:2]
    columns = header.split()
    assert row.split()[columns.index("FAILING")] == "2"


def test_the_workers_table_shows_each_profile() -> None:
    from ripple.tables import render_workers

    base = {"state": "active", "incarnation": 1, "partitions": 0, "address": "http://h:1"}
    out = render_workers(
        {
            "workers": [
                {**base, "worker_id": "w1", "labels": {"zone": "a", "gpu": "t"}, "slots": 8},
                {**base, "worker_id": "w2", "labels": {}, "slots": 64},
                {**base, "worker_id": "w3", "labels": None, "slots": None},
            ]
        }
    )
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "gpu=t,zone=a/8" in rows["w1"] and " /64 " in rows["w2"] and " - " in rows["w3"]
