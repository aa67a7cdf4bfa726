"""A recorded pipeline's partition state on the worker: key admission under the limit, the
format-2 checkpoint, and the source log of its own columns under its own numbers."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipeline.checkpoint import CheckpointCorrupt, CheckpointStore
from pipeline.spec.aggregations import KeyState
from pipeline.spec.partition_state import (
    KEYS_UNLIMITED,
    SpecCheckpoint,
    SpecCheckpointError,
    SpecPartitionState,
    decode_spec_checkpoint,
    encode_spec_checkpoint,
    merge_spec_batch,
)
from pipeline.spec.run import PipelineInfo, PipelineRun
from pipeline.store import LocalStore
from ripple.pipeline_commands import _labels
from shared.errors import RippleError
from shared.routing import SLOT_BASE
from tests.unit.test_pipeline_spec_merge import SetSketches, sketch

SPEC = """
[schema]
ddl = "user STRING, amount DECIMAL(10,2), page STRING, at TIMESTAMP, day DATE"
key = "user"

[[aggregations]]
name = "n"
fn = "count"

[[aggregations]]
name = "spent"
fn = "sum"
column = "amount"

[[aggregations]]
name = "avg"
fn = "mean"
column = "amount"

[[aggregations]]
name = "first_at"
fn = "first"
column = "at"

[[aggregations]]
name = "last_day"
fn = "last"
column = "day"

[[aggregations]]
name = "pages"
fn = "approx_distinct"
column = "page"
"""


def info(partitions: int = 2) -> PipelineInfo:
    return PipelineInfo(
        name="clicks",
        incarnation=3,
        first_slot=SLOT_BASE + 10,
        partitions=partitions,
        spec_text=SPEC,
        max_keys_per_partition=0,
    )


@pytest.fixture
def run(tmp_path: Path) -> PipelineRun:
    return PipelineRun(info(), LocalStore(str(tmp_path)))


def partial(n: int, offset: int, page: str) -> KeyState:
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=offset)
    return {
        "n": n,
        "spent": Decimal("1.25") * n,
        "avg": (Decimal("1.25") * n, n),
        "first_at": (offset, at),
        "last_day": (offset, datetime.date(2026, 1, 1 + offset % 28)),
        "pages": sketch(page),
    }


def test_new_keys_are_admitted_by_first_offset_and_the_rest_are_dead_letters(
    run: PipelineRun,
) -> None:
    state = SpecPartitionState(values={"a": partial(1, 0, "x")}, firsts={"a": 0})
    batch = {"a": partial(2, 4, "y"), "b": partial(1, 7, "x"), "c": partial(1, 5, "z")}
    firsts = {"a": 4, "b": 7, "c": 5}
    merged, dead = merge_spec_batch(run.outputs, state, batch, firsts, 2, SetSketches())
    assert sorted(merged.values) == ["a", "c"] and list(dead) == ["b"]
    assert merged.firsts == {"a": 0, "c": 5}  # a key's first offset is its earliest
    assert merged.values["a"]["n"] == 3 and merged.values["a"]["pages"] == sketch("x", "y")
    assert merged.values["a"]["first_at"][0] == 0
    assert state.values["a"]["n"] == 1 and "c" not in state.values  # the input is unchanged
    with pytest.raises(ValueError, match="max_keys"):
        merge_spec_batch(run.outputs, state, batch, firsts, 0, SetSketches())


def test_the_admitted_keys_do_not_depend_on_how_the_input_was_cut(run: PipelineRun) -> None:
    """Whatever the batch boundaries, the keys admitted under the limit are the ones whose
    records came first (a replay by another owner cuts the log elsewhere)."""
    rng = random.Random(11)
    records = [(f"k{rng.randrange(8)}", offset) for offset in range(60)]
    admitted = set()
    for cuts in ([30], [5, 17, 44], list(range(1, 60))):
        state = SpecPartitionState()
        bounds = [0, *cuts, len(records)]
        for lo, hi in itertools.pairwise(bounds):
            firsts: dict[Any, int] = {}
            counts: dict[Any, int] = {}
            for key, offset in records[lo:hi]:
                firsts.setdefault(key, offset)
                counts[key] = counts.get(key, 0) + 1
            batch = {k: partial(counts[k], firsts[k], "p") for k in counts}
            state, _ = merge_spec_batch(run.outputs, state, batch, firsts, 3, SetSketches())
        admitted.add(frozenset(state.values))
        assert sum(v["n"] for v in state.values.values()) == sum(
            1 for k, _ in records if k in state.values
        )
    first_three = list(dict.fromkeys(k for k, _ in records))[:3]
    assert admitted == {frozenset(first_three)}


def checkpointed_state() -> SpecPartitionState:
    return SpecPartitionState(
        values={"b": partial(2, 9, "y"), "a": partial(1, 3, "x"), None: partial(1, 1, "z")},
        firsts={"b": 8, "a": 3, None: 1},
    )


def test_a_format_2_checkpoint_round_trips_every_value_type_deterministically(
    run: PipelineRun,
) -> None:
    state = checkpointed_state()
    data = run.encode(SLOT_BASE + 10, 4, 17, state)
    reordered = SpecPartitionState(
        values=dict(reversed(state.values.items())), firsts=dict(state.firsts)
    )
    assert run.encode(SLOT_BASE + 10, 4, 17, reordered) == data  # a retried write: same bytes
    ck = decode_spec_checkpoint(data)
    assert (ck.partition, ck.epoch, ck.offset, ck.spec_version) == (
        SLOT_BASE + 10,
        4,
        17,
        run.version,
    )
    assert ck.state.values == state.values and ck.state.firsts == state.firsts
    assert run.problem(ck) is None


def test_a_checkpoint_of_another_spec_version_or_shape_is_refused(run: PipelineRun) -> None:
    state = checkpointed_state()
    other = encode_spec_checkpoint(1, 1, 1, "sha256:other", run.outputs, state)
    assert "sha256:other" in str(run.problem(decode_spec_checkpoint(other)))
    fewer = encode_spec_checkpoint(1, 1, 1, run.version, run.outputs[:2], state)
    assert "outputs" in str(run.problem(decode_spec_checkpoint(fewer)))
    for junk in (b"", b"\x93\x01\x02", b"\xc1"):
        with pytest.raises(SpecCheckpointError):
            decode_spec_checkpoint(junk)


def test_the_checkpoint_store_reads_either_format_and_keeps_them_apart(
    tmp_path: Path, run: PipelineRun
) -> None:
    store = CheckpointStore(LocalStore(str(tmp_path / "ck")))
    p = SLOT_BASE + 10
    uri = store.write_encoded(p, 4, 17, run.encode(p, 4, 17, checkpointed_state()))
    loaded = store.read_any(uri)
    assert isinstance(loaded, SpecCheckpoint) and loaded.state.firsts[None] == 1
    with pytest.raises(CheckpointCorrupt, match="recorded pipeline"):
        store.read(uri)  # `default`'s reader never takes a spec state for its own
    v1 = store.write(2, 1, 5, {})
    assert store.read(v1).offset == 5 and not isinstance(store.read_any(v1), SpecCheckpoint)


def test_a_pipelines_source_log_has_its_columns_under_its_own_numbers(run: PipelineRun) -> None:
    log, first = run.log, info().first_slot
    rows = pa.table(
        {
            "user": ["u1", "u2"],
            "amount": pa.array([Decimal("1.50"), None], pa.decimal128(10, 2)),
            "page": ["/a", "/b"],
            "at": pa.array([datetime.datetime(2026, 1, 1), None], pa.timestamp("us", tz="UTC")),
            "day": pa.array([datetime.date(2026, 1, 2), None], pa.date32()),
        }
    )
    assert log.append_table(first + 1, rows) == 0
    assert log.append_table(first + 1, rows.slice(1)) == 2
    assert log.end_offset(first + 1) == 3 and log.end_offset(first) == 0
    table, end = run.read(first + 1, 1, rows_max=1)
    assert end == 2 and table.column("user").to_pylist() == ["u2"]  # whole segments only
    table, end = run.read(first + 1, 0, rows_max=10)
    assert end == 3 and table.column("offset").to_pylist() == [0, 1, 2]
    for outside in (first - 1, first + 2, 0):
        with pytest.raises(ValueError, match="not in"):
            log.append_table(outside, rows)


def test_worker_labels_parse_as_key_value_pairs() -> None:
    assert _labels(["zone=a", "gpu=true", "zone=b"]) == (("gpu", "true"), ("zone", "b"))
    for bad in ("zone", "=a", "zone="):
        with pytest.raises(RippleError, match="KEY=VALUE"):
            _labels([bad])


def test_a_purge_deletes_only_the_pipelines_objects(tmp_path: Path) -> None:
    from pipeline.spec.purge import pipeline_prefixes, purge

    store = LocalStore(str(tmp_path))
    mine, other = range(SLOT_BASE + 4, SLOT_BASE + 6), SLOT_BASE + 6
    keys = [
        *(f"source/p{n}/{0:020d}.parquet" for n in mine),
        f"checkpoints/p{mine[0]}/e0000000001-o{5:020d}.ckpt",
        f"deadletter/p{mine[1]}/e0000000001-o{0:020d}-{9:020d}.parquet",
    ]
    kept = [f"source/p{other}/{0:020d}.parquet", f"source/p00004/{0:020d}.parquet"]
    for key in keys + kept:
        assert store.put_if_absent(key, b"x")
    assert purge(store, mine) == len(keys)
    assert store.list_keys("") == sorted(kept)
    assert purge(store, mine) == 0  # again: nothing left, nothing else touched
    with pytest.raises(ValueError, match="default"):
        pipeline_prefixes(range(4, 6))


def test_an_s3_store_deletes_an_object(s3_bucket: tuple[Any, str]) -> None:
    from pipeline.store import S3Store

    client, bucket = s3_bucket
    store = S3Store(bucket, "p", client=client)
    assert store.put_if_absent("source/p1048576/a", b"x")
    store.delete("source/p1048576/a")
    store.delete("source/p1048576/a")  # gone already: fine
    assert store.list_keys("source/") == []


async def test_the_runs_find_a_partitions_pipeline_and_follow_its_pause(tmp_path: Path) -> None:
    from pipeline.spec.run import STATES_REFRESH_S, PipelineRuns
    from shared.errors import UnavailableError

    state = {"orders": "active"}
    asked: list[str] = []
    recorded = info(partitions=3)

    async def get(path: str) -> dict[str, Any]:
        asked.append(path)
        await asyncio.sleep(0)  # a real call yields: concurrent lookups interleave here
        if path == "/v1/pipelines":
            rows = [{"name": "default", "incarnation": 0, "first_slot": 0, "partitions": 8}]
            rows.append(
                {
                    "name": "orders",
                    "incarnation": recorded.incarnation,
                    "first_slot": recorded.first_slot,
                    "partitions": recorded.partitions,
                    "state": state["orders"],
                }
            )
            return {"pipelines": [{**r, "state": r.get("state", "active")} for r in rows]}
        assert path == "/v1/pipelines/orders"
        return {
            "name": "orders",
            "incarnation": recorded.incarnation,
            "first_slot": recorded.first_slot,
            "partitions": recorded.partitions,
            "spec_text": recorded.spec_text,
            "state": state["orders"],
            "settings": {"max_keys_per_partition": 0},
        }

    runs = PipelineRuns(get, LocalStore(str(tmp_path)))
    assert await runs.of(3) is None and asked == []  # `default`'s numbers ask nothing
    # Host calls of its partitions arrive together: they all get one run, which carries the
    # pause to each of them.
    together = await asyncio.gather(*(runs.of(recorded.first_slot + n) for n in range(3)))
    run = together[0]
    assert run is not None and all(r is run for r in together)
    # Its setting 0 is no key limit (its state is on disk), whatever the worker's flag.
    assert run.name == "orders" and run.max_keys == KEYS_UNLIMITED and not run.paused
    asked.clear()
    assert await runs.of(recorded.first_slot) is run and asked == []  # cached
    with pytest.raises(UnavailableError):
        await runs.of(recorded.first_slot + 3)  # past its partitions: nobody's
    state["orders"] = "paused"
    await runs.refresh(100.0)
    assert run.paused
    state["orders"] = "active"
    await runs.refresh(100.0 + STATES_REFRESH_S / 2)  # too soon: not asked again
    assert run.paused
    await runs.refresh(100.0 + STATES_REFRESH_S)
    assert not run.paused
