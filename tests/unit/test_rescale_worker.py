"""The worker's side of a rescale (pipeline/cutting.py, pipeline/rebuild.py, routing by
generation in hosting and key reads), through the worker's HTTP API with a real local Spark
and, where the store matters, a real S3 protocol endpoint (moto). No coordinator: the test
makes the leader's calls itself."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline.aggregate import Aggregator
from pipeline.checkpoint import CheckpointStore
from pipeline.lease import Lease
from pipeline.rebuild import Rebuild, build_checkpoints, spark_move
from pipeline.source import Producer, SourceLog, generate, generation_base
from pipeline.state import KeyState, PartitionState, aggregate_records
from pipeline.state_move import MovedState, move_states
from pipeline.store import LocalStore, ObjectStore, StoreError, open_store
from pipeline.worker import Worker, WorkerSettings
from shared.errors import ErrorKind, RequestError, UnavailableError
from shared.messages.common import SentCheckpoint, authorization
from shared.messages.host import HostRequest
from shared.messages.rescale import BuildReply, BuildRequest, CutCheckpoint, CutReply
from shared.routing import Routing

OLD, NEW = 2, 3
CALL_TOKEN = "call"
AUTH = {"Authorization": authorization(CALL_TOKEN)}
POLLS_MAX = 200  # calls and micro-batches a step may take before the test gives up
POLL_WAIT_S = 30.0


def _records(seed: int, n: int = 600) -> list[tuple[str, float]]:
    return generate(n, 40, seed=seed)


def _cut_checkpoints(store: ObjectStore, epoch: int) -> tuple[CutCheckpoint, ...]:
    """Seal both old partitions and checkpoint each at its cut, as its owner would."""
    log, checkpoints = SourceLog(store, [OLD, NEW]), CheckpointStore(store)
    cuts = []
    for p in range(OLD):
        cut = log.seal(p, 0)
        t = log.read(p).to_pydict()
        state = aggregate_records(zip(t["key"], t["value"], t["offset"], strict=True))
        uri = checkpoints.write(p, epoch, cut, state)
        cuts.append(CutCheckpoint(partition=p, offset=cut, uri=uri, epoch=epoch))
    return tuple(cuts)


def test_a_build_writes_each_new_partition_at_its_base_and_refuses_a_wrong_cut(
    tmp_path: Path,
) -> None:
    store = LocalStore(str(tmp_path / "store"))
    Producer(store, OLD).produce(_records(1))
    cuts = _cut_checkpoints(store, epoch=4)
    call = BuildRequest(generation=1, routing=(OLD, NEW), epoch=5, cuts=cuts)
    checkpoints = CheckpointStore(store)
    built = build_checkpoints(checkpoints, call, move_states, max_keys=5)
    base = generation_base(1)
    assert [(b.partition, b.offset) for b in built] == [(q, base) for q in range(NEW)]
    new = Routing(generation=1, partitions=NEW)
    everything = {**checkpoints.read(cuts[0].uri).state, **checkpoints.read(cuts[1].uri).state}
    admitted: dict[str, int] = {}
    for b in built:
        data = checkpoints.read(b.uri)
        assert (data.partition, data.epoch, data.offset) == (b.partition, 5, base)
        assert len(data.state) <= 5 and all(new.partition_for(k) == b.partition for k in data.state)
        admitted.update(dict.fromkeys(data.state, b.partition))
    # Every key the limit refused is a dead-letter row of its new partition, named at its base.
    dead_keys = [k for q in range(NEW) for k in checkpoints.dead_letter_keys(q)]
    assert dead_keys and all(f"e{5:010d}-o{base:020d}-{base:020d}" in k for k in dead_keys)
    assert len(admitted) == NEW * 5 and set(admitted) < set(everything)
    # A rerun writes nothing new (create-only, same bytes) and answers the same checkpoints.
    assert build_checkpoints(checkpoints, call, move_states, max_keys=5) == built
    # A cut that is not what the checkpoint holds is refused, not built from.
    wrong = BuildRequest(
        generation=1,
        routing=(OLD, NEW),
        epoch=5,
        cuts=(cuts[0], CutCheckpoint(partition=1, offset=cuts[1].offset, uri=cuts[0].uri, epoch=4)),
    )
    with pytest.raises(Exception, match="holds"):
        build_checkpoints(checkpoints, wrong, move_states, max_keys=5)


@pytest.mark.spark
def test_the_build_on_spark_writes_the_same_bytes_as_in_process(
    spark_remote: str, tmp_path: Path
) -> None:
    store = LocalStore(str(tmp_path / "store"))
    Producer(store, OLD).produce(_records(2, 2000))
    call = BuildRequest(
        generation=1, routing=(OLD, NEW), epoch=3, cuts=_cut_checkpoints(store, epoch=2)
    )
    checkpoints = CheckpointStore(store)
    here = build_checkpoints(checkpoints, call, move_states, max_keys=12)
    # Create-only: the Spark build's objects would conflict with different bytes.
    assert build_checkpoints(checkpoints, call, spark_move(spark_remote), max_keys=12) == here


# -- the worker, through its HTTP API -----------------------------------------------------------


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"))
    endpoint = request.getfixturevalue("moto_endpoint")
    _, bucket = request.getfixturevalue("s3_bucket")
    return open_store(f"s3://{bucket}/rescale", endpoint)


@pytest.fixture
async def worker(
    store: ObjectStore, tmp_path: Path, spark_remote: str
) -> AsyncIterator[tuple[Worker, TestClient[Any, Any]]]:
    settings = WorkerSettings(
        coordinators=("http://127.0.0.1:9",),
        worker_id="w1",
        listen="127.0.0.1:0",
        spark_remote=spark_remote,
        staging_dir=str(tmp_path / "stage"),
        max_keys_per_partition=1000,
    )
    w = Worker(settings, store)
    w.session.generations.learn((OLD,))
    w.total_partitions = OLD
    await w.processor.start(w.session.generations.counts)
    w.call_token = CALL_TOKEN
    w.lease = Lease(lease_ms=600_000).renewed(w.clock.monotonic_ms())
    try:
        async with TestClient(TestServer(w.app())) as client:
            yield w, client
    finally:
        await w.rebuild.wait()
        await w.processor.close()
        await w.client.close()


async def _post(client: TestClient[Any, Any], path: str, body: object) -> tuple[int, Any]:
    resp = await client.post(path, json=body, headers=AUTH)
    return resp.status, await resp.json()


async def _catch_up(w: Worker) -> None:
    """Micro-batches until one merges nothing."""
    for _ in range(POLLS_MAX):
        if await w.processor.process_once() == 0:
            return
    raise AssertionError("processing did not catch up")


def _batch_job(store: ObjectStore, spark_remote: str) -> PartitionState:
    log = SourceLog(store, [OLD, NEW])
    table = pa.concat_tables([log.read_segment(s) for s in log.all_segments()])
    return Aggregator(spark_remote).batch_job_table(table)


@pytest.mark.spark
async def test_cut_build_and_host_give_every_key_the_batch_jobs_state(
    worker: tuple[Worker, TestClient[Any, Any]], store: ObjectStore, spark_remote: str
) -> None:
    w, client = worker
    producer = Producer(store, OLD)
    producer.produce(_records(3))
    for p in range(OLD):
        status, _ = await _post(client, f"/v1/partitions/{p}/host", {"epoch": 1})
        assert status == 200
    await _catch_up(w)
    producer.produce(_records(4))  # below the cut, not processed yet when the cut is asked

    cut_body = {"epoch": 1, "generation": 0, "partitions": NEW, "routing": [OLD]}
    status, body = await _post(client, "/v1/partitions/0/cut", {**cut_body, "epoch": 2})
    assert status == 409 and body["error"] == "stale_epoch"
    replies: dict[int, CutReply] = {}
    for p in range(OLD):
        status, body = await _post(client, f"/v1/partitions/{p}/cut", cut_body)
        reply = CutReply.from_json(body)
        assert status == 200 and reply is not None and not reply.done and reply.uri is None
        replies[p] = reply
    # Records produced after the seals follow them into generation 1.
    producer.produce(_records(5))
    assert producer.log.routing == Routing(generation=1, partitions=NEW)
    for p in range(OLD):
        for _ in range(POLLS_MAX):
            status, body = await _post(client, f"/v1/partitions/{p}/cut", cut_body)
            reply = CutReply.from_json(body)
            assert status == 200 and reply is not None and reply.offset == replies[p].offset
            if reply.done:
                break
            await w.processor.process_once()
        assert reply.done and w.parts[p].offset == reply.offset  # stopped at the cut
        replies[p] = reply
    # Processing goes no further than the seal, and a repeated cut answers the same.
    await _catch_up(w)
    status, body = await _post(client, "/v1/partitions/0/cut", cut_body)
    assert CutReply.from_json(body) == replies[0] and w.parts[0].offset == replies[0].offset

    build = BuildRequest(
        generation=1,
        routing=(OLD, NEW),
        epoch=2,
        cuts=tuple(
            CutCheckpoint(partition=p, offset=r.offset, uri=r.uri or "", epoch=1)
            for p, r in replies.items()
        ),
    )
    built: BuildReply | None = None
    for _ in range(POLLS_MAX):
        status, body = await _post(client, "/v1/rescale/build", build.to_json())
        assert status == 200
        built = BuildReply.from_json(body)
        assert built is not None and built.generation == 1
        if built.done:
            break
        other = {**build.to_json(), "generation": 2, "routing": [OLD, NEW, 4]}
        status, body = await _post(client, "/v1/rescale/build", other)
        assert status in (200, 400, 409)  # one build at a time; a finished one gives way
        await asyncio.sleep(0.2)
    assert built is not None and built.done and len(built.checkpoints) == NEW

    # The old partitions go (the leader's table no longer names them), the new ones come.
    w.holdings.close_unassigned({})
    for ck in built.checkpoints:
        sent = SentCheckpoint(offset=ck.offset, uri=ck.uri, epoch=2)
        host = HostRequest(partition=ck.partition, epoch=3, checkpoint=sent, routing=(OLD, NEW))
        status, body = await _post(client, host.path, host.to_json())
        assert status == 200 and body["offset"] == generation_base(1)
    await _catch_up(w)

    oracle = _batch_job(store, spark_remote)
    new = Routing(generation=1, partitions=NEW)
    seen: dict[str, int] = {}
    for q in range(NEW):
        state = w.parts[q].state
        assert all(new.partition_for(k) == q for k in state)
        for k in state:
            assert k not in seen  # no key in two partitions
            seen[k] = q
    assert {k: s for q in range(NEW) for k, s in w.parts[q].state.items()} == oracle

    # Key reads: by the right generation, by none, and a stale one.
    key = next(iter(w.parts[0].state))
    resp = await client.get(f"/v1/partitions/0/keys/{key}?generation=1")
    assert resp.status == 200 and (await resp.json())["count"] == oracle[key].count
    assert (await client.get(f"/v1/partitions/0/keys/{key}")).status == 200
    resp = await client.get(f"/v1/partitions/0/keys/{key}?generation=0")
    body = await resp.json()
    assert resp.status == 409 and body["error"] == "stale_generation"
    assert body["field"] == "generation" and "current generation is 1" in body["message"]
    resp = await client.get(f"/v1/partitions/0/keys/{key}?generation=x")
    assert resp.status == 400 and (await resp.json())["field"] == "generation"


async def test_calls_are_refused_without_a_state_change(tmp_path: Path) -> None:
    settings = WorkerSettings(
        coordinators=("http://127.0.0.1:9",),
        worker_id="w1",
        listen="127.0.0.1:0",
        spark_remote="sc://127.0.0.1:9",
        staging_dir=str(tmp_path / "stage"),
    )
    w = Worker(settings, LocalStore(str(tmp_path / "store")))
    w.session.generations.learn((OLD,))
    w.total_partitions, w.call_token = OLD, CALL_TOKEN
    w.lease = Lease(lease_ms=600_000).renewed(w.clock.monotonic_ms())
    cut = {"epoch": 1, "generation": 0, "partitions": NEW, "routing": [OLD]}
    try:
        async with TestClient(TestServer(w.app())) as client:
            resp = await client.post("/v1/partitions/0/cut", json=cut)
            assert resp.status == 401
            status, body = await _post(client, "/v1/partitions/0/cut", cut)
            assert status == 409 and body["error"] == "stale_epoch"  # not hosted here
            status, body = await _post(client, "/v1/partitions/0/cut", {**cut, "routing": [3]})
            assert status == 409 and body["error"] == "routing_conflict"
            status, body = await _post(client, "/v1/rescale/build", {"generation": 1})
            assert status == 400 and body["field"] == "routing"
            status, body = await _post(
                client, "/v1/partitions/0/host", {"epoch": 1, "x": "y" * 70_000}
            )
            assert status == 413 and body["error"] == "too_large"
            # A host from a generation-1 checkpoint needs the routing: none known, none asked.
            sent = {"offset": generation_base(1), "uri": "u", "epoch": 1}
            status, body = await _post(
                client, "/v1/partitions/0/host", {"epoch": 1, "checkpoint": sent}
            )
            assert status == 503 and body["error"] == "routing_unknown"
            assert not w.parts and w.session.generations.counts == (OLD,)
            # A build body may be far larger than other calls' (one cut per old partition).
            many = 5_000
            big = BuildRequest(
                generation=1,
                routing=(many, NEW),
                epoch=2,
                cuts=tuple(
                    CutCheckpoint(partition=p, offset=0, uri=f"file:///nowhere/{p}", epoch=1)
                    for p in range(many)
                ),
            )
            status, body = await _post(client, "/v1/rescale/build", big.to_json())
            assert status == 200 and body == {"generation": 1, "done": False, "checkpoints": []}
            await w.rebuild.wait()
            status, body = await _post(client, "/v1/rescale/build", big.to_json())
            assert status == 503 and body["error"] == "checkpoint_unavailable"
    finally:
        await w.client.close()


async def test_one_build_at_a_time_and_a_failed_one_starts_again(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "store"))
    Producer(store, OLD).produce(_records(6))
    call = BuildRequest(generation=1, routing=(OLD, NEW), epoch=3, cuts=_cut_checkpoints(store, 2))
    go, runs = threading.Event(), []

    def held_move(
        old: Mapping[int, Mapping[str, KeyState]], new: Routing, max_keys: int
    ) -> dict[int, MovedState]:
        runs.append(new.generation)
        if not go.wait(POLL_WAIT_S):
            raise RuntimeError("the test never let the move go")
        if len(runs) == 1:
            raise StoreError("the store failed mid-build")
        return move_states(old, new, max_keys)

    rebuild = Rebuild(CheckpointStore(store), lambda: held_move, max_keys=100)
    assert not rebuild.build(call).done
    other = BuildRequest(generation=1, routing=(OLD, NEW), epoch=4, cuts=call.cuts)
    with pytest.raises(RequestError) as info:
        rebuild.build(other)
    assert info.value.kind is ErrorKind.CONFLICT and info.value.code == "build_in_flight"
    assert not rebuild.build(call).done  # the same call answers progress
    go.set()
    await rebuild.wait()
    with pytest.raises(UnavailableError, match="mid-build"):
        rebuild.build(call)
    assert not rebuild.build(call).done  # started again
    await rebuild.wait()
    done = rebuild.build(call)
    assert len(runs) == 2
    assert done.done and [c.partition for c in done.checkpoints] == list(range(NEW))
    assert rebuild.build(call) == done and len(runs) == 2  # kept, not run again


def test_the_routing_a_worker_reads_from_the_coordinators_health() -> None:
    from pipeline.coordinator_replies import routing
    from shared.errors import ClientError

    assert routing({"cluster": {"total_partitions": 4}}) == (4,)
    assert routing({"cluster": {"total_partitions": 6, "routing": [4, 6]}}) == (4, 6)
    for bad in ([], [4, 0], [4, True], "4", [4, "6"]):
        with pytest.raises(ClientError) as info:
            routing({"cluster": {"total_partitions": 6, "routing": bad}})
        assert info.value.field == "routing"
