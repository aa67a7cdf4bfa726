"""The worker's host and release handlers against a real local store that can fail:
no coordinator, no Spark.

The worker's aiohttp app runs on a test server on 127.0.0.1; its store is a LocalStore
behind a switch that makes every call raise StoreError, as a store outage does to real
workers.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from pipeline.checkpoint import CheckpointStore
from pipeline.holdings import PartitionRuntime
from pipeline.lease import Lease
from pipeline.state import KeyState
from pipeline.store import LocalStore, StoreError
from pipeline.worker import Worker, WorkerSettings

TOKEN = "worker-token"


def offline_settings(tmp_path: Path, worker_id: str) -> WorkerSettings:
    """A worker whose coordinator and Spark addresses answer nothing (port 9)."""
    return WorkerSettings(
        coordinators=("http://127.0.0.1:9",),
        worker_id=worker_id,
        listen="127.0.0.1:0",
        spark_remote="sc://127.0.0.1:9",
        staging_dir=str(tmp_path / "stage"),
    )


class SwitchedStore:
    """A LocalStore that raises StoreError on every call while `down` (an ObjectStore)."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalStore(str(root))
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StoreError("503 ServiceUnavailable (store down)")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._check()
        return self.inner.put_if_absent(key, data)

    def get(self, key: str) -> bytes:
        self._check()
        return self.inner.get(key)

    def list_keys(self, prefix: str) -> list[str]:
        self._check()
        return self.inner.list_keys(prefix)

    def local_path(self, key: str) -> str | None:
        return self.inner.local_path(key)

    def uri(self, key: str) -> str:
        return self.inner.uri(key)


def holding_p2(tmp_path: Path, state: dict[str, KeyState]) -> tuple[Worker, SwitchedStore]:
    """A worker on a switchable store holding partition 2 open at epoch 3, at offset 5."""
    store = SwitchedStore(tmp_path / "store")
    worker = Worker(offline_settings(tmp_path, "w1"), store)
    worker.call_token, worker.total_partitions = TOKEN, 8
    rt = PartitionRuntime(epoch=3, state=dict(state), offset=5)
    rt.loaded.set()
    worker.parts[2] = rt
    worker.holdings.gates.host(2, 3)
    return worker, store


RELEASE_P2 = {"epoch": 3, "migration_id": "m-1"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_scenario_f_seed_606_release_with_store_down_stays_retryable(
    tmp_path: Path,
) -> None:
    """A release whose final checkpoint cannot be written answers 503 and leaves the gate
    open and the runtime held (a closed gate whose runtime stayed would be reported in every
    heartbeat, counted as load and block a drain); the leader's retry releases with a final
    checkpoint once the store is back, and the released epoch never reopens."""
    state = {"SYM0001": KeyState.of(12.5, 4)}
    worker, store = holding_p2(tmp_path, state)
    rt = worker.parts[2]
    release, auth = RELEASE_P2, AUTH
    try:
        async with TestClient(TestServer(worker.app())) as client:
            store.down = True
            r = await client.post("/v1/partitions/2/release", json=release, headers=auth)
            assert r.status == 503, await r.text()
            assert (await r.json())["error"] == "checkpoint_unavailable"
            assert worker.holdings.gates.admits(2, 3) and worker.parts.get(2) is rt

            store.down = False
            r = await client.post("/v1/partitions/2/release", json=release, headers=auth)
            assert r.status == 200, await r.text()
            checkpoint = (await r.json())["checkpoint"]
            assert checkpoint["offset"] == 5
            assert not worker.holdings.gates.admits(2, 3) and 2 not in worker.parts
            assert CheckpointStore(store).read(checkpoint["uri"]).state == state

            # The released epoch never reopens: a repeated release is refused.
            r = await client.post("/v1/partitions/2/release", json=release, headers=auth)
            assert r.status == 409
    finally:
        await worker.client.close()


async def test_overlapping_releases_write_one_final_checkpoint(tmp_path: Path) -> None:
    """Two release calls for one epoch that both arrive while a batch holds the lock (the
    leader's retry overtaking a slow first call): one releases with the final checkpoint,
    the other is answered 409 like a repeated release, and nothing is written twice."""
    import asyncio

    worker, store = holding_p2(tmp_path, {"SYM0001": KeyState.of(12.5, 4)})
    release, auth = RELEASE_P2, AUTH
    try:
        async with TestClient(TestServer(worker.app())) as client:
            async with worker.holdings.batch_lock:  # a batch in flight
                calls = [
                    asyncio.ensure_future(
                        client.post("/v1/partitions/2/release", json=release, headers=auth)
                    )
                    for _ in range(2)
                ]
                await asyncio.sleep(0.2)  # both wait for the batch
            statuses = sorted([(await c).status for c in calls])
            assert statuses == [200, 409], statuses
        assert len(store.list_keys("checkpoints/p00002/")) == 1
        assert 2 not in worker.parts
    finally:
        await worker.client.close()


async def test_scenario_f_seed_606_inherited_checkpoint_is_reported_under_its_own_epoch(
    tmp_path: Path,
) -> None:
    """A new owner that checkpoints before processing anything writes its own checkpoint
    under its own epoch, instead of reporting the inherited object (named epoch 1) as its
    epoch-2 checkpoint, which would record an epoch the object does not carry."""
    store = SwitchedStore(tmp_path / "store")
    worker = Worker(offline_settings(tmp_path, "w2"), store)
    worker.call_token, worker.total_partitions = TOKEN, 8
    worker.lease = Lease(lease_ms=60_000).renewed(worker.clock.monotonic_ms())
    checkpoints = CheckpointStore(store)
    state = {"SYM0001": KeyState.of(12.5, 4)}
    inherited = checkpoints.write(4, 1, 5, state)
    host = {"epoch": 2, "checkpoint": {"offset": 5, "uri": inherited, "epoch": 1}}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        async with TestClient(TestServer(worker.app())) as client:
            r = await client.post("/v1/partitions/4/host", json=host, headers=auth)
            assert r.status == 200, await r.text()
        (entry,) = await worker.checkpointer.write_checkpoints()
        assert (entry.partition, entry.epoch, entry.offset) == (4, 2, 5)
        loaded = checkpoints.read(entry.uri)
        assert (loaded.epoch, loaded.offset, loaded.state) == (2, 5, state)
    finally:
        await worker.client.close()


async def test_a_malformed_release_body_is_refused_naming_the_field(tmp_path: Path) -> None:
    """A release body the leader never sends is bad input (400, the field named), decided
    before the gate is consulted: `true` is no epoch 1, and the partition stays open."""
    worker = Worker(offline_settings(tmp_path, "w3"), SwitchedStore(tmp_path / "store"))
    worker.call_token, worker.total_partitions = TOKEN, 8
    rt = PartitionRuntime(epoch=1, offset=3)
    rt.loaded.set()
    worker.parts[2] = rt
    worker.holdings.gates.host(2, 1)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    cases: list[tuple[object, str]] = [
        ({"epoch": True}, "epoch"),
        ({"epoch": "1"}, "epoch"),
        ({"migration_id": "m-1"}, "epoch"),
        ({"epoch": 1, "migration_id": 5}, "migration_id"),
        ([1], "body"),
    ]
    try:
        async with TestClient(TestServer(worker.app())) as client:
            for body, field in cases:
                r = await client.post("/v1/partitions/2/release", json=body, headers=auth)
                assert r.status == 400, (body, r.status, await r.text())
                assert (await r.json())["field"] == field, body
            assert worker.holdings.gates.admits(2, 1) and worker.parts.get(2) is rt
    finally:
        await worker.client.close()


async def test_an_unwarm_call_drops_only_its_own_moves_copy(tmp_path: Path) -> None:
    """The leader's unwarm call: the copy made for that migration is dropped at once; a copy
    of the partition made for another move stays, and the call needs the call token."""
    worker = Worker(offline_settings(tmp_path, "w4"), SwitchedStore(tmp_path / "store"))
    worker.call_token, worker.total_partitions = TOKEN, 8
    auth = {"Authorization": f"Bearer {TOKEN}"}
    warming = worker.hosting.warming
    assert warming is not None
    try:
        async with TestClient(TestServer(worker.app())) as client:
            r = await client.post(
                "/v1/partitions/3/warm",
                json={"migration_id": "m-1", "checkpoint": None},
                headers=auth,
            )
            assert r.status == 200, await r.text()
            unwarm = "/v1/partitions/3/unwarm"
            r = await client.post(unwarm, json={"migration_id": "m-1"})
            assert r.status == 401 and 3 in warming.copies
            r = await client.post(unwarm, json={"migration_id": "m-2"}, headers=auth)
            assert await r.json() == {"partition": 3, "dropped": False}
            assert warming.copies[3].migration_id == "m-1"
            r = await client.post(unwarm, json={"migration_id": "m-1"}, headers=auth)
            assert await r.json() == {"partition": 3, "dropped": True}
            assert 3 not in warming.copies
            r = await client.post(unwarm, json={"migration_id": 1}, headers=auth)
            assert r.status == 400 and (await r.json())["field"] == "migration_id"
    finally:
        await worker.client.close()
