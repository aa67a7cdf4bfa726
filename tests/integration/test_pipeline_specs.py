"""A recorded pipeline run by real workers on real Spark, beside `default`, equal to its own
spec's batch job.

Three coordinator processes, three `ripple worker` processes (two in the pipeline's pool,
labelled zone=a, one with no profile), one Spark Connect server, a local-directory store. The
pipeline `orders` (a transform, every aggregation kind, an HLL distinct count and a mean) has
its partitions placed on the pool's workers only; its rows go in through the pipeline's
producer; each key's outputs, read from the owners, equal `pipeline.spec.oracle.batch_job`
over every row, exactly (sketch estimates included). Paused, it keeps its partitions and
offsets and processes nothing; resumed, it catches up. Then its worker is killed -9 while
`default` runs too: the partitions move within the pool, replayed from their checkpoints, and
both pipelines are exact again. Rows produced through the SDK (`PipelineClient`) read back
through it equal the batch job too.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from pipeline.source import generate
from pipeline.spec.oracle import batch_job
from pipeline.spec.produce import SpecProducer
from pipeline.spec.run import STATES_REFRESH_S, PipelineInfo
from pipeline.spec.sdk import PipelineClient
from testkit.cluster import ADMIN
from testkit.http import Reply, call
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.integration.test_pipeline_spec_spark import orders, spec_text
from tests.integration.test_pipelines_api import speaks_pipelines

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

PARTITIONS = 3
POOL = {"zone": "a"}
CATCH_UP_TIMEOUT_S = 180.0


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path}/store", spark_remote).running()


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def admin(rig: PipelineRig, method: str, path: str, body: Any = None) -> Reply:
    c = rig.cluster
    return call(method, c.url(c.leader()) + path, body, token=ADMIN)


def describe(rig: PipelineRig, name: str) -> dict[str, Any]:
    c = rig.cluster
    reply = c.get(c.leader(), f"/v1/pipelines/{name}?consistent=true")
    assert reply.status == 200, reply
    return reply.body  # type: ignore[no-any-return]


def active(rig: PipelineRig, name: str) -> dict[str, Any] | None:
    body = describe(rig, name)
    return body if body["state"] == "active" and body["first_slot"] else None


def owners(rig: PipelineRig, info: PipelineInfo) -> dict[int, tuple[str, int]]:
    """Each of the pipeline's partitions held open by a live worker: (worker, offset)."""
    out: dict[int, tuple[str, int]] = {}
    for wid, proc in rig.workers.items():
        if not proc.alive():
            continue
        for p, part in ((rig.health(wid) or {}).get("partitions") or {}).items():
            if info.contains(int(p)):
                out[int(p)] = (wid, int(part["offset"]))
    return out


def every_owner(rig: PipelineRig, info: PipelineInfo) -> dict[int, tuple[str, int]] | None:
    """`owners` once every partition is seen (a health call can time out on a busy host)."""
    held = owners(rig, info)
    return held if len(held) == info.partitions else None


def caught_up(rig: PipelineRig, producer: SpecProducer) -> dict[int, str] | None:
    """Every partition of the pipeline ONLINE, its owner past the end of its log."""
    info = producer.info
    if describe(rig, info.name)["partition_states"]["online"] != info.partitions:
        return None
    held = owners(rig, info)
    slots = range(info.first_slot, info.first_slot + info.partitions)
    if set(held) != set(slots):
        return None
    if any(held[n][1] != producer.run.log.end_offset(n) for n in slots):
        return None
    return {n: held[n][0] for n in slots}


def failing_everywhere(rig: PipelineRig, info: PipelineInfo) -> dict[int, str] | None:
    """Each partition of `info` held at offset 0 with three failed batches or more in a row:
    its error."""
    out: dict[int, str] = {}
    for proc_id, proc in rig.workers.items():
        if not proc.alive():
            continue
        for p, part in ((rig.health(proc_id) or {}).get("partitions") or {}).items():
            if info.contains(int(p)) and part["failures"] >= 3 and part["offset"] == 0:
                out[int(p)] = str(part["error"])
    return out if len(out) == info.partitions else None


def results(rig: PipelineRig, owned: dict[int, str]) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    for n, wid in owned.items():
        r = call("GET", rig.worker_url(wid) + f"/v1/partitions/{n}/state")
        assert r.status == 200, r
        assert r.body["pipeline"] == "orders"
        for row in r.body["rows"]:
            key = row.pop("key")
            assert key not in out, f"key {key!r} in two partitions"
            out[key] = row
    return out


def as_json(value: Any) -> Any:
    """An oracle value as the worker's JSON shows it."""
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def oracle(spark: SparkSession, producer: SpecProducer) -> dict[Any, dict[str, Any]]:
    log = producer.run.log
    table = pa.concat_tables([log.read_segment(s) for s in log.all_segments()])
    want = batch_job(spark, producer.run.spec, table)
    return {k: {n: as_json(v) for n, v in outs.items()} for k, outs in want.items()}


def differences(got: dict[Any, dict[str, Any]], want: dict[Any, dict[str, Any]]) -> list[Any]:
    """The first few (key, output, got, wanted) that differ: what an assertion shows."""
    out = [(k, None, None, None) for k in set(got) ^ set(want)]
    for k in sorted(set(got) & set(want)):
        out += [(k, n, got[k].get(n), v) for n, v in want[k].items() if got[k].get(n) != v]
    return out[:10]


def rows(seed: int) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k != "offset"}
        for r in orders(random.Random(seed)).to_pylist()
    ]


def test_a_recorded_pipeline_runs_in_its_pool_and_equals_its_batch_job(
    rig: PipelineRig, spark: SparkSession
) -> None:
    speaks_pipelines(rig.cluster)
    created = admin(
        rig,
        "POST",
        "/v1/pipelines",
        {"name": "orders", "spec_text": spec_text(), "partitions": PARTITIONS, "pool": POOL},
    )
    assert created.status == 202, created
    body = wait_until(lambda: active(rig, "orders"), "orders active", 60)
    info = PipelineInfo.from_describe(body)
    producer = SpecProducer(rig.store, info)
    # A neighbour in the same pool whose transform throws on every batch.
    broken_spec = spec_text().replace(
        "def transform(df):", "def transform(df):\n    raise ValueError('no good row')"
    )
    assert (
        admin(
            rig,
            "POST",
            "/v1/pipelines",
            {"name": "broken", "spec_text": broken_spec, "partitions": 2, "pool": POOL},
        ).status
        == 202
    )
    broken = SpecProducer(
        rig.store,
        PipelineInfo.from_describe(wait_until(lambda: active(rig, "broken"), "broken active", 60)),
    )

    for wid in ("w1", "w2"):
        rig.start_worker(wid, "--label", "zone=a", "--slots", "8")
    rig.start_worker("w3")  # no profile: `default`'s partitions only
    rig.wait_ready()
    c = rig.cluster
    shown = c.get(c.leader(), "/v1/workers?consistent=true").body["workers"]
    assert {w["worker_id"]: (w["labels"], w["slots"]) for w in shown} == {
        "w1": (POOL, 8),
        "w2": (POOL, 8),
        "w3": (None, None),
    }
    producer.produce(rows(seed=1))
    broken.produce(rows(seed=7))
    rig.producer.produce(generate(2000, 30, seed=2))

    owned = wait_until(lambda: caught_up(rig, producer), "orders caught up", CATCH_UP_TIMEOUT_S)
    assert set(owned.values()) <= {"w1", "w2"}, owned
    got, want = results(rig, owned), oracle(spark, producer)
    assert got == want, differences(got, want)
    assert len(want) > 10 and all(v["currencies"] >= 1 for v in want.values())
    rig.check_equal_to_batch_job()
    # The broken pipeline fails alone: its partitions report the transform's error, hold
    # offset 0, and its neighbours above were exact meanwhile.
    failing = wait_until(lambda: failing_everywhere(rig, broken.info), "broken reported", 60)
    assert all("no good row" in e for e in failing.values()), failing

    # Paused: its partitions stay where they are and no offset moves; resumed: caught up.
    assert admin(rig, "POST", "/v1/pipelines/orders/pause").status == 200
    holders = set(owned.values())
    wait_until(
        lambda: all("pipeline orders paused" in rig.workers[w].output() for w in holders),
        "every owner read the pause",
        30,
    )
    held = wait_until(lambda: every_owner(rig, info), "the paused partitions' offsets", 30)
    producer.produce(rows(seed=6))
    time.sleep(3 * STATES_REFRESH_S + 1.0)  # batches would have run by now
    assert wait_until(lambda: every_owner(rig, info), "the offsets again", 30) == held
    assert admin(rig, "POST", "/v1/pipelines/orders/resume").status == 200
    owned = wait_until(lambda: caught_up(rig, producer), "orders resumed", CATCH_UP_TIMEOUT_S)
    got, want = results(rig, owned), oracle(spark, producer)
    assert got == want, differences(got, want)

    # kill -9 of an owner: its partitions go to the other member of the pool, never to w3.
    before = owned
    victim = owned[info.first_slot]
    rig.workers[victim].kill9()
    producer.produce(rows(seed=3))
    rig.producer.produce(generate(1000, 30, seed=4))
    survivor = "w2" if victim == "w1" else "w1"
    owned = wait_until(
        lambda: (o := caught_up(rig, producer)) and set(o.values()) == {survivor} and o,
        "orders caught up on the pool's survivor",
        CATCH_UP_TIMEOUT_S,
    )
    got, want = results(rig, owned), oracle(spark, producer)
    assert got == want, differences(got, want)
    rig.check_equal_to_batch_job()
    # The moved partitions started from their recorded checkpoints, not from offset 0.
    moved = [n for n, wid in before.items() if wid == victim]
    log = rig.workers[survivor].output()
    for n in moved:
        starts = re.findall(rf"hosting partition {n} at epoch \d+ from offset (\d+)", log)
        assert starts and int(starts[-1]) > 0, (n, starts)


async def test_the_sdk_produces_to_a_pipeline_and_reads_its_keys_back(
    rig: PipelineRig, spark: SparkSession
) -> None:
    """`PipelineClient` end to end: rows produced through it are processed by the pool's
    worker, and every key it reads back equals the spec's batch job over those rows."""
    speaks_pipelines(rig.cluster)
    body = {"name": "orders", "spec_text": spec_text(), "partitions": 2, "pool": POOL}
    assert admin(rig, "POST", "/v1/pipelines", body).status == 202
    info = PipelineInfo.from_describe(wait_until(lambda: active(rig, "orders"), "active", 60))
    rig.start_worker("w1", "--label", "zone=a", "--slots", "4")
    rig.wait_ready()
    urls = [s.url for s in rig.cluster.specs]
    async with PipelineClient(urls, "orders", store=rig.store_uri) as orders_sdk:
        firsts = await orders_sdk.produce(iter(rows(seed=11)))
        assert set(firsts) == {0, 1}  # the pipeline's own partition numbers
        producer = SpecProducer(rig.store, info)  # reads the log the SDK wrote
        await asyncio.to_thread(
            wait_until, lambda: caught_up(rig, producer), "orders caught up", CATCH_UP_TIMEOUT_S
        )
        want = oracle(spark, producer)
        assert len(want) > 10
        for key, outputs in want.items():
            got = await orders_sdk.get(str(key))
            assert got["key"] == key and 0 <= got["partition"] < 2, got
            assert {n: got[n] for n in outputs} == outputs, (key, got, outputs)


def test_bad_rows_are_refused_whole_with_the_row_named(tmp_path: Path) -> None:
    from pipeline.source import SourceInputError
    from pipeline.store import LocalStore

    info = PipelineInfo(
        name="orders",
        incarnation=1,
        first_slot=1 << 20,
        partitions=2,
        spec_text=spec_text(),
        max_keys_per_partition=0,
    )
    producer = SpecProducer(LocalStore(str(tmp_path)), info)
    good = rows(seed=5)[:3]
    for bad, said in (
        ({**good[1], "amount": "lots"}, "row 1, column 'amount'"),
        ({**good[1], "customer": None}, "row 1, column 'customer': the key column"),
        ({**good[1], "colour": "red"}, "row 1, column 'colour': ['colour']"),
        ({**good[1], "ts": "not a time"}, "row 1, column 'ts'"),
    ):
        with pytest.raises(SourceInputError, match=said.replace("[", r"\[").replace("]", r"\]")):
            producer.produce([good[0], bad, good[2]])
    assert producer.run.log.all_segments() == []
    firsts = producer.produce(good)
    assert sum(producer.run.log.end_offset(n) for n in firsts) == 3
