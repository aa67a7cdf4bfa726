"""Fault matrix, Spark cell (issue 39): the Spark Connect server killed (-9) mid-batch and
started again on the same port, under the running pipeline of scenario f
(tests/chaos/matrix.py), ending as scenario f does: every key equal to the batch job, the log
holding exactly what the producer appended, every recorded checkpoint loading, no
partition's epoch gone back.

The server is this file's own (the session's is shared and must not restart); the workers
and the rig's oracle both use it, the oracle only after it is back. What the cell adds to the
matrix's checks: the workers saw Spark unreachable (else the run proved nothing), no worker
left ACTIVE or re-registered, no partition changed owner or epoch, no election: a worker
without Spark keeps heartbeating, so it keeps its lease and its partitions, and makes a new
session once the server answers again.

`soak` (opt-in with --soak): tests/integration/test_spark_restart.py holds the same
behaviour in the default run, with one worker and no producer running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.spark_server import SparkConnectServer
from tests.chaos.matrix import (
    WORKERS,
    Matrix,
    check_held_steady,
    open_matrix,
    placement,
    run_cell,
)

pytestmark = [pytest.mark.spark, pytest.mark.soak, pytest.mark.timeout(1200)]

# Down long enough for the workers' batches to fail and their health to say so.
DOWN_S = 8.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SparkConnectServer]:
    spark = SparkConnectServer(str(tmp_path / "spark"))
    spark.start()
    try:
        yield spark
    finally:
        spark.stop()


@pytest.fixture
def matrix(
    tmp_path: Path,
    server: SparkConnectServer,
    moto_endpoint: str,
    s3_bucket: tuple[Any, str],
) -> Iterator[Matrix]:
    with open_matrix(tmp_path, server.url, moto_endpoint, s3_bucket[1]) as m:
        yield m


def test_spark_connect_server_restarted_mid_batch(
    matrix: Matrix, server: SparkConnectServer
) -> None:
    m = matrix
    before = placement(m)
    unreachable_seen: set[str] = set()

    def down() -> None:
        server.kill()

    def seen_down() -> None:
        for wid in WORKERS:
            health = m.rig.health(wid) or {}
            if health.get("spark", {}).get("reachable") is False:
                unreachable_seen.add(wid)

    def back() -> None:
        seen_down()  # read before the restart: after DOWN_S every worker has tried a batch
        server.start(port=server.port)

    figures, began, undone = run_cell(m, "spark_restart", down, back, DOWN_S)
    check_held_steady(m, figures, before, (began, undone), "a Spark restart")
    reconnects = {wid: m.rig.metric(wid, "ripple_worker_spark_reconnects_total") for wid in WORKERS}
    print(f"[matrix] spark_restart: unreachable seen by {sorted(unreachable_seen)}; {reconnects}")
    if not unreachable_seen:
        figures.violations.append("INVALID RUN: no worker ever saw Spark unreachable")
    if not all(n >= 1 for n in reconnects.values()):
        figures.violations.append(f"a worker made no new session: {reconnects}")
    assert not figures.violations, figures.violations
