"""A real worker (no Spark, the coordinator faked) hosting a recorded pipeline's partition:
its state lives in a store under --state-dir/stores, a key read is one store read, /state is
bounded with a truncated flag, a release hands over a checkpoint that hosts the same state
again, and the released runtime's store is destroyed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pipeline import http_api
from pipeline.holdings import STORES_DIR
from pipeline.lease import Lease
from pipeline.spec.run import PipelineRuns
from pipeline.store import LocalStore
from pipeline.worker import Worker, WorkerSettings
from shared.messages.common import SentCheckpoint
from shared.messages.host import HostRequest
from shared.messages.release import ReleaseRequest
from tests.unit.test_pipeline_spec_merge import SetSketches
from tests.unit.test_spec_rescale_worker import OLD_FIRST, FakeCoordinator

WAIT_S = 5.0  # a bound on every wait below


def make_worker(tmp_path: Path, keys_max: int = 0) -> Worker:
    nowhere = "127.0.0.1:9"  # no coordinator, no Spark: neither is reached
    settings = WorkerSettings(
        coordinators=(f"http://{nowhere}",),
        spark_remote=f"sc://{nowhere}",
        worker_id="w1",
        listen="127.0.0.1:0",
        staging_dir=str(tmp_path / "stage"),
        state_dir=str(tmp_path / "state"),
    )
    w = Worker(settings, LocalStore(str(tmp_path / "store")))
    w.session.generations.learn((4,))
    runs = PipelineRuns(FakeCoordinator(keys_max).get, w.store)
    w.hosting.runs = w.processor.pipelines.runs = runs
    w.api.sketches = SetSketches
    w.lease = Lease(lease_ms=600_000).renewed(w.clock.monotonic_ms())
    return w


async def until(condition: Any) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)


def merge(w: Worker, p: int, users: int) -> int:
    """Stand in for a micro-batch: `users` keys, one order each; the dead letters' count."""
    rt = w.parts[p]
    assert rt.run is not None and rt.spec_state is not None
    batch = {f"u{i:04d}": {"orders": 1, "spent": i} for i in range(users)}
    firsts = {k: i for i, k in enumerate(batch)}
    dead = rt.spec_state.merge(rt.run.outputs, batch, firsts, rt.run.max_keys, SetSketches())
    rt.offset += users
    return len(dead)


async def test_a_hosted_partitions_state_is_a_store_read_by_key_and_gone_once_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_api, "STATE_ROWS_MAX", 2)
    w = make_worker(tmp_path)
    p = OLD_FIRST
    try:
        await w.hosting.host(HostRequest(partition=p, epoch=3))
        live = w.parts[p].spec_state
        assert live is not None and live.store.directory.parent == tmp_path / "state" / STORES_DIR
        merge(w, p, 5)
        async with TestClient(TestServer(w.app())) as client:
            resp = await client.get(f"/v1/partitions/{p}/keys/u0003")
            assert resp.status == 200
            assert (await resp.json())["orders"] == 1
            resp = await client.get(f"/v1/partitions/{p}/keys/nobody")
            assert resp.status == 404 and (await resp.json())["error"] == "not_found"
            resp = await client.get(f"/v1/partitions/{p}/state")
            body = await resp.json()
            assert [r["key"] for r in body["rows"]] == ["u0000", "u0001"] and body["truncated"]
        reply = await w.hosting.release(ReleaseRequest(partition=p, epoch=3))
        assert p not in w.parts
        await until(lambda: not live.store.directory.exists())
        # Hosted again from the released checkpoint: a fresh store, the same rows.
        sent = SentCheckpoint(offset=reply.checkpoint.offset, uri=reply.checkpoint.uri, epoch=3)
        await w.hosting.host(HostRequest(partition=p, epoch=4, checkpoint=sent))
        again = w.parts[p].spec_state
        assert again is not None and again.store.directory != live.store.directory
        assert len(again) == 5 and again.values_of(["u0004"]).values["u0004"]["spent"] == 4
    finally:
        await w.client.close()


@pytest.mark.parametrize("setting", [0, 4])
async def test_a_recorded_pipelines_key_limit_is_its_own_setting_and_0_is_none(
    tmp_path: Path, setting: int
) -> None:
    """The worker's --max-keys-per-partition is `default`'s: a recorded pipeline whose
    setting is 0 takes every key (its state is on disk); a positive one caps it."""
    w = make_worker(tmp_path, setting)
    p = OLD_FIRST
    try:
        await w.hosting.host(HostRequest(partition=p, epoch=1))
        flag = w.settings.max_keys_per_partition
        dead = merge(w, p, flag + 1)
        live = w.parts[p].spec_state
        assert live is not None
        assert (len(live), dead) == ((flag + 1, 0) if setting == 0 else (4, flag + 1 - 4))
    finally:
        await w.client.close()
