"""Chaos: a windowed pipeline under a worker killed mid-checkpoint, an old owner SIGSTOPped and
resumed after its partitions moved, the leader killed and one rescale (3 -> 5), producers
running with out-of-order event times, ends with results equal to its batch job, window for
window.

Real parts: three coordinator processes, three `ripple worker` processes on the session's
Spark Connect server, a local-directory store. The spec is a tumbling minute per host with
20 s of lateness; one record in six is up to a minute behind, so late records exist all
along. The kill lands inside a checkpoint round: the test watches the store for a new
checkpoint object of a partition the victim owns at its epoch, and kills -9 the moment it
appears (before its report and its publish). Checked at the end, once every partition is
ONLINE and caught up and every final window is published: the results windows table read by
Spark SQL (`spark.read.parquet`) and by DuckDB (`read_parquet`) equals
`windowed_generations_job` over both generations, row for row (no duplicate, no missing row);
the owners' open windows equal its open ones; the late records are exactly the `-late` dead
letters' and in no window (the table's counts are those of the on-time records); no other
dead letter was written.
"""

from __future__ import annotations

import datetime
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pipeline.spec.produce import SpecProducer
from pipeline.spec.results import WINDOWS, table_prefix
from pipeline.spec.run import PipelineInfo
from shared.checkpoint_ref import checkpoint_key_parts, checkpoints_prefix
from testkit.background import Background
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.chaos.harness import Figures
from tests.chaos.test_pipeline_chaos import kill_leader
from tests.integration.test_pipeline_specs import POOL, active, admin, caught_up, describe
from tests.integration.test_pipelines_api import speaks_pipelines
from tests.integration.test_windows_rescale_spark import (
    NAME,
    SPEC,
    in_order,
    late_records,
    open_windows,
    oracle,
    windows_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

SEED = 53
HOSTS = 16
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
ROWS_PER_PRODUCE = 40
PRODUCE_EVERY_S = 0.4
WORKERS = ("w1", "w2", "w3")
CATCH_UP_TIMEOUT_S = 240.0
RESCALE_TIMEOUT_S = 240.0
MOVE_TIMEOUT_S = 60.0
PUBLISHED_TIMEOUT_S = 120.0
CHECKPOINT_WATCH_S = 30.0  # a checkpoint round comes every second (the rig's interval)
CHECKPOINT_POLL_S = 0.01
RESTART_AFTER_S = (0.5, 2.0)


class Feed(Background):
    """Rows to the pipeline every PRODUCE_EVERY_S, event time rising about 1 s a row, a few
    seconds out of order, one in six up to 60 s behind (past the lateness: late records)."""

    def __init__(self, producer: SpecProducer, seed: int) -> None:
        super().__init__("windows-feed")
        self.producer = producer
        self.rng = random.Random(seed)
        self.rows = 0

    def batch(self) -> list[dict[str, Any]]:
        out = []
        for _ in range(ROWS_PER_PRODUCE):
            rng, i = self.rng, self.rows
            behind = rng.randint(0, 60) if rng.random() < 1 / 6 else rng.randint(-3, 3)
            at = START + datetime.timedelta(seconds=i - behind)
            out.append({"host": f"h{rng.randrange(HOSTS)}", "ms": rng.randrange(1000), "at": at})
            self.rows += 1
        return out

    def _run(self) -> None:
        while not self._stop.wait(PRODUCE_EVERY_S):
            self.producer.produce(self.batch())


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path}/store", spark_remote).running()


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def table(rig: PipelineRig) -> list[dict[str, Any]]:
    reply = admin(rig, "GET", f"/v1/partitions?pipeline={NAME}&consistent=true")
    assert reply.status == 200, reply
    return reply.body["partitions"]  # type: ignore[no-any-return]


def checkpoint_keys(rig: PipelineRig, partitions: list[int]) -> set[str]:
    return {k for n in partitions for k in rig.store.list_keys(checkpoints_prefix(n))}


def kill_mid_checkpoint(
    rig: PipelineRig, info: PipelineInfo, rng: random.Random, figures: Figures
) -> None:
    """Kill -9 a worker the moment a new checkpoint object of one of its partitions (at its
    epoch) is in the store: inside its checkpoint round, before the report and the publish."""
    parts = [x for x in table(rig) if x["owner"] in WORKERS]
    victim = rng.choice(sorted({x["owner"] for x in parts}))
    # The table names the pipeline's own numbers (0..); the store its partitions' slots.
    mine = {info.first_slot + x["partition"]: x["epoch"] for x in parts if x["owner"] == victim}
    before = checkpoint_keys(rig, list(mine))

    def written() -> bool:
        for key in checkpoint_keys(rig, list(mine)) - before:
            named = checkpoint_key_parts(key)
            if named is not None and mine.get(named[0]) == named[1]:
                return True
        time.sleep(CHECKPOINT_POLL_S)
        return False

    wait_until(written, f"a new checkpoint of {victim}", CHECKPOINT_WATCH_S)
    rig.workers[victim].kill9()
    figures.fault("kill9_worker_mid_checkpoint")
    time.sleep(rng.uniform(*RESTART_AFTER_S))
    rig.start_worker(victim, "--label", "zone=a", "--slots", "16")


def pause_until_moved(rig: PipelineRig, rng: random.Random, figures: Figures) -> None:
    """SIGSTOP an owner until none of its partitions is its own any more, then SIGCONT: it
    wakes up fenced, with states, closed windows and checkpoints it may try to publish."""
    owning = sorted({x["owner"] for x in table(rig) if x["owner"] in WORKERS})
    victim = rng.choice(owning)
    proc = rig.workers[victim]
    proc.signal(signal.SIGSTOP)
    figures.fault("sigstop_owner")
    try:
        wait_until(
            lambda: all(x["owner"] != victim for x in table(rig)),
            f"{victim}'s partitions moved",
            MOVE_TIMEOUT_S,
        )
    finally:
        proc.signal(signal.SIGCONT)


def rescale(rig: PipelineRig, rng: random.Random, figures: Figures) -> None:
    """3 -> 5, the leader killed -9 while it is in flight."""
    started = admin(rig, "POST", f"/v1/pipelines/{NAME}/rescale", {"partitions": 5})
    assert started.status == 202, started
    phase = (describe(rig, NAME).get("rescale") or {}).get("phase")
    assert phase != "done", "the rescale ended before the leader could be killed: INVALID"
    kill_leader(rig, rng, figures)
    wait_until(
        lambda: (describe(rig, NAME).get("rescale") or {}).get("phase") == "done",
        "rescaled to 5 partitions",
        RESCALE_TIMEOUT_S,
    )


def read_by_spark(spark: SparkSession, path: str) -> list[dict[str, Any]]:
    rows = [r.asDict() for r in spark.read.parquet(path).collect()]
    return in_order([{"key": r.pop("host"), **r} for r in rows])


def read_by_duckdb(path: str) -> list[dict[str, Any]]:
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        cursor = con.execute(f"SELECT * FROM read_parquet('{path}/*.parquet')")
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    finally:
        con.close()
    return in_order([{"key": r.pop("host"), **r} for r in rows])


def utc(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Window bounds as aware UTC datetimes, whatever zone a reader gave them in."""
    out = []
    for r in rows:
        fixed = dict(r)
        for k in ("window_start", "window_end"):
            v = fixed[k]
            fixed[k] = (
                v.replace(tzinfo=datetime.UTC) if v.tzinfo is None else v.astimezone(datetime.UTC)
            )
        out.append(fixed)
    return out


def test_a_windowed_pipeline_under_kills_a_pause_and_a_rescale_publishes_exactly_once(
    rig: PipelineRig, spark: SparkSession
) -> None:
    figures = Figures(scenario="windows", seed=SEED)
    rng = random.Random(SEED)
    speaks_pipelines(rig.cluster)
    body = {"name": NAME, "spec_text": SPEC, "partitions": 3, "pool": POOL}
    assert admin(rig, "POST", "/v1/pipelines", body).status == 202
    old = PipelineInfo.from_describe(wait_until(lambda: active(rig, NAME), "active", 60))
    producer = SpecProducer(rig.store, old, lambda: PipelineInfo.newest(describe(rig, NAME)))
    feed = Feed(producer, SEED)
    producer.produce(feed.batch())
    for wid in WORKERS:
        rig.start_worker(wid, "--label", "zone=a", "--slots", "16")
    rig.wait_ready()
    wait_until(lambda: caught_up(rig, producer), "caught up", CATCH_UP_TIMEOUT_S)
    feed.start()
    try:
        kill_mid_checkpoint(rig, old, rng, figures)
        pause_until_moved(rig, rng, figures)
        rescale(rig, rng, figures)
        rows = feed.rows
        wait_until(lambda: feed.rows >= rows + 5 * ROWS_PER_PRODUCE, "more rows after", 30)
    finally:
        feed.stop()
    new = PipelineInfo.from_describe(describe(rig, NAME))
    assert (new.partitions, new.generation) == (5, 1)
    assert producer.info == new, "the producer did not follow the seals"
    owned = wait_until(lambda: caught_up(rig, producer), "caught up in g1", CATCH_UP_TIMEOUT_S)
    want, late = oracle(spark, rig, [old, new])
    assert want.closed and want.open and late
    wait_until(
        lambda: len(windows_table(rig, new.incarnation)) >= len(want.closed),
        "every final window published",
        PUBLISHED_TIMEOUT_S,
    )
    path = (
        rig.store_uri.removeprefix("file://") + "/" + table_prefix(NAME, new.incarnation, WINDOWS)
    )
    by_spark, by_duckdb = read_by_spark(spark, path), read_by_duckdb(path)
    twice = [
        k for k, n in Counter((r["key"], r["window_start"]) for r in by_spark).items() if n > 1
    ]
    assert not twice, f"windows published twice: {twice[:5]}"
    assert utc(by_spark) == want.closed
    assert utc(by_duckdb) == want.closed
    assert open_windows(rig, owned) == want.open
    numbers = [*range(old.first_slot, old.first_slot + 3)]
    numbers += range(new.first_slot, new.first_slot + 5)
    assert late_records(rig, numbers) == late
    # Late records are in no window: the windows count exactly the on-time records.
    assert sum(r["n"] for r in want.closed + want.open) == feed.rows - len(late)
    others = [
        k
        for n in numbers
        for k in rig.store.list_keys(f"deadletter/p{n:05d}/")
        if not k.endswith("-late.parquet")
    ]
    assert others == [], others[:5]
    figures.ops.update(rows=feed.rows, windows=len(want.closed), late=len(late))
    print(figures.line())
    assert figures.faults == {
        "kill9_worker_mid_checkpoint": 1,
        "sigstop_owner": 1,
        "kill9_leader": 1,
    }
    assert not figures.violations, figures.violations
