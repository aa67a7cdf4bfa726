"""Chaos: three recorded pipelines with their own specs on one cluster, producers running, end
each equal to its own spec's batch job.

Real parts: three coordinator processes, three `ripple worker` processes on the session's
Spark Connect server, a local-directory store. The pipelines differ in every way a spec can:
`orders` (decimal amounts, a transform, an HLL distinct count, a mean; 3 partitions, pool
zone=a), `clicks` (keyed by page: sums and maxima of integers, an HLL count of users, the
first user; 2 partitions, pool tier=big) and `sensors` (keyed by device: a mean, min, max and
last of integer readings, a last timestamp; 4 partitions, any profiled worker). Workers: w1
zone=a, w2 zone=a and tier=big, w3 tier=big.

Faults, one after another with every producer running: a worker that owns `orders`
partitions killed -9 and started again; the leader killed -9 and started again; `orders`
rescaled from 3 partitions to 5 (its producer follows the seals to the new numbers);
`sensors` paused (its offsets hold while rows arrive) and resumed; `clicks` dropped with
`ripple pipelines drop --purge`. Checked at the end: `orders` and `sensors` are every
partition ONLINE, caught up, and every key equal to its spec's batch job over everything
produced, `orders` over both its generations (estimates included); `clicks` is gone from the
cluster and no object of its partitions is left in the store; no partition of any pipeline was
ever seen at an epoch below one seen before; each pipeline's partitions were only ever held by
workers of its pool.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pipeline.spec.produce import SpecProducer
from pipeline.spec.purge import pipeline_prefixes
from pipeline.spec.run import PipelineInfo
from testkit.background import Background
from testkit.cluster import ADMIN
from testkit.http import call
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.chaos.harness import Figures
from tests.chaos.test_pipeline_chaos import kill_leader
from tests.integration.test_cli import ripple
from tests.integration.test_pipeline_rescale import every_generation
from tests.integration.test_pipeline_spec_spark import orders as orders_table
from tests.integration.test_pipeline_spec_spark import spec_text as orders_spec
from tests.integration.test_pipeline_specs import (
    active,
    admin,
    caught_up,
    describe,
    differences,
    oracle,
    owners,
)
from tests.integration.test_pipelines_api import speaks_pipelines

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

SEED = 41
CATCH_UP_TIMEOUT_S = 240.0
RESCALE_TIMEOUT_S = 180.0
PRODUCE_EVERY_S = 0.5
ROWS_PER_PRODUCE = 40
WORKERS = {
    "w1": ("--label", "zone=a", "--slots", "16"),
    "w2": ("--label", "zone=a", "--label", "tier=big", "--slots", "16"),
    "w3": ("--label", "tier=big", "--slots", "16"),
}

CLICKS = """
[schema]
ddl = "user STRING, page STRING, ms BIGINT"
key = "page"

[[aggregations]]
name = "views"
fn = "count"

[[aggregations]]
name = "total_ms"
fn = "sum"
column = "ms"

[[aggregations]]
name = "slowest"
fn = "max"
column = "ms"

[[aggregations]]
name = "visitors"
fn = "approx_distinct"
column = "user"

[[aggregations]]
name = "first_user"
fn = "first"
column = "user"
"""

SENSORS = """
[schema]
ddl = "device STRING, milli_c BIGINT, ts TIMESTAMP"
key = "device"

[[aggregations]]
name = "readings"
fn = "count"

[[aggregations]]
name = "mean_milli_c"
fn = "mean"
column = "milli_c"

[[aggregations]]
name = "coldest"
fn = "min"
column = "milli_c"

[[aggregations]]
name = "hottest"
fn = "max"
column = "milli_c"

[[aggregations]]
name = "last_reading"
fn = "last"
column = "milli_c"

[[aggregations]]
name = "last_at"
fn = "last"
column = "ts"
"""

# name -> (spec, partitions, pool, the workers that pool selects)
PIPELINES: dict[str, tuple[str, int, dict[str, str], set[str]]] = {
    "orders": (orders_spec(), 3, {"zone": "a"}, {"w1", "w2"}),
    "clicks": (CLICKS, 2, {"tier": "big"}, {"w2", "w3"}),
    "sensors": (SENSORS, 4, {}, {"w1", "w2", "w3"}),
}


def clicks_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return [
        {
            "user": f"u{rng.randrange(50)}",
            "page": f"/p{rng.randrange(12)}",
            "ms": rng.randrange(5000),
        }
        for _ in range(n)
    ]


def sensors_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    start = datetime(2026, 3, 1)
    return [
        {
            "device": f"d{rng.randrange(15)}",
            "milli_c": rng.randrange(-20_000, 40_000),
            "ts": start + timedelta(seconds=rng.randrange(10**6)),
        }
        for _ in range(n)
    ]


def orders_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    table = orders_table(rng).slice(0, n)
    return [{k: v for k, v in r.items() if k != "offset"} for r in table.to_pylist()]


ROWS = {"orders": orders_rows, "clicks": clicks_rows, "sensors": sensors_rows}


class Feed(Background):
    """One thread producing rows to every pipeline it is given, until stopped or told to
    leave one out."""

    def __init__(self, producers: dict[str, SpecProducer], seed: int) -> None:
        super().__init__("pipelines-feed")
        self.producers = producers
        self.rng = random.Random(seed)
        self.rows = dict.fromkeys(producers, 0)
        self.paused: set[str] = set()
        self.rounds = 0  # every PRODUCE_EVERY_S: what a wait for time to pass counts
        # Held through each produce: whoever takes it knows no produce is half done.
        self.lock = threading.Lock()

    def leave_out(self, name: str) -> None:
        """Produce no more to `name`; returns once no produce to it is in flight."""
        with self.lock:
            self.paused.add(name)

    def _run(self) -> None:
        while not self._stop.wait(PRODUCE_EVERY_S):
            self.rounds += 1
            for name, producer in list(self.producers.items()):
                with self.lock:
                    if name in self.paused:
                        continue
                    batch = ROWS[name](self.rng, ROWS_PER_PRODUCE)
                    producer.produce(batch)
                    self.rows[name] += len(batch)


class Epochs(Background):
    """Every pipeline's partition table read all along: no partition's epoch goes back, and
    no partition is held by a worker outside its pipeline's pool."""

    def __init__(self, rig: PipelineRig) -> None:
        super().__init__("pipelines-epochs")
        self.rig = rig
        self.seen: dict[tuple[str, int], int] = {}
        self.violations: list[str] = []
        self.reads = 0

    def _run(self) -> None:
        c = self.rig.cluster
        while not self._stop.wait(0.3):
            for name, (_, _, _, pool) in PIPELINES.items():
                try:
                    leader = c.leader(5.0)
                    r = c.get(leader, f"/v1/partitions?pipeline={name}&consistent=true")
                except (AssertionError, OSError):
                    continue
                if r.status != 200:
                    continue
                self.reads += 1
                for x in r.body["partitions"]:
                    where = (name, x["partition"])
                    if x["epoch"] < self.seen.get(where, 0):
                        self.violations.append(f"{where} epoch {x['epoch']} < {self.seen[where]}")
                    self.seen[where] = max(self.seen.get(where, 0), x["epoch"])
                    if x["owner"] is not None and x["owner"] not in pool:
                        self.violations.append(f"{where} held by {x['owner']} outside its pool")


def results(rig: PipelineRig, name: str, holders: dict[int, str]) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for n, wid in holders.items():
        r = call("GET", rig.worker_url(wid) + f"/v1/partitions/{n}/state")
        assert r.status == 200 and r.body["pipeline"] == name, r
        for row in r.body["rows"]:
            key = row.pop("key")
            assert key not in out, f"{name}: key {key!r} in two partitions"
            out[key] = row
    return out


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path}/store", spark_remote).running()


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def test_three_pipelines_under_kills_pause_and_a_purge_equal_their_batch_jobs(
    rig: PipelineRig, spark: SparkSession
) -> None:
    figures = Figures(scenario="pipelines", seed=SEED)
    rng = random.Random(SEED)
    speaks_pipelines(rig.cluster)
    producers: dict[str, SpecProducer] = {}
    for name, (spec, partitions, pool, _) in PIPELINES.items():
        body = {"name": name, "spec_text": spec, "partitions": partitions, "pool": pool}
        made = admin(rig, "POST", "/v1/pipelines", body)
        assert made.status == 202, made
        info = PipelineInfo.from_describe(
            wait_until(lambda n=name: active(rig, n), f"{name} active", 60)
        )
        # Reading the describe again is how a producer follows a rescale's seals.
        producers[name] = SpecProducer(
            rig.store, info, lambda n=name: PipelineInfo.newest(describe(rig, n))
        )
        producers[name].produce(ROWS[name](rng, 300))
    for wid, profile in WORKERS.items():
        rig.start_worker(wid, *profile)
    rig.wait_ready()
    for name, producer in producers.items():
        wait_until(lambda p=producer: caught_up(rig, p), f"{name} caught up", CATCH_UP_TIMEOUT_S)

    feed, epochs = Feed(producers, SEED), Epochs(rig)
    feed.start()
    epochs.start()
    try:
        # A worker holding `orders` partitions, killed -9 and started again.
        holders = caught_up(rig, producers["orders"]) or {}
        victim = rng.choice(sorted(set(holders.values())))
        rig.workers[victim].kill9()
        figures.fault("kill9_worker")
        time.sleep(rng.uniform(1.0, 3.0))
        rig.start_worker(victim, *WORKERS[victim])
        kill_leader(rig, rng, figures)

        # `orders` rescaled 3 -> 5 while its producer keeps writing through the seals.
        before = producers["orders"].info
        started = admin(rig, "POST", "/v1/pipelines/orders/rescale", {"partitions": 5})
        assert started.status == 202, started
        wait_until(
            lambda: (describe(rig, "orders").get("rescale") or {}).get("phase") == "done",
            "orders rescaled to 5 partitions",
            RESCALE_TIMEOUT_S,
        )
        generations = [before, PipelineInfo.from_describe(describe(rig, "orders"))]

        # `sensors` paused: its offsets hold while rows keep arriving; then resumed.
        assert admin(rig, "POST", "/v1/pipelines/sensors/pause").status == 200
        sensors = producers["sensors"].info
        holders = {wid for wid, _ in owners(rig, sensors).values()}
        wait_until(
            lambda: all("pipeline sensors paused" in rig.workers[w].output() for w in holders),
            "every owner of sensors read the pause",
            30,
        )
        held = {n: off for n, (_, off) in owners(rig, sensors).items()}
        log = producers["sensors"].run.log
        # Rows arrive past every held offset, then several batch intervals go by: a pipeline
        # that still processed would have moved.
        wait_until(
            lambda: all(log.end_offset(n) > off for n, off in held.items()),
            "rows past every paused offset",
            30,
        )
        rounds = feed.rounds
        wait_until(lambda: feed.rounds >= rounds + 6, "six more rounds of the feed", 30)
        after = {n: off for n, (_, off) in owners(rig, sensors).items()}
        assert {n: after[n] for n in held if n in after} == {
            n: held[n] for n in held if n in after
        }, "a paused pipeline moved"
        assert admin(rig, "POST", "/v1/pipelines/sensors/resume").status == 200

        # `clicks` dropped with its objects: its producer stops first.
        feed.leave_out("clicks")
        clicks = producers["clicks"].info
        urls = [a for s in rig.cluster.specs for a in ("--coordinator", s.url)]
        dropped = ripple(
            "pipelines", "drop", "clicks", "--purge", "--store", rig.store_uri,
            "--admin-token", ADMIN, *urls,
        )  # fmt: skip
        assert dropped.returncode == 0, dropped.stderr
        assert "purged" in dropped.stdout, dropped.stdout
    finally:
        feed.stop()
        epochs.stop()

    numbers = range(clicks.first_slot, clicks.first_slot + clicks.partitions)
    left = [k for prefix in pipeline_prefixes(numbers) for k in rig.store.list_keys(prefix)]
    assert left == [], left[:5]
    assert describe_missing(rig, "clicks")
    assert generations[1].partitions == 5 and generations[1].generation == 1, generations
    assert producers["orders"].info == generations[1], "the producer did not follow the seals"
    for name in ("orders", "sensors"):
        producer = producers[name]
        holders = wait_until(
            lambda p=producer: caught_up(rig, p), f"{name} caught up", CATCH_UP_TIMEOUT_S
        )
        got = results(rig, name, holders)
        want = (
            oracle(spark, producer)
            if name == "sensors"
            else every_generation(rig, spark, generations)
        )
        assert len(want) >= 10, (name, len(want))
        assert got == want, (name, differences(got, want))
    figures.violations.extend(epochs.violations)
    figures.ops.update(rows=feed.rows, table_reads=epochs.reads)
    print(figures.line())
    assert epochs.reads > 0 and all(feed.rows[n] > 0 for n in PIPELINES), feed.rows
    assert figures.faults == {"kill9_worker": 1, "kill9_leader": 1}
    assert not figures.violations, figures.violations


def describe_missing(rig: PipelineRig, name: str) -> bool:
    c = rig.cluster
    return c.get(c.leader(), f"/v1/pipelines/{name}?consistent=true").status == 404
