"""The worker's side of a recorded pipeline's rescale: the runs of its old and new routing
generations side by side (pipeline/spec/run.py), hosting a new generation's partition
(pipeline/hosting.py), the cut of an old partition (pipeline/cutting.py) and the build of the
new ones (pipeline/rebuild.py), with a local store and no Spark: the test makes the leader's
calls and stands in for the micro-batches by moving a partition's offset and state itself."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline.lease import Lease
from pipeline.pipeline_build import PipelineBuild
from pipeline.source import SourceSealed, generation_base
from pipeline.spec.partition_state import SpecCheckpoint, SpecPartitionState, merge_spec_batch
from pipeline.spec.run import PipelineRuns, ranges_of
from pipeline.store import LocalStore
from pipeline.worker import Worker, WorkerSettings
from shared.errors import RequestError, UnavailableError
from shared.messages.common import InvalidCallBody, SentCheckpoint, authorization
from shared.messages.host import HostRequest
from shared.messages.pipeline_rescale import PIPELINE_BUILD_ROUTE, PipelineBuildRequest
from shared.messages.rescale import BuildReply, CutRequest
from shared.routing import SLOT_BASE
from shared.spec.parse import parse_spec
from tests.unit.test_pipeline_spec_merge import SetSketches

SPEC = """
[schema]
ddl = "user STRING, amount BIGINT"
key = "user"
[[aggregations]]
name = "orders"
fn = "count"
[[aggregations]]
name = "spent"
fn = "sum"
column = "amount"
"""
# The new generation's spec (a spec update): `orders` carries, `top` starts with no rows.
NEW_SPEC = SPEC.replace('name = "spent"\nfn = "sum"', 'name = "top"\nfn = "max"')
OLD_FIRST, OLD_COUNT = SLOT_BASE + 10, 2
NEW_FIRST, NEW_COUNT = SLOT_BASE + 30, 3
OTHER_FIRST = SLOT_BASE + 20  # another pipeline, created between the two generations
KEYS_MAX = 4  # the pipeline's own key limit (its setting; 0 would be none)
POLLS_MAX = 50  # build calls before the test gives up


class FakeCoordinator:
    """The coordinator's pipeline reads, as a rescale of `orders` moves them along."""

    def __init__(self, keys_max: int = KEYS_MAX) -> None:
        self.keys_max = keys_max  # the pipelines' key limit setting
        self.asked: list[str] = []
        self.state = "active"
        self.phase = "rescaling"  # or "done": the new generation is the current one
        self.listing_shows_past = True

    def describe(self) -> dict[str, Any]:
        """As the coordinator records it: the rescale's new range under `generation`, its
        spec text while it is not the pipeline's yet ("" after); past ranges without text."""
        old = {"first_slot": OLD_FIRST, "partitions": OLD_COUNT, "routing_generation": 0}
        new = {"first_slot": NEW_FIRST, "partitions": NEW_COUNT, "routing_generation": 1}
        rescale = {"first_slot": NEW_FIRST, "partitions": NEW_COUNT, "generation": 1}
        common = {
            "name": "orders",
            "incarnation": 2,
            "state": self.state,
            "settings": {"max_keys_per_partition": self.keys_max},
            "past": [],
        }
        if self.phase == "rescaling":
            rescale["spec_text"] = NEW_SPEC
            return {**common, **old, "spec_text": SPEC, "rescale": rescale}
        rescale["spec_text"] = ""
        return {**common, **new, "spec_text": NEW_SPEC, "rescale": rescale, "past": [old]}

    def other(self) -> dict[str, Any]:
        return {
            "name": "clicks",
            "incarnation": 1,
            "state": "active",
            "first_slot": OTHER_FIRST,
            "partitions": 4,
            "routing_generation": 0,
            "spec_text": SPEC,
            "settings": {"max_keys_per_partition": self.keys_max},
        }

    async def get(self, path: str) -> dict[str, Any]:
        self.asked.append(path)
        if path == "/v1/pipelines":
            rows = [self.describe(), self.other()]
            for row in rows:
                row.pop("spec_text")
                if not self.listing_shows_past:
                    row.pop("past", None)
            return {"pipelines": rows}
        if path == "/v1/pipelines/orders":
            return self.describe()
        assert path == "/v1/pipelines/clicks"
        return self.other()


def test_a_describes_ranges_are_its_current_its_rescales_and_its_past_ones() -> None:
    fake = FakeCoordinator()
    fake.phase = "done"
    ranges = ranges_of(fake.describe())
    assert [(r.first_slot, r.partitions, r.generation, r.spec_text) for r in ranges] == [
        (NEW_FIRST, NEW_COUNT, 1, NEW_SPEC),
        (NEW_FIRST, NEW_COUNT, 1, None),  # the rescale, done: its text is the current one
        (OLD_FIRST, OLD_COUNT, 0, None),
    ]
    past = {"first_slot": OLD_FIRST, "partitions": 2, "spec_text": SPEC}
    assert ranges_of({"past": [past]})[0].spec_text == SPEC  # a past range may carry its text
    # Absent or not yet set up (first slot 0), a range is no range; a bad entry is skipped.
    assert ranges_of({"first_slot": 0, "partitions": 2}) == []
    body = {"first_slot": OLD_FIRST, "partitions": 2, "past": [{"first_slot": "x"}, 3]}
    assert len(ranges_of(body)) == 1


@pytest.mark.parametrize("phase", ["rescaling", "done"])
@pytest.mark.parametrize("listing_shows_past", [True, False])
async def test_the_old_and_new_generations_runs_coexist_each_on_its_own_numbers(
    tmp_path: Path, phase: str, listing_shows_past: bool
) -> None:
    fake = FakeCoordinator()
    fake.phase, fake.listing_shows_past = phase, listing_shows_past
    runs = PipelineRuns(fake.get, LocalStore(str(tmp_path)))
    old = await runs.of(OLD_FIRST + 1)
    new = await runs.of(NEW_FIRST + 2)
    assert old is not None and new is not None and old is not new
    assert (old.info.first_slot, old.info.partitions, old.info.generation) == (
        OLD_FIRST,
        OLD_COUNT,
        0,
    )
    assert (new.info.first_slot, new.info.partitions, new.info.generation) == (
        NEW_FIRST,
        NEW_COUNT,
        1,
    )
    # Each generation runs its own spec (a past range without its text: the current one, a
    # checkpoint of another version being refused on load), and reads its own numbers' logs.
    assert old.info.spec_text == (SPEC if phase == "rescaling" else NEW_SPEC)
    assert new.info.spec_text == NEW_SPEC
    assert old.log.base == OLD_FIRST and old.log.generation == 0
    assert new.log.base == NEW_FIRST and new.log.generation == 1
    first = new.log.append_table(NEW_FIRST + 2, _rows(new, 3))
    assert first == generation_base(1)
    assert old.log.end_offset(OLD_FIRST + 1) == 0  # another log: nothing of the new one's
    # Both stay found without asking again, every partition of their ranges.
    fake.asked.clear()
    assert await runs.of(OLD_FIRST) is old and await runs.of(NEW_FIRST) is new
    assert fake.asked == []
    # The pause of the pipeline reaches both generations' runs.
    fake.state = "paused"
    await runs.refresh(100.0)
    assert old.paused and new.paused
    # A number of no range of anyone's is nobody's.
    with pytest.raises(UnavailableError):
        await runs.of(NEW_FIRST + NEW_COUNT)


def _rows(run: Any, n: int) -> Any:
    import pyarrow as pa

    schema = pa.schema(list(run.schema)[:-1])
    return pa.Table.from_pylist([{"user": f"u{i}", "amount": i} for i in range(n)], schema=schema)


def make_worker(tmp_path: Path, fake: FakeCoordinator) -> Worker:
    """A worker with a lease, whose pipeline reads are the fake's (nothing reaches Spark)."""
    nowhere = "127.0.0.1:9"  # no coordinator, no Spark: neither is reached
    settings = WorkerSettings(
        coordinators=(f"http://{nowhere}",),
        spark_remote=f"sc://{nowhere}",
        worker_id="w1",
        listen="127.0.0.1:0",
        staging_dir=str(tmp_path / "stage"),
        max_keys_per_partition=KEYS_MAX,
    )
    w = Worker(settings, LocalStore(str(tmp_path / "store")))
    w.session.generations.learn((4,))  # `default`'s: 4 partitions, never rescaled
    runs = PipelineRuns(fake.get, w.store)
    w.hosting.runs = w.processor.pipelines.runs = runs
    w.lease = Lease(lease_ms=600_000).renewed(w.clock.monotonic_ms())
    return w


async def test_a_new_generations_partition_is_hosted_in_its_generation(tmp_path: Path) -> None:
    w = make_worker(tmp_path, FakeCoordinator())
    try:
        # No checkpoint: it starts at its generation's first offset, not at 0, and `default`'s
        # routing is neither asked nor changed.
        reply = await w.hosting.host(HostRequest(partition=NEW_FIRST, epoch=1))
        assert reply.offset == generation_base(1) == w.parts[NEW_FIRST].offset
        assert w.session.generations.current == 0
        run = w.parts[NEW_FIRST].run
        assert run is not None and run.info.generation == 1
        # A checkpoint of another generation is not this partition's.
        wrong = SentCheckpoint(offset=7, uri="file:///x", epoch=1)
        with pytest.raises(RequestError, match="generation 0"):
            await w.hosting.host(HostRequest(partition=NEW_FIRST + 1, epoch=1, checkpoint=wrong))
        assert NEW_FIRST + 1 not in w.parts
    finally:
        await w.client.close()


def _processed(w: Worker, p: int, upto: int) -> None:
    """Stand in for the micro-batches: partition p's state as of `upto`, its rows merged."""
    rt = w.parts[p]
    assert rt.run is not None and rt.spec_state is not None
    rows = rt.run.read(p, rt.offset, 1000)[0].to_pylist()
    batch: dict[str, dict[str, Any]] = {}
    firsts: dict[str, int] = {}
    for r in rows:
        held = batch.setdefault(r["user"], {"orders": 0, "spent": 0})
        held["orders"] += 1
        held["spent"] += r["amount"]
        firsts.setdefault(r["user"], r["offset"])
    rt.spec_state.merge(rt.run.outputs, batch, firsts, rt.run.max_keys, SetSketches())
    rt.offset = upto


async def test_the_cut_of_a_recorded_partition_seals_its_log_and_checkpoints_at_the_seal(
    tmp_path: Path,
) -> None:
    w = make_worker(tmp_path, FakeCoordinator())
    p = OLD_FIRST + 1
    try:
        await w.hosting.host(HostRequest(partition=p, epoch=3))
        run = w.parts[p].run
        assert run is not None
        run.log.append_table(p, _rows(run, 5))
        call = CutRequest(partition=p, epoch=3, generation=0, partitions=NEW_COUNT, routing=(8,))
        # Sealed at its end; not done while the micro-batches are below the seal.
        first = await w.cutting.cut(call)
        assert (first.offset, first.done, first.uri) == (5, False, None)
        assert run.log.cut(p, 0) == 5 and w.session.generations.current == 0  # not learned
        with pytest.raises(SourceSealed):  # a producer meets the seal and follows it
            run.log.append_table(p, _rows(run, 1))
        assert await w.cutting.cut(call) == first  # the seal is found again, not added
        _processed(w, p, upto=5)
        done = await w.cutting.cut(call)
        assert done.done and done.offset == 5 and done.uri is not None
        ck = w.checkpoints.read_any(done.uri)
        assert isinstance(ck, SpecCheckpoint) and (ck.partition, ck.epoch, ck.offset) == (p, 3, 5)
        assert ck.spec_version == run.version and ck.state == w.parts[p].spec_state.snapshot()
        assert await w.cutting.cut(call) == done  # repeated: the same checkpoint
        # Another epoch or generation is not what this worker holds.
        for stale in (replace(call, epoch=4), replace(call, generation=1, routing=(8, 3))):
            with pytest.raises(RequestError):
                await w.cutting.cut(stale)
        # No lease: no checkpoint is written at the cut.
        w.lease = Lease(lease_ms=1)
        with pytest.raises(UnavailableError, match="lease"):
            await w.cutting.cut(call)
    finally:
        await w.client.close()


def _cut_checkpoints(w: Worker, run: Any, epoch: int) -> list[dict[str, Any]]:
    """Each old partition's checkpoint at its cut (offset 10), as its cut call writes it: 10
    keys each, u6..u9 in both (as a transform that rewrites keys makes them)."""
    cuts = []
    for i in range(OLD_COUNT):
        p = OLD_FIRST + i
        batch = {f"u{k}": {"orders": k + 1, "spent": 10 * k} for k in range(6 * i, 6 * i + 10)}
        firsts = {key: n for n, key in enumerate(batch)}
        state, _ = merge_spec_batch(
            run.outputs, SpecPartitionState(), batch, firsts, 100, SetSketches()
        )
        uri = w.checkpoints.write_encoded(p, epoch, 10, run.encode(p, epoch, 10, state))
        cuts.append({"partition": p, "offset": 10, "uri": uri})
    return cuts


def _build_body(cuts: list[dict[str, Any]]) -> dict[str, Any]:
    """The leader's build call of `orders`' generation 1 under NEW_SPEC, at epoch 5."""
    return {
        "pipeline": "orders",
        "incarnation": 2,
        "generation": 1,
        "first_slot": NEW_FIRST,
        "partitions": NEW_COUNT,
        "epoch": 5,
        "spec_sha256": hashlib.sha256(NEW_SPEC.encode()).hexdigest(),
        "cuts": cuts,
    }


def _no_spark() -> Any:
    raise UnavailableError("Spark is not connected yet", code="unavailable")


def test_a_pipeline_build_call_is_read_whole_or_refused_naming_the_field() -> None:
    cut = {"partition": OLD_FIRST, "offset": 10, "uri": "file:///c"}
    body = _build_body([{**cut, "partition": OLD_FIRST + 1}, cut])
    call = PipelineBuildRequest.from_json(body)
    assert [c.partition for c in call.cuts] == [OLD_FIRST, OLD_FIRST + 1]  # by number
    assert PipelineBuildRequest.from_json(call.to_json()) == call
    assert call.numbers == range(NEW_FIRST, NEW_FIRST + NEW_COUNT)
    for field, bad in (
        ("pipeline", "no/slash"),
        ("incarnation", 0),
        ("generation", 0),
        ("first_slot", 5),  # one of `default`'s numbers
        ("partitions", 0),
        ("epoch", 0),
        ("spec_sha256", "A" * 64),
        ("cuts", [cut, cut]),
        ("cuts", [{**cut, "uri": ""}]),
    ):
        with pytest.raises(InvalidCallBody) as err:
            PipelineBuildRequest.from_json({**body, field: bad})
        assert err.value.field == field, (field, bad)


def _store_objects(w: Worker) -> dict[str, bytes]:
    return {k: w.store.get(k) for k in w.store.list_keys("")}


async def test_the_build_writes_each_new_number_from_the_cuts_and_a_rerun_writes_nothing(
    tmp_path: Path,
) -> None:
    fake = FakeCoordinator()
    w = make_worker(tmp_path, fake)
    w.call_token = "call"
    auth = {"Authorization": authorization("call")}
    w.rebuild.pipelines = PipelineBuild(fake.get, w.checkpoints, SetSketches, results=w.store)
    old = await w.hosting.runs.of(OLD_FIRST)  # type: ignore[union-attr]
    body = _build_body(_cut_checkpoints(w, old, epoch=4))
    base = generation_base(1)
    try:
        async with TestClient(TestServer(w.app())) as client:
            resp = await client.post(PIPELINE_BUILD_ROUTE, json=body)
            assert resp.status == 401
            for field, bad in (("first_slot", OLD_FIRST), ("spec_sha256", "x"), ("cuts", [])):
                resp = await client.post(
                    PIPELINE_BUILD_ROUTE, json={**body, field: bad}, headers=auth
                )
                assert resp.status == 400 and (await resp.json())["field"] == field
            for _ in range(POLLS_MAX):
                resp = await client.post(PIPELINE_BUILD_ROUTE, json=body, headers=auth)
                reply = BuildReply.from_json(await resp.json())
                assert resp.status == 200 and reply is not None
                if reply.done:
                    break
                await w.rebuild.wait()
            assert reply.done
            numbers = [c.partition for c in reply.checkpoints]
            assert numbers == list(range(NEW_FIRST, NEW_FIRST + NEW_COUNT))
            # Every key of the cuts is in exactly one new partition, admitted or dead letter;
            # `orders` carries (u6..u9 summed over both cuts), `top` starts with no rows.
            admitted: dict[str, Any] = {}
            new = parse_spec(NEW_SPEC)
            for c in reply.checkpoints:
                ck = w.checkpoints.read_any(c.uri)
                assert isinstance(ck, SpecCheckpoint) and ck.spec_version == new.version
                assert (
                    (ck.partition, ck.epoch, ck.offset)
                    == (c.partition, 5, base)
                    == (
                        c.partition,
                        5,
                        c.offset,
                    )
                )
                assert len(ck.state.values) <= KEYS_MAX
                admitted.update(ck.state.values)
            assert all(v["top"] is None for v in admitted.values())
            expected = {f"u{k}": k + 1 for k in range(16)}
            for k in range(6, 10):
                expected[f"u{k}"] *= 2
            assert {k: v["orders"] for k, v in admitted.items()} == {
                k: expected[k] for k in admitted
            }
            dead = [k for n in numbers for k in w.checkpoints.dead_letter_keys(n)]
            assert len(admitted) < 16 and dead  # the limit refused some: dead letters
            # A rerun (a new leader, another worker) writes nothing new, answers the same; a
            # worker without Spark builds it too (no output here is a sketch).
            objects = _store_objects(w)
            again = PipelineBuild(fake.get, w.checkpoints, _no_spark, results=w.store)
            assert await again.run(PipelineBuildRequest.from_json(body)) == reply.checkpoints
            assert _store_objects(w) == objects
            # A spec the describe does not show, or a cut that is another partition's, is
            # refused (503: the leader asks again), nothing written.
            wrong_cut = {**body["cuts"][1], "partition": OLD_FIRST + 5}
            for bad in (
                {**body, "spec_sha256": "0" * 64},
                {**body, "cuts": [body["cuts"][0], wrong_cut]},
            ):
                await w.rebuild.wait()
                resp = await client.post(PIPELINE_BUILD_ROUTE, json=bad, headers=auth)
                assert resp.status == 200 and not (await resp.json())["done"]
                await w.rebuild.wait()
                resp = await client.post(PIPELINE_BUILD_ROUTE, json=bad, headers=auth)
                assert resp.status == 503
            assert _store_objects(w) == objects
        # The new partition is hosted from its built checkpoint, in the new generation.
        built = reply.checkpoints[0]
        sent = SentCheckpoint(offset=built.offset, uri=built.uri, epoch=5)
        await w.hosting.host(HostRequest(partition=built.partition, epoch=6, checkpoint=sent))
        rt = w.parts[built.partition]
        assert rt.offset == base and rt.run is not None and rt.run.version == new.version
        assert rt.spec_state is not None
        assert rt.spec_state.snapshot() == w.checkpoints.read_any(built.uri).state  # type: ignore[union-attr]
    finally:
        await w.rebuild.wait()
        await w.client.close()
