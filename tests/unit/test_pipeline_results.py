"""Results tables: layout and names, the store's version-checked replace (local and a real S3
protocol endpoint), publishing a checkpoint's state as Parquet that pyarrow, pandas and
DuckDB read with no Ripple code, and the checkpointer publishing only accepted checkpoints."""

from __future__ import annotations

import asyncio
import datetime
import io
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.checkpoint import CheckpointStore
from pipeline.checkpointing import Checkpointer
from pipeline.coordinator_replies import CheckpointVerdict
from pipeline.holdings import Holdings, PartitionRuntime
from pipeline.metrics import new_stats
from pipeline.session import CheckpointEntry
from pipeline.spec.live_state import LiveState
from pipeline.spec.partition_state import (
    SpecPartitionState,
    decode_spec_checkpoint,
    encode_spec_checkpoint,
)
from pipeline.spec.purge import purge_results
from pipeline.spec.results import (
    SNAPSHOT,
    WINDOWS,
    publish,
    snapshot_key,
    snapshot_schema,
    table_prefix,
    windows_key,
    windows_schema,
)
from pipeline.spec.run import PipelineInfo, PipelineRun
from pipeline.store import LocalStore, S3Store, StoreError
from ripple.results import table_info
from shared.routing import SLOT_BASE
from tests.unit.test_pipeline_spec_merge import SetSketches, sketch

SPEC = """
[schema]
ddl = "user STRING, amount DECIMAL(10,2), clicks INT, page STRING"
key = "user"

[[aggregations]]
name = "n"
fn = "count"

[[aggregations]]
name = "spent"
fn = "sum"
column = "amount"

[[aggregations]]
name = "avg_clicks"
fn = "mean"
column = "clicks"

[[aggregations]]
name = "most"
fn = "max"
column = "clicks"

[[aggregations]]
name = "pages"
fn = "approx_distinct"
column = "page"
"""
NAME, INCARNATION = "clicks", 2
P = SLOT_BASE + 4
UTC = datetime.UTC


def make_run(store: Any) -> PipelineRun:
    info = PipelineInfo(
        name=NAME,
        incarnation=INCARNATION,
        first_slot=P,
        partitions=1,
        spec_text=SPEC,
        max_keys_per_partition=0,
    )
    return PipelineRun(info, store)


def key_state(n: int, clicks: int, *pages: str) -> dict[str, Any]:
    return {
        "n": n,
        "spent": Decimal("2.50") * n,
        "avg_clicks": (clicks, n),
        "most": clicks,
        "pages": sketch(*pages),
    }


def window(user: str, hour: int, n: int) -> dict[str, Any]:
    start = datetime.datetime(2026, 1, 1, hour, tzinfo=UTC)
    return {
        "key": user,  # as pipeline.spec.windows closes it: the table names it `user`
        "window_start": start,
        "window_end": start + datetime.timedelta(hours=1),
        "n": n,
        "spent": Decimal("2.50") * n,
        "avg_clicks": 1.0,
        "most": 1,
        "pages": 1,
    }


def state(users: dict[str, int], closed: Sequence[dict[str, Any]] = ()) -> SpecPartitionState:
    return SpecPartitionState(
        values={u: key_state(n, n * 3, *(f"p{i}" for i in range(n))) for u, n in users.items()},
        firsts=dict.fromkeys(users, 0),
        closed=list(closed),
    )


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LocalStore | S3Store:
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"))
    client, bucket = request.getfixturevalue("s3_bucket")
    return S3Store(bucket, "base", client=client)


def test_names_are_per_incarnation_table_partition_and_offset() -> None:
    assert table_prefix(NAME, 2, SNAPSHOT) == "results/clicks/i2/snapshot/"
    assert snapshot_key(NAME, 2, P) == f"results/clicks/i2/snapshot/p{P:05d}.parquet"
    assert windows_key(NAME, 2, P, 7) == (f"results/clicks/i2/windows/p{P:05d}-o{7:020d}.parquet")


def test_put_newer_replaces_only_with_a_version_not_older(store: LocalStore | S3Store) -> None:
    assert store.put_newer("t/snap", b"v5", 5)
    assert not store.put_newer("t/snap", b"v3", 3)  # an old owner, late: refused
    assert store.get("t/snap") == b"v5"
    assert store.put_newer("t/snap", b"v5", 5)  # the same version again: the same bytes
    assert store.put_newer("t/snap", b"v9", 9)
    assert store.get("t/snap") == b"v9"
    assert not store.put_newer("t/snap", b"v8", 8)
    assert store.get("t/snap") == b"v9"
    # Nothing a reader would take for a table file besides the object itself.
    visible = [k for k in store.list_keys("t/") if not k.rsplit("/", 1)[-1].startswith(".")]
    assert visible == ["t/snap"]


def test_put_newer_racing_writers_leave_the_newest(store: LocalStore | S3Store) -> None:
    """Writers of many versions at once: whatever the interleaving, the newest stays."""

    async def race() -> None:
        await asyncio.gather(
            *(asyncio.to_thread(store.put_newer, "t/race", f"v{v}".encode(), v) for v in range(8))
        )

    asyncio.run(race())
    assert store.get("t/race") == b"v7"


def table_dir(store: LocalStore, table: str) -> str:
    path = store.local_path(table_prefix(NAME, INCARNATION, table).rstrip("/"))
    assert path is not None
    return path


def test_publish_writes_tables_plain_readers_read(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "store"))
    run = make_run(store)
    closed = [window("ann", 1, 2), window("bob", 1, 1)]
    st = state({"ann": 2, "bob": 1, "cy": 3}, closed)
    done = publish(store, NAME, INCARNATION, run.spec, run.outputs, P, 40, st, SetSketches)
    assert (done.windows_rows, done.snapshot_rows) == (2, 3)
    snap_dir, win_dir = table_dir(store, SNAPSHOT), table_dir(store, WINDOWS)

    table = pq.read_table(snap_dir)
    assert table.schema.equals(snapshot_schema(run.spec, run.outputs))
    assert table.schema.field("spent").type == pa.decimal128(20, 2)  # Spark's sum type
    assert table.schema.field("avg_clicks").type == pa.float64()
    assert table.schema.field("most").type == pa.int32()
    assert table.schema.field("n").type == pa.int64()
    rows = {r["user"]: r for r in table.to_pylist()}
    assert rows["cy"] == {
        "user": "cy",
        "n": 3,
        "spent": Decimal("7.50"),
        "avg_clicks": 3.0,
        "most": 9,
        "pages": 3,
    }
    frame = pd.read_parquet(snap_dir)
    assert sorted(frame["user"]) == ["ann", "bob", "cy"]
    got = duckdb.sql(f"SELECT user, n FROM read_parquet('{snap_dir}/*.parquet') ORDER BY user")
    assert got.fetchall() == [("ann", 2), ("bob", 1), ("cy", 3)]

    windows = pq.read_table(win_dir)
    assert windows.schema.equals(windows_schema(run.spec, run.outputs))
    assert windows.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    assert sorted((r["user"], r["n"]) for r in windows.to_pylist()) == [("ann", 2), ("bob", 1)]
    count = duckdb.sql(f"SELECT count(*) FROM read_parquet('{win_dir}/*.parquet')").fetchall()
    assert count == [(2,)]


def test_publish_again_is_idempotent_and_an_older_offset_changes_nothing(
    store: LocalStore | S3Store,
) -> None:
    run = make_run(store)
    st = state({"ann": 2}, [window("ann", 1, 2)])
    publish(store, NAME, INCARNATION, run.spec, run.outputs, P, 40, st, SetSketches)
    keys = store.list_keys("results/")
    snapshot = store.get(snapshot_key(NAME, INCARNATION, P))
    # The new owner's first checkpoint at the offset it loaded, or a late old owner: no-ops.
    again = publish(store, NAME, INCARNATION, run.spec, run.outputs, P, 40, st, SetSketches)
    assert again.windows_rows == 0
    assert store.list_keys("results/") == keys
    assert store.get(snapshot_key(NAME, INCARNATION, P)) == snapshot
    # A newer checkpoint replaces the snapshot; an older one, published late, does not.
    publish(store, NAME, INCARNATION, run.spec, run.outputs, P, 50, state({"ann": 5}), SetSketches)
    newer = store.get(snapshot_key(NAME, INCARNATION, P))
    old = publish(
        store, NAME, INCARNATION, run.spec, run.outputs, P, 45, state({"ann": 4}), SetSketches
    )
    assert old.snapshot_rows == 0
    assert store.get(snapshot_key(NAME, INCARNATION, P)) == newer
    info = table_info(store, NAME, INCARNATION, WINDOWS)
    assert info.files == 1
    # Purging the pipeline removes its results, version files and all.
    assert purge_results(store, {"name": NAME, "incarnation": INCARNATION}) >= 2
    assert store.list_keys("results/") == []


def test_closed_windows_round_trip_through_the_checkpoint(tmp_path: Path) -> None:
    run = make_run(LocalStore(str(tmp_path)))
    closed = [window("ann", 1, 2)]
    st = state({"ann": 2}, closed)
    data = encode_spec_checkpoint(P, 3, 40, run.version, run.outputs, st)
    assert decode_spec_checkpoint(data).state.closed == closed
    plain = encode_spec_checkpoint(P, 3, 40, run.version, run.outputs, state({"ann": 2}))
    assert b"closed" not in plain  # absent when empty: the bytes a state without any had
    assert decode_spec_checkpoint(plain).state.closed == []


class Coordinator:
    """The checkpoint report's far end: every entry accepted, or every one fenced."""

    def __init__(self, fenced: bool) -> None:
        self.fenced = fenced
        self.reports: list[list[CheckpointEntry]] = []

    def lease_valid(self) -> bool:
        return True

    async def report_checkpoints(self, entries: list[CheckpointEntry]) -> list[CheckpointVerdict]:
        self.reports.append(entries)
        reason = "stale epoch" if self.fenced else ""
        return [
            CheckpointVerdict(partition=e.partition, fenced=self.fenced, reason=reason)
            for e in entries
        ]


def live(holdings: Holdings, st: SpecPartitionState, epoch: int = 3) -> LiveState:
    """`st` in a store of `holdings`, as hosting loads a checkpoint's state."""
    return LiveState.from_state(holdings.store_directory(P, epoch), None, st, holdings.cache)


def replace_state(holdings: Holdings, rt: PartitionRuntime, st: SpecPartitionState) -> None:
    """The runtime's state as `st` (what merges would have made it)."""
    assert rt.spec_state is not None
    rt.spec_state.destroy()
    rt.spec_state = live(holdings, st, rt.epoch)


def held(
    store: LocalStore, st: SpecPartitionState, offset: int
) -> tuple[Holdings, PartitionRuntime]:
    holdings = Holdings()
    rt = PartitionRuntime(
        epoch=3, run=make_run(store), spec_state=live(holdings, st), offset=offset
    )
    rt.loaded.set()
    holdings.gates.host(P, 3)
    holdings.parts[P] = rt
    return holdings, rt


def checkpointer(store: LocalStore, holdings: Holdings, coordinator: Coordinator) -> Checkpointer:
    return Checkpointer(
        CheckpointStore(store),
        holdings,
        coordinator,  # type: ignore[arg-type]
        new_stats(),
        results=store,
        sketches=SetSketches,
    )


async def test_a_fenced_checkpoint_publishes_nothing(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    holdings, rt = held(store, state({"ann": 2}, [window("ann", 1, 2)]), 40)
    ck = checkpointer(store, holdings, Coordinator(fenced=True))
    await ck.checkpoint_and_report()
    assert store.list_keys("checkpoints/")  # written (and staged in it: its closed rows)
    assert store.list_keys("results/") == []  # never visible
    assert rt.spec_state is not None and len(rt.spec_state.closed) == 1  # kept
    assert ck.stats["results_published"] == 0


async def test_an_accepted_checkpoint_is_published_then_its_windows_trimmed(
    tmp_path: Path,
) -> None:
    store = LocalStore(str(tmp_path))
    holdings, rt = held(store, state({"ann": 2}, [window("ann", 1, 2)]), 40)
    ck = checkpointer(store, holdings, Coordinator(fenced=False))
    await ck.checkpoint_and_report()
    assert table_info(store, NAME, INCARNATION, WINDOWS).rows == 1
    assert table_info(store, NAME, INCARNATION, SNAPSHOT).rows == 1
    assert rt.spec_state is not None and rt.spec_state.closed == []
    assert rt.published_offset == 40
    # A window closed by a later batch stays for the next checkpoint; the release's final
    # checkpoint at the published offset is the one written (its closed rows included).
    (uri,) = [store.uri(k) for k in store.list_keys("checkpoints/")]
    assert await ck.write_final(P, 3, rt) == uri
    assert decode_spec_checkpoint(store.get(store.list_keys("checkpoints/")[0])).state.closed
    replace_state(holdings, rt, state({"ann": 3, "bob": 1}, [window("bob", 2, 1)]))
    rt.offset = 55
    await ck.checkpoint_and_report()
    assert table_info(store, NAME, INCARNATION, WINDOWS).rows == 2
    assert sorted(pd.read_parquet(table_dir(store, SNAPSHOT))["user"]) == ["ann", "bob"]
    assert ck.stats["results_published"] == 2


def test_counted_store_needs_a_replacing_store(tmp_path: Path) -> None:
    from pipeline.store import CountedStore

    class CreateOnly:
        def uri(self, key: str) -> str:
            return "mem://" + key

    with pytest.raises(StoreError, match="replaces no object"):
        CountedStore(CreateOnly()).put_newer("k", b"", 1)  # type: ignore[arg-type]


def test_ripple_results_shows_each_table_and_how_to_read_it(tmp_path: Path) -> None:
    from ripple.results import TableInfo, render_results

    described = {"name": NAME, "incarnation": INCARNATION}
    local = TableInfo(
        name=SNAPSHOT, uri="file:///srv/s/results/clicks/i2/snapshot/", files=3, rows=7
    )
    empty = TableInfo(name=WINDOWS, uri="file:///srv/s/results/clicks/i2/windows/", files=0, rows=0)
    text = render_results(described, [local, empty], None)
    assert "(3 files, 7 rows)" in text
    assert "read_parquet('/srv/s/results/clicks/i2/snapshot/*.parquet')" in text
    assert 'pandas.read_parquet("/srv/s/results/clicks/i2/snapshot/")' in text
    assert "no file yet" in text
    remote = TableInfo(
        name=SNAPSHOT, uri="s3://b/p/results/clicks/i2/snapshot/", files=3, rows=None
    )
    text = render_results(described, [remote], "http://127.0.0.1:9000")
    assert 'spark.read.parquet("s3a://b/p/results/clicks/i2/snapshot/")' in text
    assert "SET s3_endpoint='127.0.0.1:9000'; SET s3_use_ssl=false" in text
    assert "read_parquet('s3://b/p/results/clicks/i2/snapshot/*.parquet')" in text
    assert "(3 files)" in text


class Unreachable:
    """A results store that fails every write: the owner crashed between accept and publish."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        raise StoreError("gone")

    def put_newer(self, key: str, data: bytes, version: int) -> bool:
        raise StoreError("gone")


async def test_the_new_owner_publishes_what_the_old_one_did_not_and_a_republish_is_a_no_op(
    tmp_path: Path,
) -> None:
    """The old owner's checkpoint is accepted but never published (it crashed); the new
    owner loads it and its first checkpoint, at the loaded offset, publishes it. The old
    owner, resumed late, publishes the same checkpoint again: nothing changes."""
    store = LocalStore(str(tmp_path))
    closed = [window("ann", 1, 2), window("bob", 1, 1)]
    old_holdings, old_rt = held(store, state({"ann": 2, "bob": 1}, closed), 40)
    old = checkpointer(store, old_holdings, Coordinator(fenced=False))
    old.results = Unreachable()
    await old.checkpoint_and_report()
    assert store.list_keys("results/") == [] and old.stats["results_failures"] == 1
    assert old_rt.spec_state is not None and old_rt.spec_state.closed == closed  # not trimmed
    (ck_key,) = store.list_keys("checkpoints/")

    loaded = decode_spec_checkpoint(store.get(ck_key))
    new_holdings = Holdings()
    new_rt = PartitionRuntime(
        epoch=4, run=make_run(store), spec_state=live(new_holdings, loaded.state, 4), offset=40
    )
    new_rt.loaded.set()
    new_holdings.gates.host(P, 4)
    new_holdings.parts[P] = new_rt
    new = checkpointer(store, new_holdings, Coordinator(fenced=False))
    await new.checkpoint_and_report()
    assert len(store.list_keys("checkpoints/")) == 2  # its own, at epoch 4, same offset
    assert table_info(store, NAME, INCARNATION, WINDOWS).rows == 2
    files = {k: store.get(k) for k in store.list_keys("results/")}

    old.results = store  # the old owner's store answers again
    await old.report([CheckpointEntry(partition=P, epoch=3, offset=40, uri=store.uri(ck_key))])
    assert {k: store.get(k) for k in store.list_keys("results/")} == files
    assert table_info(store, NAME, INCARNATION, WINDOWS).rows == 2


async def test_a_new_owner_that_processed_past_the_loaded_offset_never_republishes_its_rows(
    tmp_path: Path,
) -> None:
    """The old owner published its checkpoint at 40; the new owner loads it, merges more
    (a window closes at 55) before its first round: the loaded rows stay in the file named by
    40 (create-only: already there), only the new row goes to the file of 55, and a crash of
    the old owner before publishing would have had the new owner write 40's file itself."""
    for old_published in (True, False):
        store = LocalStore(str(tmp_path / f"published-{old_published}"))
        closed = [window("ann", 1, 2), window("bob", 1, 1)]
        old_holdings, _ = held(store, state({"ann": 2, "bob": 1}, closed), 40)
        old = checkpointer(store, old_holdings, Coordinator(fenced=False))
        if not old_published:
            old.results = Unreachable()
        await old.checkpoint_and_report()
        (ck_key,) = store.list_keys("checkpoints/")

        loaded = decode_spec_checkpoint(store.get(ck_key))
        new_holdings = Holdings()
        new_rt = PartitionRuntime(
            epoch=4, run=make_run(store), spec_state=live(new_holdings, loaded.state, 4), offset=40
        )
        new_rt.loaded.set()
        new_holdings.gates.host(P, 4)
        new_holdings.parts[P] = new_rt
        more = window("cyd", 2, 3)
        replace_state(
            new_holdings,
            new_rt,
            SpecPartitionState(
                values=loaded.state.values,
                firsts=loaded.state.firsts,
                closed=[*loaded.state.closed, more],
                named=loaded.state.named,  # the loaded rows: named after 40 by the decode
            ),
        )
        new_rt.offset = 55
        new = checkpointer(store, new_holdings, Coordinator(fenced=False))
        await new.checkpoint_and_report()
        rows = pd.read_parquet(table_dir(store, WINDOWS))
        assert sorted(rows["user"]) == ["ann", "bob", "cyd"]  # each once
        newest = pq.read_table(io.BytesIO(store.get(windows_key(NAME, INCARNATION, P, 55))))
        assert newest.num_rows == 1
        assert new_rt.spec_state is not None and new_rt.spec_state.closed == []
        assert new_rt.spec_state.named == [] and new_rt.checkpointed is None  # not kept


async def test_a_third_owner_never_republishes_rows_a_second_one_carried_unpublished(
    tmp_path: Path,
) -> None:
    """A publishes its checkpoint at 40; B loads it, closes one more window and writes its
    checkpoint at 55, then dies before publishing it; C loads B's 55 and publishes: the rows
    B carried from 40 stay in 40's file only (named in B's checkpoint), the new one goes to
    55's."""
    store = LocalStore(str(tmp_path))
    closed = [window("ann", 1, 2), window("bob", 1, 1)]
    a_holdings, _ = held(store, state({"ann": 2, "bob": 1}, closed), 40)
    await checkpointer(store, a_holdings, Coordinator(fenced=False)).checkpoint_and_report()
    assert table_info(store, NAME, INCARNATION, WINDOWS).rows == 2
    (at_40,) = store.list_keys("checkpoints/")
    loaded = decode_spec_checkpoint(store.get(at_40)).state
    assert loaded.named == [(40, 2)]
    b_state = SpecPartitionState(
        values=loaded.values,
        firsts=loaded.firsts,
        closed=[*loaded.closed, window("cyd", 2, 3)],
        named=loaded.named,
    )
    b_holdings, b_rt = held(store, b_state, 55)
    b_rt.epoch = 4
    b_holdings.gates.host(P, 4)
    b = checkpointer(store, b_holdings, Coordinator(fenced=False))
    b.results = Unreachable()  # B dies between the accept and the publish
    await b.checkpoint_and_report()
    (at_55,) = [k for k in store.list_keys("checkpoints/") if k != at_40]
    c_state = decode_spec_checkpoint(store.get(at_55)).state
    assert c_state.named == [(40, 2), (55, 1)]
    c_holdings, c_rt = held(store, c_state, 55)
    c_rt.epoch = 5
    c_holdings.gates.host(P, 5)
    await checkpointer(store, c_holdings, Coordinator(fenced=False)).checkpoint_and_report()
    rows = pd.read_parquet(table_dir(store, WINDOWS))
    assert sorted(rows["user"]) == ["ann", "bob", "cyd"]  # each once
    assert c_rt.spec_state is not None and c_rt.spec_state.closed == []
